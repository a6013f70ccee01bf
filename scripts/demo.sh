#!/usr/bin/env bash
# Sets everything up, builds, and runs the demo: two processes exchange
# messages with payloads and tensors and report what they chose and how fast.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
"${ACTORPIPE_BUILD_DIR:-$root/build}/examples/actorpipe-demo"
