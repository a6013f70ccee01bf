#!/usr/bin/env bash
# Builds the whole project and runs the whole CTest suite under sanitizers,
# each kind in its own build folder:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer, LeakSanitizer on  ($root/build-asan)
#   tsan  ThreadSanitizer                                                   ($root/build-tsan)
# Usage: scripts/sanitize.sh [asan] [tsan]   (both when none is named)
# Runtime options: scripts/sanitizer-env.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/sanitizer-env.sh"
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
for kind in "${kinds[@]}"; do
  sanitizerEnv "$kind"
  # ASan+UBSan builds at -O1 with line tables only (-g1: reports still name
  # file and line): its instrumented code took 4.2 times the plain build's
  # compile time at -O2 -g (4,321 s of CPU against 1,022 on 2026-11-29), over
  # a third of CI's budget; one heavy test file compiles in 66 s instead of
  # 106. -O1 is what ASan's own documentation suggests. TSan keeps -O2 -g
  # (1.1 times the plain build).
  # No benchmark runs under a sanitizer: their programs are not built.
  flags=(-DACTORPIPE_BUILD_BENCHMARKS=OFF)
  case $kind in
    asan)
      build=${ACTORPIPE_ASAN_BUILD_DIR:-$root/build-asan}
      flags+=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
      ;;
    tsan) build=${ACTORPIPE_TSAN_BUILD_DIR:-$root/build-tsan} ;;
  esac
  echo "== sanitize: $kind ($sanitize) in $build"
  start=$(date +%s)
  ACTORPIPE_BUILD_DIR=$build bash "$root/scripts/build.sh" "-DACTORPIPE_SANITIZE=$sanitize" "${flags[@]}"
  built=$(date +%s)
  (cd "$build" && ctest --output-on-failure -j "${ACTORPIPE_TEST_JOBS:-2}")
  echo "== sanitize: $kind passed (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
done
