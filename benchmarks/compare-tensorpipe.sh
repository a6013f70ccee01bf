#!/usr/bin/env bash
# actorpipe against TensorPipe, side by side in one run. Builds TensorPipe's
# own pipe benchmark (benchmark_pipe) from its public source, then runs each
# case ROUNDS times, alternating TensorPipe and actorpipe-bench, both pinned
# the same way (server on CPU 0, client on CPU 1), and prints each side's
# median p50 (of its rounds' p50s) and their ratio (actorpipe / TensorPipe:
# below 1 is faster).
#
# usage: benchmarks/compare-tensorpipe.sh TENSORPIPE LIBNOP [ACTORPIPE_BUILD]
#   TENSORPIPE, LIBNOP   pytorch/tensorpipe and google/libnop: source trees,
#                        or git repositories (bare ones too; HEAD is exported)
#   ACTORPIPE_BUILD      a build of this repository (default: build)
# env: ROUNDS (3), TP_WORK (build-tensorpipe: where TensorPipe is unpacked
#      and built, reused when there), CASES (a regex over the case names),
#      CUDA_HOME (/usr/local/cuda)
#
# TensorPipe is built as released (CMake, Release, system libuv) with
# TP_USE_CUDA=ON: its benchmark_pipe registers the CUDA channels and calls
# the CUDA runtime whatever the tensors, so it only builds against a CUDA
# toolkit; its cuda_ipc and cuda_gdr channels are left out (they need NVML's
# and InfiniBand's headers, and no case here uses them). One line of its
# benchmark is changed: after each round trip it synchronizes its CUDA
# stream, which on a machine without a GPU driver (these VMs) aborts; the
# copy here does so only when it made a stream (CUDA tensors). That call is
# after the CPU measurement stops, so the figures compared are untouched.
# No toolkit at CUDA_HOME: no TensorPipe side (said, and the script stops).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 2 ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
tp_src=$1
nop_src=$2
ap_build=${3:-$root/build}
rounds=${ROUNDS:-3}
work=${TP_WORK:-$root/build-tensorpipe}
cuda=${CUDA_HOME:-/usr/local/cuda}
ap=$ap_build/benchmarks/actorpipe-bench
[[ -x $ap ]] || { echo "compare: $ap not built (cmake --build $ap_build --target actorpipe-bench)"; exit 1; }
if [[ ! -f $cuda/include/cuda_runtime.h || ! -e $cuda/lib64/libcudart.so ]]; then
  echo "compare: no CUDA toolkit at $cuda: TensorPipe's benchmark_pipe needs its headers and runtime library"
  exit 1
fi

# A source tree from a directory or a git repository.
unpack() {
  local from=$1 to=$2
  rm -rf "$to"
  mkdir -p "$to"
  if git -C "$from" rev-parse --git-dir >/dev/null 2>&1 && ! [[ -f $from/CMakeLists.txt || -d $from/include ]]; then
    git --git-dir="$(git -C "$from" rev-parse --absolute-git-dir)" archive HEAD | tar -x -C "$to"
  else
    cp -a "$from"/. "$to"/
  fi
}

# The revision of a source given as a git repository of its own (bare or
# not); "?" for a plain tree, even one that sits inside another checkout.
revision() {
  local from=$1 top
  if [[ $(git -C "$from" rev-parse --is-bare-repository 2>/dev/null) == true ]] ||
     { top=$(git -C "$from" rev-parse --show-toplevel 2>/dev/null) &&
       [[ -z $(git -C "$from" rev-parse --show-prefix) ]]; }; then
    git -C "$from" rev-parse --short HEAD 2>/dev/null || echo "?"
  else
    echo "?"
  fi
}

bench=$work/build/tensorpipe/benchmark/benchmark_pipe
if [[ ! -x $bench ]]; then
  echo "== building TensorPipe's benchmark_pipe in $work"
  unpack "$tp_src" "$work/src"
  revision "$tp_src" >"$work/REVISION"
  unpack "$nop_src" "$work/src/third_party/libnop"
  sed -i 's|TP_CUDA_CHECK(cudaStreamSynchronize(data.cudaStream.get()));|if (data.cudaStream) { TP_CUDA_CHECK(cudaStreamSynchronize(data.cudaStream.get())); }|' \
    "$work/src/tensorpipe/benchmark/benchmark_pipe.cc"
  cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTP_USE_CUDA=ON \
    -DCUDA_TOOLKIT_ROOT_DIR="$cuda" -DTP_ENABLE_CUDA_IPC=OFF -DTP_ENABLE_CUDA_GDR=OFF -DTP_BUILD_BENCHMARK=ON >/dev/null
  cmake --build "$work/build" --target benchmark_pipe -j "${ACTORPIPE_JOBS:-$(nproc)}"
fi
# What was built: the revision recorded then, else the source's own.
tp_rev=$(cat "$work/REVISION" 2>/dev/null || revision "$tp_src")

