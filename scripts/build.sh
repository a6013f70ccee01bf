#!/usr/bin/env bash
# Configures and builds actorpipe into ./build (or $ACTORPIPE_BUILD_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ACTORPIPE_BUILD_DIR:-$root/build}
jobs=${ACTORPIPE_JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${ACTORPIPE_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$build" -j "$jobs"
