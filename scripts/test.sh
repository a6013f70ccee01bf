#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite through CTest;
# then the same suite under AddressSanitizer+UBSan and under ThreadSanitizer
# (scripts/sanitize.sh; skip with ACTORPIPE_SANITIZERS=0), and each fuzz
# target for a short while (tests/fuzz/run.sh; skip with ACTORPIPE_FUZZ=0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
(cd "${ACTORPIPE_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "${ACTORPIPE_TEST_JOBS:-2}")
if [[ ${ACTORPIPE_FUZZ:-1} != 0 ]]; then
  bash "$root/tests/fuzz/run.sh"
fi
if [[ ${ACTORPIPE_SANITIZERS:-1} != 0 ]]; then
  bash "$root/scripts/sanitize.sh"
fi
