#!/usr/bin/env bash
# Proves that README's two quick-start commands work on a bare Debian 12: builds a minimal Debian
# root with debootstrap in a temporary folder, copies a clean clone of this repository's HEAD into
# it, and runs both commands there under chroot (the training budget shortened), failing on any
# error or on a warning in the first command's output. Needs root (debootstrap, mount, chroot).
#
#   scripts/fresh-check.sh [--cache DIR] [--budget 20s] [--keep]
#
# --cache DIR keeps the bootstrapped root as a tarball in DIR and reuses it (local runs; CI works
# without it). --keep leaves the root folder for inspection. DEBIAN_MIRROR overrides the mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
CACHE="" BUDGET="20s" KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "fresh-check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
if [ "$(id -u)" != 0 ]; then echo "fresh-check: needs root (debootstrap, mount, chroot)" >&2; exit 2; fi

# The README's commands: the first two ```sh blocks of the "Quick start" section, one line each.
mapfile -t CMDS < <(awk '/^## Quick start/{q=1} q&&/^```sh/{b=1;next} q&&b&&/^```/{b=0;n++;if(n==2)exit;next} q&&b' README.md)
if [ ${#CMDS[@]} -ne 2 ]; then echo "fresh-check: README.md has no two one-line quick-start commands" >&2; exit 1; fi
MAIN_CMD=$(sed -E "s/--budget [^ ]+/--budget $BUDGET/" <<<"${CMDS[0]}")
TEST_CMD="${CMDS[1]}"

command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }

T0=$(date +%s)
ROOT=$(mktemp -d /var/tmp/clocklm-fresh.XXXXXX)
cleanup() {
  for m in dev/pts dev sys proc; do
    if mountpoint -q "$ROOT/$m"; then umount -l "$ROOT/$m" || true; fi
  done
  # --one-file-system: never descends into a mount that failed to come off.
  if [ "$KEEP" = 1 ]; then echo "fresh-check: root kept at $ROOT"; else rm -rf --one-file-system "$ROOT"; fi
}
trap cleanup EXIT

stage() { echo "fresh-check: [$(( $(date +%s) - T0 ))s] $*"; }

TARBALL=""
if [ -n "$CACHE" ]; then mkdir -p "$CACHE"; TARBALL="$CACHE/debian-$SUITE-minbase.tar.gz"; fi
if [ -n "$TARBALL" ] && [ -f "$TARBALL" ]; then
  stage "unpacking cached root $TARBALL"
  tar -xzf "$TARBALL" -C "$ROOT"
else
  stage "debootstrap $SUITE (minbase) from $MIRROR"
  debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 || {
    tail -20 "$ROOT.debootstrap.log" >&2; rm -f "$ROOT.debootstrap.log"; exit 1; }
  rm -f "$ROOT.debootstrap.log"
  if [ -n "$TARBALL" ]; then
    tar -czf "$TARBALL.tmp" -C "$ROOT" . && mv "$TARBALL.tmp" "$TARBALL"
  fi
fi

# Debian's usual sources (the release, its updates and security fixes) and name resolution.
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $SUITE-security main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$ROOT/proc"
mount -t sysfs sys "$ROOT/sys"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"

# A clean clone of HEAD: only committed files, as a user would get them. git is not in the root
# (a user who cloned has it, but nothing else may rely on it), so the clone is made outside.
stage "cloning $(git -C "$REPO" rev-parse --short HEAD) into the root"
git clone -q --no-local "$REPO" "$ROOT/root/clocklm"

in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/clocklm && $1"
}

stage "README command 1: $MAIN_CMD"
OUT="$ROOT/root/main-command.log"
in_root "$MAIN_CMD" 2>&1 | tee "$OUT" || { echo "fresh-check: FAILED: the main command" >&2; exit 1; }
if ! grep -q '^val_bpb ' "$OUT"; then echo "fresh-check: FAILED: no val_bpb line" >&2; exit 1; fi
# clocklm's own warnings are "<part>: warning: ..." (compiler warnings carry file:line: first).
if grep -aE '(^|\r)[a-z]+: warning:' "$OUT" >&2; then
  echo "fresh-check: FAILED: the main command printed the warnings above" >&2
  exit 1
fi
stage "README command 2: $TEST_CMD"
in_root "$TEST_CMD" || { echo "fresh-check: FAILED: the test command" >&2; exit 1; }
stage "PASSED: both README commands ran clean on a fresh Debian $SUITE root"
