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
  case $kind in
    asan) build=${ACTORPIPE_ASAN_BUILD_DIR:-$root/build-asan} ;;
    tsan) build=${ACTORPIPE_TSAN_BUILD_DIR:-$root/build-tsan} ;;
  esac
  echo "== sanitize: $kind ($sanitize) in $build"
  start=$(date +%s)
  ACTORPIPE_BUILD_DIR=$build bash "$root/scripts/build.sh" "-DACTORPIPE_SANITIZE=$sanitize"
  built=$(date +%s)
  (cd "$build" && ctest --output-on-failure -j "${ACTORPIPE_TEST_JOBS:-2}")
  echo "== sanitize: $kind passed (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
done
