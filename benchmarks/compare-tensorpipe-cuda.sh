#!/usr/bin/env bash
# actorpipe against TensorPipe with CUDA tensors, side by side on a GPU
# machine: builds TensorPipe's benchmark_pipe with CUDA from its source
# (its third_party/libnop and third_party/libuv filled in: TP_BUILD_LIBUV),
# then runs each case ROUNDS times alternating the two, both over shm, the
# server pinned to CPU 0 and the client to CPU 1, without MPS and then
# under MPS (nvidia-cuda-mps-control, where it exists: MPS=0 skips it).
# Prints each run's stream-synced p50 (µs), TensorPipe's from its second
# table, actorpipe's from actorpipe-bench --tensor-type cuda.
#
# usage: benchmarks/compare-tensorpipe-cuda.sh TENSORPIPE_SRC ACTORPIPE_BENCH
# env: ROUNDS (2), TP_BUILD (/tmp/tensorpipe-cuda-build), MPS (1)
#
# TensorPipe's cuda_basic aborts from 16 MiB on the H100 (gpu/README.md):
# its cases stop at 1 MiB.
set -uo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
tp_src=$1
ap=$2
rounds=${ROUNDS:-2}
build=${TP_BUILD:-/tmp/tensorpipe-cuda-build}
tp=$build/tensorpipe/benchmark/benchmark_pipe
if [[ ! -x $tp ]]; then
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  cmake -S "$tp_src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTP_USE_CUDA=ON \
    -DTP_BUILD_BENCHMARK=ON -DTP_BUILD_LIBUV=ON -DCMAKE_POLICY_DEFAULT_CMP0146=OLD > "$build.configure.log" 2>&1 &&
    cmake --build "$build" --target benchmark_pipe -j "$(nproc)" > "$build.build.log" 2>&1
  if [[ ! -x $tp ]]; then
    tail -25 "$build.configure.log" "$build.build.log" 2>/dev/null
    echo "compare-cuda: TensorPipe's benchmark_pipe did not build"
    exit 1
  fi
fi

# name | size | round trips
cases=("cuda_ipc|8|300" "cuda_ipc|67108864|100" "cuda_basic|8|300" "cuda_basic|1048576|100")

tp_once() {  # channel size round-trips: the stream-synced table's p50
  local address="shm://tp-cuda-$$-$RANDOM" log
  mkdir -p "$build.logs"
  log=$build.logs/$1-$2-$RANDOM.txt  # kept: its raw tables
  local flags=(--transport shm --channel "$1" --tensor-type cuda --num-tensors 1 --tensor-size "$2" --num-round-trips "$3")
  taskset -c 0 "$tp" --mode listen --address "$address" "${flags[@]}" > /dev/null 2>&1 &
  local server=$!
  sleep 0.3
  timeout 120 taskset -c 1 "$tp" --mode connect --address "$address" "${flags[@]}" > "$log" 2>&1
  wait "$server" 2> /dev/null
  # Two tables, each a "chunk-size # avg p50 ..." header then a row: the second's p50.
  local p50
  p50=$(awk '/^chunk-size/ { n++; next } n == 2 && NF >= 4 { print $4; exit }' "$log")
  echo "${p50:-?}"
}

ap_once() {
  timeout 120 "$ap" --transport shm --channel "$1" --tensor-type cuda --tensors 1 --tensor-size "$2" \
    --iterations "$3" --warmup 10 2> /dev/null | awk '/ p50 / { for (i = 1; i <= NF; ++i) if ($i == "p50") { print $(i + 1); exit } }'
}

echo "# $(nvidia-smi -L 2> /dev/null | head -1), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), $rounds rounds alternating"
printf '%-6s %-28s %s\n' "MPS" "case" "p50 us per round: TensorPipe | actorpipe"
for mps in off on; do
  if [[ $mps == on ]]; then
    [[ ${MPS:-1} == 0 ]] && break
    command -v nvidia-cuda-mps-control > /dev/null || { echo "(no nvidia-cuda-mps-control: no MPS rows)"; break; }
    nvidia-cuda-mps-control -d && sleep 1
  fi
  for entry in "${cases[@]}"; do
    IFS='|' read -r channel size trips <<< "$entry"
    tp_runs="" ap_runs=""
    for ((r = 0; r < rounds; ++r)); do
      tp_runs+=" $(tp_once "$channel" "$size" "$trips")"
      ap_runs+=" $(ap_once "$channel" "$size" "$trips")"
    done
    printf '%-6s %-28s %s |%s\n' "$mps" "$channel, $size B" "$tp_runs" "$ap_runs"
  done
  [[ $mps == on ]] && echo quit | nvidia-cuda-mps-control
done
