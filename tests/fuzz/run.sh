#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in their own build folder) and
# runs each for a bounded time, starting from the seed corpus in
# tests/fuzz/corpus/. Any crash, hang (-timeout), allocation over
# -malloc_limit_mb or RSS over -rss_limit_mb fails the run; libFuzzer leaves
# the input in $build/artifacts/. Without clang or libFuzzer it says so and
# skips.
#   ACTORPIPE_FUZZ_SECONDS   seconds per target (default 20)
#   ACTORPIPE_FUZZ_TARGETS   which targets (default: all)
#   ACTORPIPE_FUZZ_BUILD_DIR build folder (default build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/fuzz
build=${ACTORPIPE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${ACTORPIPE_FUZZ_SECONDS:-20}
targets=(${ACTORPIPE_FUZZ_TARGETS:-frames hello welcome reject join message challenge auth url shm_address shm_ring pull_descriptor cuda_ipc_descriptor mpt_setup pipe_tensor group_link remote})
cxx=${ACTORPIPE_FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found: skipping the fuzz targets (scripts/setup.sh installs clang)"
  exit 0
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cc"
if ! "$cxx" -fsanitize=fuzzer,address "$probe/p.cc" -o "$probe/p" >/dev/null 2>&1; then
  echo "fuzz: $cxx cannot link libFuzzer (libclang-rt-*-dev missing?): skipping the fuzz targets"
  exit 0
fi

export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j "${ACTORPIPE_JOBS:-$(nproc)}"

mkdir -p "$build/artifacts"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
  work=$build/corpus/$t
  mkdir -p "$work"
  echo "== fuzz: $t for ${seconds} s"
  # -rss_limit_mb: the whole process; -malloc_limit_mb: any single
  # allocation (the decoders check lengths before they allocate).
  status=0
  "$build/fuzz_$t" "$work" "$here/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
    >"$build/$t.log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+[[:space:]]+DONE)' "$build/$t.log" || true
  if ((status != 0)); then
    tail -n 60 "$build/$t.log" >&2
    echo "fuzz: $t FAILED (status $status); reproducer in $build/artifacts/" >&2
    exit 1
  fi
done
echo "== fuzz: all targets passed"
