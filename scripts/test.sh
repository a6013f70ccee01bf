#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite through CTest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
cd "${ACTORPIPE_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${ACTORPIPE_TEST_JOBS:-2}"