# name | TensorPipe's flags | actorpipe-bench's flags. Same round trips and
# payloads on both sides: 8 B of metadata, or one CPU tensor.
cases=(
  "shm + basic, 8 B metadata|--transport shm --channel basic --metadata-size 8 --num-round-trips 20000|--transport shm --iterations 20000 --warmup 2000"
  "tcp + basic, 8 B metadata|--transport uv --channel basic --metadata-size 8 --num-round-trips 5000|--iterations 5000 --warmup 500"
  "tcp + basic, 16 MiB tensor|--transport uv --channel basic --num-tensors 1 --tensor-size 16777216 --tensor-type cpu --num-round-trips 40|--tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "shm + cma, 16 MiB tensor|--transport shm --channel cma --num-tensors 1 --tensor-size 16777216 --tensor-type cpu --num-round-trips 40|--transport shm --channel cma --tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "shm + cma, 64 MiB tensor|--transport shm --channel cma --num-tensors 1 --tensor-size 67108864 --tensor-type cpu --num-round-trips 12|--transport shm --channel cma --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "shm + basic, 16 MiB tensor|--transport shm --channel basic --num-tensors 1 --tensor-size 16777216 --tensor-type cpu --num-round-trips 40|--transport shm --tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "shm + basic, 64 MiB tensor|--transport shm --channel basic --num-tensors 1 --tensor-size 67108864 --tensor-type cpu --num-round-trips 12|--transport shm --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
)

# TensorPipe: a listening and a connecting process, pinned; the connecting
# one prints "chunk-size # avg p50 p75 p90 p95" (µs). Prints the p50.
tp_once() {
  local flags=$1 address
  if [[ $flags == *"--transport uv"* ]]; then
    address="uv://127.0.0.1:$((20000 + RANDOM % 20000))"
  else
    address="shm://actorpipe-compare-$$-$RANDOM"
  fi
  local log
  log=$(mktemp)
  # shellcheck disable=SC2086
  taskset -c 0 "$bench" --mode listen --address "$address" $flags >/dev/null 2>&1 &
  local server=$!
  sleep 0.3  # TensorPipe's connect does not retry: give the listener time to bind
  # shellcheck disable=SC2086
  if ! timeout 300 taskset -c 1 "$bench" --mode connect --address "$address" $flags >"$log" 2>&1; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    echo "nan"
    rm -f "$log"
    return
  fi
  wait "$server" 2>/dev/null || true
  awk 'p { print $4; exit } /^chunk-size/ { p = 1 }' "$log"
  rm -f "$log"
}

# actorpipe-bench pins its server to CPU 0 and itself to CPU 1. Prints the p50.
ap_once() {
  # shellcheck disable=SC2086
  timeout 300 "$ap" $1 2>/dev/null | awk '/ p50 / { for (i = 1; i <= NF; ++i) if ($i == "p50") { print $(i + 1); exit } }'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# TensorPipe $tp_rev (benchmark_pipe) against actorpipe $(git -C "$root" describe --always --dirty) (actorpipe-bench)"
echo "# $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), $rounds rounds alternating, medians of the rounds' p50s"
printf '%-30s %14s %14s %8s\n' "case" "TensorPipe us" "actorpipe us" "ratio"
for entry in "${cases[@]}"; do
  IFS='|' read -r name tp_flags ap_flags <<<"$entry"
  [[ -n ${CASES:-} && ! $name =~ $CASES ]] && continue
  tp_runs="" ap_runs=""
  for ((r = 0; r < rounds; ++r)); do
    tp_runs+=" $(tp_once "$tp_flags")"
    ap_runs+=" $(ap_once "$ap_flags")"
  done
  tp=$(echo "$tp_runs" | median)
  ours=$(echo "$ap_runs" | median)
  ratio=$(awk -v a="$ours" -v b="$tp" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "?" }')
  printf '%-30s %14s %14s %8s   (TensorPipe:%s; actorpipe:%s)\n' "$name" "$tp" "$ours" "$ratio" "$tp_runs" "$ap_runs"
  # Large tensors: each side's GB/s per direction (a round trip moves the
  # tensor once each way) against the copy floor measured now (issue 14:
  # >= 1.2x TensorPipe, >= 0.9x the best memcpy of that size).
  if [[ $name =~ ([0-9]+)\ MiB ]]; then
    bytes=$((BASH_REMATCH[1] << 20))
    floor=$(timeout 120 "$ap" --memcpy "$bytes" --iterations 10 --json 2>/dev/null | grep -oP '"best_gb_per_s": \K[0-9.]+')
    awk -v n="$bytes" -v tp="$tp" -v ap="$ours" -v m="$floor" 'BEGIN {
      t = n / (tp / 2) / 1e3; a = n / (ap / 2) / 1e3;
      printf "%-30s %14.2f %14.2f %8s   GB/s per direction; best memcpy of that size now %.2f GB/s: actorpipe %.2fx, TensorPipe %.2fx of it\n",
        "", t, a, "", m, a / m, t / m }'
  fi
done
