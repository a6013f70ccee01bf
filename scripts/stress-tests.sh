#!/usr/bin/env bash
# Runs CTest tests again and again while other processes keep every CPU busy,
# to shake out tests that pass only when the machine is idle (CI's is not),
# and prints how often each test failed.
#   scripts/stress-tests.sh [--tsan|--plain] [REGEX] [ROUNDS]
#     default          the ASan+UBSan build (build-asan, scripts/sanitize.sh's options)
#     --tsan           the TSan build (build-tsan)
#     --plain          ./build
#     REGEX            ctest -R filter (default: every test)
#     ROUNDS           how many times (default 5)
# Load: stress-ng --cpu N (one worker per CPU, installed from Debian when
# missing and we are root); without it, busy shell loops. Each round's log is
# kept under $build/stress/. Exit status: 0 when nothing failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/sanitizer-env.sh"
kind=asan
case ${1:-} in
  --tsan | --plain)
    kind=${1#--}
    shift
    ;;
esac
case $kind in
  asan) sanitizerEnv asan; build=${ACTORPIPE_ASAN_BUILD_DIR:-$root/build-asan} ;;
  tsan) sanitizerEnv tsan; build=${ACTORPIPE_TSAN_BUILD_DIR:-$root/build-tsan} ;;
  plain) build=${ACTORPIPE_BUILD_DIR:-$root/build} ;;
esac
regex=${1:-.}
rounds=${2:-5}
if [[ ! -f $build/CTestTestfile.cmake ]]; then
  echo "stress: no $kind build in $build (scripts/sanitize.sh $kind, or scripts/build.sh for --plain)" >&2
  exit 2
fi

if ! command -v stress-ng >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends stress-ng >/dev/null 2>&1 || true
fi
cpus=$(nproc)
if command -v stress-ng >/dev/null 2>&1; then
  stress-ng --cpu "$cpus" --timeout 0 --quiet &
  load=$!
  loadKind="stress-ng --cpu $cpus"
else
  for ((i = 0; i < cpus; i++)); do (while :; do :; done) & done
  load="$(jobs -p | tr '\n' ' ')"
  loadKind="$cpus busy shell loops"
fi
trap 'kill $load 2>/dev/null || true' EXIT

logs=$build/stress
mkdir -p "$logs"
declare -A failures=()
echo "== stress: ctest -R '$regex' in $build, $rounds rounds, under $loadKind"
for ((round = 1; round <= rounds; round++)); do
  log=$logs/round-$round.log
  start=$(date +%s)
  (cd "$build" && ctest -R "$regex" -j "$cpus" --output-on-failure) >"$log" 2>&1 || true
  failed=$(sed -n '/The following tests FAILED:/,$p' "$log" | awk '/^[[:space:]]*[0-9]+ - /{print $3}')
  for t in $failed; do failures[$t]=$((${failures[$t]:-0} + 1)); done
  echo "round $round: $(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log" || echo 'no summary') ($(($(date +%s) - start)) s)${failed:+; failed: $(echo $failed)}"
done
if ((${#failures[@]} == 0)); then
  echo "== stress: no failures in $rounds rounds"
  exit 0
fi
echo "== stress: failures per test (out of $rounds rounds; logs in $logs):"
for t in "${!failures[@]}"; do echo "  ${failures[$t]}  $t"; done | sort -rn
exit 1
