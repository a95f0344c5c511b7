#!/usr/bin/env bash
# Installs every Debian package clocklm needs to build, test and run its built-in corpus preset,
# then configures and builds into ./build. Used by README's commands and by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(build-essential cmake ninja-build pkg-config
      libdnnl-dev libcli11-dev nlohmann-json3-dev libfmt-dev libzstd-dev zlib1g-dev libpcre2-dev libsnappy-dev
      libcpp-httplib-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin
      sentencepiece libsentencepiece-dev gnuplot-nox)
# Text that Debian ships, used by `clocklm prepare --preset` (see docs/DATA.md).
PKGS+=($(cat scripts/corpus-packages.txt 2>/dev/null || true))
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
