# Sourced by scripts/sanitize.sh and scripts/stress-tests.sh: the runtime
# options of each sanitizer build, in one place. Any report fails the test
# that produced it; suppressions, each with the reason it is not actorpipe's
# bug, live in tests/sanitizers/.
#   sanitizerEnv asan|tsan   exports the options; sets $sanitize (CMake's list)
sanitizerEnv() {
  local supp
  supp=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/sanitizers
  # allocator_may_return_null=1: an allocation larger than the host can
  # give fails as it does without the sanitizer (null, then bad_alloc),
  # which a test asks for (remote_nodes_test, "... more memory than the
  # host has ..."), instead of ending the process.
  case $1 in
    asan)
      sanitize="address;undefined"
      export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allocator_may_return_null=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:suppressions=$supp/asan.supp"
      export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
      ;;
    tsan)
      sanitize="thread"
      # die_after_fork=0: the multi-process tests fork a child from a process
      # that already runs threads; the child only starts fresh ones.
      export TSAN_OPTIONS="halt_on_error=0:allocator_may_return_null=1:second_deadlock_stack=1:die_after_fork=0:history_size=7:suppressions=$supp/tsan.supp"
      ;;
    *)
      echo "unknown sanitizer '$1' (asan or tsan)" >&2
      return 2
      ;;
  esac
}
