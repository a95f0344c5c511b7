#!/usr/bin/env bash
# Builds a self-contained clocklm bundle for a GPU machine that has the CUDA driver and toolkit but
# none of clocklm's Debian packages: a Release CUDA build (sm_80 + sm_90 machine code, all CPU
# kernel variants, no MPI and no NCCL, so the single-GPU check needs neither), the `clocklm` and
# `clocklm_tests` binaries, and every shared library they load that such a machine may lack (oneDNN,
# fmt, PCRE2, zstd, zlib, libgomp, libstdc++, ...) beside them. The binaries find those through an
# $ORIGIN-relative rpath; only glibc, the CUDA driver and the toolkit's cuBLAS/cuBLASLt come from
# the machine (its /usr/local/cuda, or LD_LIBRARY_PATH). The bundle also carries the GPU check
# (bench/gpu_check.sh) and what that runs: the compiled PyTorch peer and its comparison, the HF check,
# and data/, a dataset prepared by this build's `clocklm prepare` for the side-by-side training run
# (train: the corpus's wikinews-000, val: the first 1.5 MB of wiki2018-000, GPT-2's tokenizer; about
# 7.5M train and 320K val tokens, ~11 MiB of the packed bundle). Packed as a .tar.gz (a bare GPU
# machine has gzip but not always zstd); the last line printed is its path.
#
#   scripts/gpu-bundle.sh [--arch "80;90"] [--out DIR] [--jobs N] [--corpus DIR]
#
# --corpus: the shared corpus folder (default /work/shared/data: train/, val/, tokenizers/gpt2/);
# reading its .zst val file needs the zstd command.
# Needs patchelf (installed when missing). The build folder is build-bundle/ and the bundle
# build-bundle/clocklm-bundle/ (both ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
ARCH="80;90" OUTDIR="$REPO/build-bundle" JOBS="$(nproc)" CORPUS="/work/shared/data"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --corpus) CORPUS="$2"; shift 2 ;;
    *) echo "gpu-bundle: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export PATH="/usr/local/cuda/bin:$PATH"
command -v nvcc >/dev/null || { echo "gpu-bundle: nvcc not found (the CUDA toolkit is needed to build the bundle)" >&2; exit 1; }
if ! command -v patchelf >/dev/null; then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq patchelf >/dev/null
fi

BUILD="$REPO/build-bundle/build"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLOCKLM_CUDA=ON -DCLOCKLM_MPI=OFF \
  -DCLOCKLM_NCCL=OFF "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" -DCLOCKLM_TUNE=generic "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target clocklm clocklm_tests

B="$OUTDIR/clocklm-bundle"
rm -rf "$B.tmp" && mkdir -p "$B.tmp/bin" "$B.tmp/lib" "$B.tmp/bench"
cp "$BUILD/clocklm" "$BUILD/clocklm_tests" "$B.tmp/bin/"
strip --strip-unneeded "$B.tmp/bin/clocklm" "$B.tmp/bin/clocklm_tests"

# Libraries the machine provides: glibc's own, the CUDA driver and the toolkit's CUDA runtime and
# BLAS (the bundle must match the machine's driver, and cuBLASLt alone is over 500 MB).
provided='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libcuda|libcudart|libcublas|libcublasLt)\.so'
for bin in "$B.tmp/bin/clocklm" "$B.tmp/bin/clocklm_tests"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ "$name" =~ $provided ]]; then cp -L "$path" "$B.tmp/lib/$name"; fi
done
if ldd "$B.tmp/bin/clocklm" | grep -qE 'lib(mpi|nccl)'; then
  echo "gpu-bundle: the binary links MPI or NCCL" >&2; exit 1
fi
# DT_RPATH (not RUNPATH) on the binaries also serves the libraries' own dependencies.
for bin in "$B.tmp/bin/clocklm" "$B.tmp/bin/clocklm_tests"; do
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib' "$bin"
done
for lib in "$B.tmp"/lib/*; do patchelf --set-rpath '$ORIGIN' "$lib"; done

cp bench/gpu_check.sh bench/torch_peer.py bench/torch_compiled_peer.py bench/peer_data.py bench/gpu_compare.py \
  bench/hf_check.py "$B.tmp/bench/"
# The side-by-side run's dataset: the peer reads these very token files (bench/peer_data.py).
command -v zstd >/dev/null || { echo "gpu-bundle: zstd not found (needed to cut the val text)" >&2; exit 1; }
SRC="$OUTDIR/data-src"
mkdir -p "$SRC"
{ zstd -dc "$CORPUS/val/wiki2018-000.jsonl.zst" || true; } | head -c 1500000 | head -n -1 > "$SRC/val.jsonl"
"$BUILD/clocklm" prepare --input "$CORPUS/train/wikinews-000.jsonl.zst" --val "$SRC/val.jsonl" \
  --tokenizer "$CORPUS/tokenizers/gpt2" --out "$B.tmp/data" -q
glibc=$(for f in "$B.tmp"/bin/* "$B.tmp"/lib/*; do objdump -T "$f"; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "clocklm bundle"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- src tests CMakeLists.txt || echo ' (with uncommitted changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') with $(nvcc --version | tail -1)"
  echo "cuda architectures: $ARCH; cpu kernel variants: all; mpi: off; nccl: off"
  echo "needs from the machine: glibc >= ${glibc#GLIBC_}, the CUDA driver, libcublas.so.13 and libcublasLt.so.13 and libcudart.so.13"
  echo "  (looked for in /usr/local/cuda/lib64, /usr/local/cuda/targets/x86_64-linux/lib, then LD_LIBRARY_PATH)"
  echo "bundled libraries: $(cd "$B.tmp/lib" && ls | tr '\n' ' ')"
  echo "tests: $("$B.tmp/bin/clocklm_tests" --gtest_list_tests 2>/dev/null | grep -c '^  ') test cases listed on the build machine"
  echo "data: $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(", ".join(k + " " + str(v["tokens"]) + " tokens" for k, v in m["splits"].items()))' "$B.tmp/data/manifest.json"), tokenizer $(grep -o '"kind": *"[a-z0-9]*"' "$B.tmp/data/tokenizer.json" | head -1)"
} > "$B.tmp/BUNDLE.txt"
rm -rf "$B" && mv "$B.tmp" "$B"
tar -C "$OUTDIR" -cf - clocklm-bundle | gzip -9 > "$OUTDIR/clocklm-bundle.tar.gz.tmp"
mv "$OUTDIR/clocklm-bundle.tar.gz.tmp" "$OUTDIR/clocklm-bundle.tar.gz"
size=$(stat -c %s "$OUTDIR/clocklm-bundle.tar.gz")
echo "gpu-bundle: $(du -sh "$B" | cut -f1) unpacked, $((size / 1048576)) MiB packed"
if [ "$size" -ge $((64 * 1048576)) ]; then echo "gpu-bundle: the packed bundle is over 64 MiB" >&2; exit 1; fi
echo "$OUTDIR/clocklm-bundle.tar.gz"
