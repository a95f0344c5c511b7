# A bare Debian 12 root for checks that must see what a fresh machine sees (sourced by
# scripts/fresh-check.sh and scripts/bundle-check.sh; needs root for debootstrap, mount, chroot).
#   debian_root_make CACHE_DIR   -> sets ROOT to a new minbase root (CACHE_DIR "" = no cache; else
#                                   the bootstrapped root is kept there as a tarball and reused)
#   debian_root_mount            -> proc, sys, dev, dev/pts mounted inside ROOT
#   debian_root_cleanup KEEP     -> unmounts everything under ROOT and removes it (KEEP=1 leaves it)
#   in_root COMMAND [DIR]        -> runs COMMAND with bash in ROOT, in DIR (default /root), clean env
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOT=""

debian_root_make() {
  local cache="$1" tarball=""
  command -v debootstrap >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
  ROOT=$(mktemp -d /var/tmp/clocklm-root.XXXXXX)
  if [ -n "$cache" ]; then mkdir -p "$cache"; tarball="$cache/debian-$DEBIAN_SUITE-minbase.tar.gz"; fi
  if [ -n "$tarball" ] && [ -f "$tarball" ]; then
    tar -xzf "$tarball" -C "$ROOT"
  else
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$ROOT" "$DEBIAN_MIRROR" >"$ROOT.debootstrap.log" 2>&1 || {
      tail -20 "$ROOT.debootstrap.log" >&2; rm -f "$ROOT.debootstrap.log"; return 1; }
    rm -f "$ROOT.debootstrap.log"
    if [ -n "$tarball" ]; then tar -czf "$tarball.tmp" -C "$ROOT" . && mv "$tarball.tmp" "$tarball"; fi
  fi
}

debian_root_mount() {
  mount -t proc proc "$ROOT/proc"
  mount -t sysfs sys "$ROOT/sys"
  mount --bind /dev "$ROOT/dev"
  mount --bind /dev/pts "$ROOT/dev/pts"
}

debian_root_cleanup() {
  [ -n "$ROOT" ] || return 0
  # Deepest mounts first; --one-file-system never descends into one that failed to come off.
  local m
  for m in $(awk -v r="$ROOT/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
  if [ "${1:-0}" = 1 ]; then echo "root kept at $ROOT"; else rm -rf --one-file-system "$ROOT"; fi
}

in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd ${2:-/root} && $1"
}
