#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) into build-fuzz/ and runs each one,
# failing on any finding (crash, sanitizer report, leak, uncaught exception, broken invariant,
# a single input over 10 s, or an allocation over 2 GiB).
#   scripts/fuzz.sh [SECONDS]       every target for SECONDS each (default 20; CI runs 10)
#   scripts/fuzz.sh --runs N        every target until N executions (the campaign: N = 1000000)
#   FUZZ_TARGETS="fuzz_shard fuzz_jsonl" scripts/fuzz.sh ...   only those targets
# Seeds come from fuzz/corpus/<target>/ (never written to); inputs found on the way are kept in
# build-fuzz/corpus/<target>/ and findings in build-fuzz/artifacts/. Prints one line per target
# with its executions, seconds and coverage.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-max_total_time=20)
case "${1:-}" in
  --runs) limit=(-runs="${2:?--runs needs a count}") ;;
  "") ;;
  *) limit=(-max_total_time="$1") ;;
esac
mkdir -p build-fuzz
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLOCKLM_FUZZ=ON \
  -DCLOCKLM_CPU_VARIANTS=generic -DCLOCKLM_CUDA=OFF -DBUILD_TESTING=OFF > build-fuzz/build.log 2>&1 ||
  { cat build-fuzz/build.log; exit 1; }
cmake --build build-fuzz -j"$(nproc)" >> build-fuzz/build.log 2>&1 || { tail -50 build-fuzz/build.log; exit 1; }
targets=${FUZZ_TARGETS:-$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')}
mkdir -p build-fuzz/artifacts
failed=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/$t.log"
  # Leaks are findings too (ASan's leak check runs at exit); the UBSan options make a report fatal
  # and show where it happened.
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "build-fuzz/fuzz/$t" "${limit[@]}" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$t-" \
       "build-fuzz/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | awk '{print $5}' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    printf '%-22s ok   %10s runs %6s s  cov %s\n' "$t" "$runs" "$secs" "$cov"
  else
    failed=1
    printf '%-22s FAILED (log: %s)\n' "$t" "$log"
    grep -E 'ERROR|SUMMARY|runtime error|invariant|Test unit written' "$log" | head -8 | sed 's/^/    /'
  fi
done
exit $failed
