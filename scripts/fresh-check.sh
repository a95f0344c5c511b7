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
if [ "$(id -u)" != 0 ]; then echo "fresh-check: needs root (debootstrap, mount, chroot)" >&2; exit 2; fi
. scripts/lib/debian-root.sh

# The README's commands: the first two ```sh blocks of the "Quick start" section, one line each.
mapfile -t CMDS < <(awk '/^## Quick start/{q=1} q&&/^```sh/{b=1;next} q&&b&&/^```/{b=0;n++;if(n==2)exit;next} q&&b' README.md)
if [ ${#CMDS[@]} -ne 2 ]; then echo "fresh-check: README.md has no two one-line quick-start commands" >&2; exit 1; fi
MAIN_CMD=$(sed -E "s/--budget [^ ]+/--budget $BUDGET/" <<<"${CMDS[0]}")
TEST_CMD="${CMDS[1]}"

T0=$(date +%s)
trap 'debian_root_cleanup "$KEEP"' EXIT
stage() { echo "fresh-check: [$(( $(date +%s) - T0 ))s] $*"; }

stage "Debian $DEBIAN_SUITE (minbase) from ${CACHE:-$DEBIAN_MIRROR}"
debian_root_make "$CACHE"

# Debian's usual sources (the release, its updates and security fixes) and name resolution.
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR $DEBIAN_SUITE main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main
deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $DEBIAN_SUITE-security main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
debian_root_mount

# A clean clone of HEAD: only committed files, as a user would get them. git is not in the root
# (a user who cloned has it, but nothing else may rely on it), so the clone is made outside.
stage "cloning $(git -C "$REPO" rev-parse --short HEAD) into the root"
git clone -q --no-local "$REPO" "$ROOT/root/clocklm"

stage "README command 1: $MAIN_CMD"
OUT="$ROOT/root/main-command.log"
in_root "$MAIN_CMD" /root/clocklm 2>&1 | tee "$OUT" || { echo "fresh-check: FAILED: the main command" >&2; exit 1; }
if ! grep -q '^val_bpb ' "$OUT"; then echo "fresh-check: FAILED: no val_bpb line" >&2; exit 1; fi
# clocklm's own warnings are "<part>: warning: ..." (compiler warnings carry file:line: first).
if grep -aE '(^|\r)[a-z]+: warning:' "$OUT" >&2; then
  echo "fresh-check: FAILED: the main command printed the warnings above" >&2
  exit 1
fi
stage "README command 2: $TEST_CMD"
in_root "$TEST_CMD" /root/clocklm || { echo "fresh-check: FAILED: the test command" >&2; exit 1; }
stage "PASSED: both README commands ran clean on a fresh Debian $DEBIAN_SUITE root"
