#!/usr/bin/env bash
# Builds the whole project and runs the whole CTest suite under sanitizers,
# each kind in its own build folder:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer, LeakSanitizer on  ($root/build-asan)
#   tsan  ThreadSanitizer                                                   ($root/build-tsan)
# Usage: scripts/sanitize.sh [asan] [tsan]   (both when none is named)
# Any report fails the test that produced it. Suppressions, each with the
# reason it is not actorpipe's bug, live in tests/sanitizers/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
supp=$root/tests/sanitizers
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
for kind in "${kinds[@]}"; do
  case $kind in
    asan)
      sanitize="address;undefined"
      build=${ACTORPIPE_ASAN_BUILD_DIR:-$root/build-asan}
      export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:suppressions=$supp/asan.supp"
      export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
      ;;
    tsan)
      sanitize="thread"
      build=${ACTORPIPE_TSAN_BUILD_DIR:-$root/build-tsan}
      # die_after_fork=0: the multi-process tests fork a child from a process
      # that already runs threads; the child only starts fresh ones.
      export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:die_after_fork=0:history_size=7:suppressions=$supp/tsan.supp"
      ;;
    *)
      echo "sanitize: unknown kind '$kind' (asan or tsan)" >&2
      exit 2
      ;;
  esac
  echo "== sanitize: $kind ($sanitize) in $build"
  start=$(date +%s)
  ACTORPIPE_BUILD_DIR=$build bash "$root/scripts/build.sh" "-DACTORPIPE_SANITIZE=$sanitize"
  built=$(date +%s)
  (cd "$build" && ctest --output-on-failure -j "${ACTORPIPE_TEST_JOBS:-2}")
  echo "== sanitize: $kind passed (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
done
