#!/usr/bin/env bash
# Builds actorpipe with CUDA and runs its CUDA tests and CUDA benchmarks, in
# one command, on a machine with a GPU and the CUDA toolkit (docs/cuda.md).
#
#   bash scripts/gpu-check.sh --fetch      where Debian 12's packages can be
#                                          downloaded: puts CAF, libuv,
#                                          doctest, ... as .debs in .device/debs
#   bash scripts/gpu-check.sh [--quick]    on the GPU machine (--quick: only
#                                          the CUDA tests and the benchmark) (any Linux with
#                                          CUDA and CMake; no package registry
#                                          needed): unpacks those .debs into a
#                                          sysroot, builds, tests, measures
#
# Where the packages are installed (a Debian 12 machine with a GPU), the
# .debs are not needed: it builds against the system's. Results go to
# stdout and to $GPU_CHECK_OUT (default /tmp/actorpipe-gpu-check).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == --fetch ]]; then
  mkdir -p "$root/.device/debs"
  grep -qx '/.device/' "$root/.git/info/exclude" 2>/dev/null || echo '/.device/' >> "$root/.git/info/exclude"
  (cd "$root/.device/debs" && apt-get download libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 \
     libuv1 libuv1-dev doctest-dev libibverbs-dev libibverbs1 libssl-dev 2>&1 | tail -1)
  echo "gpu-check: packages in .device/debs; take the checkout (with .device) to the GPU machine"
  exit 0
fi
quick=0
[[ ${1:-} == --quick ]] && quick=1

out=${GPU_CHECK_OUT:-/tmp/actorpipe-gpu-check}
build=${GPU_CHECK_BUILD:-/tmp/actorpipe-gpu-build}
mkdir -p "$out"
log() { echo "gpu-check: $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

device=$(nvidia-smi -L 2>/dev/null | head -1)
if [[ -z $device ]]; then
  if ! [[ -e /dev/nvidiactl ]]; then
    log "no CUDA device (no nvidia-smi, no /dev/nvidiactl): nothing to check here"
    exit 2
  fi
  device="an NVIDIA device (/dev/nvidiactl)"
fi
log "device: $device"

# CAF, libuv and doctest: the system's, or the carried .debs unpacked.
if [[ -d $root/.device/debs ]] && ! [[ -f /usr/include/caf/all.hpp ]]; then
  sysroot=/opt/actorpipe-sysroot
  mkdir -p $sysroot
  for deb in "$root"/.device/debs/*.deb; do dpkg -x "$deb" $sysroot; done
  export CMAKE_PREFIX_PATH=$sysroot/usr CPATH=$sysroot/usr/include
  export LD_LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu
fi
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
SECONDS=0
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DACTORPIPE_CUDA=ON \
     > "$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; log "configure failed"; exit 1
fi
targets=()
(( quick )) && targets=(--target cuda_channels_test cuda_ipc_test cuda_tensor_test actorpipe-bench pipe_errors_test
  pipe_scale_test pipe_staging_test)
# Everything that builds is tested (-k 0: a target this machine's toolchain
# cannot link, such as the LTO header test, does not stop the rest); the
# CUDA tests and the benchmark must build.
keep=()
[[ ${generator[*]} == *Ninja* ]] && keep=(-- -k 0)
cmake --build "$build" -j "$(nproc)" "${targets[@]}" "${keep[@]}" > "$out/build.log" 2>&1 ||
  log "some targets failed to build: $(grep -c '^FAILED' "$out/build.log") (see build.log)"
for needed in tests/cuda_channels_test tests/cuda_ipc_test tests/cuda_tensor_test benchmarks/actorpipe-bench; do
  if ! [[ -x $build/$needed ]]; then
    grep -m5 -B2 -A12 ' error' "$out/build.log"; log "build failed: $needed"; exit 1
  fi
done
log "built in ${SECONDS}s"

# The CUDA tests, then the pipe tests (the CUDA channels are registered by
# default: nothing else may change with a device there). GPU_CHECK_TESTS=0
# skips them (a build for measuring only).
rc=0
if [[ ${GPU_CHECK_TESTS:-1} != 0 ]]; then
  (cd "$build" && ctest -R 'cuda|pipe_errors|pipe_scale|pipe_staging' --output-on-failure --timeout 300) > "$out/ctest-cuda.log" 2>&1
  rc=$?
  tail -8 "$out/ctest-cuda.log" | tee -a "$out/summary.txt"
fi
if (( ! quick )) && [[ ${GPU_CHECK_TESTS:-1} != 0 ]]; then
  (cd "$build" && ctest -R '^pipe_|transports_test' -j 4 --output-on-failure --timeout 300) > "$out/ctest-pipes.log" 2>&1 \
    || rc=1
  tail -4 "$out/ctest-pipes.log" | tee -a "$out/summary.txt"
fi

# The benchmarks: the copy ceilings, cuda_ipc between two processes over
# shm, cuda_xth within one, cuda_basic over tcp and shm, and the CPU
# channel of the same run for scale.
if [[ ${GPU_CHECK_BENCH:-1} == 0 ]]; then
  log "done in ${SECONDS}s, rc $rc (no benchmarks: GPU_CHECK_BENCH=0); logs in $out"
  exit $rc
fi
bench=$build/benchmarks/actorpipe-bench
{
  echo "## $(date -u +%F) $device, $(nproc) CPUs"
  for size in 8 1048576 16777216 67108864 268435456; do
    $bench --cuda-copy $size --iterations 200
  done
  for size in 8 1048576 16777216 67108864 268435456; do
    iterations=$(( size >= 67108864 ? 100 : 1000 ))
    $bench --transport shm --channel cuda_ipc --tensor-type cuda --tensors 1 --tensor-size $size \
      --iterations $iterations --warmup 20 | grep -v '^  '
  done
  for size in 8 67108864 268435456; do
    $bench --in-process --transport shm --channel cuda_xth --tensor-type cuda --tensors 1 --tensor-size $size \
      --iterations 200 --warmup 20 | grep -v '^  '
  done
  $bench --transport shm --channel cma --tensors 1 --tensor-size 67108864 --iterations 50 --warmup 5 | grep -v '^  '
  # cuda_basic against the CPU channel it rides on (basic, same transport).
  for transport in tcp shm; do
    for size in 8 1048576 67108864 268435456; do
      iterations=$(( size >= 67108864 ? 20 : 500 ))
      $bench --transport $transport --channel cuda_basic --tensor-type cuda --tensors 1 --tensor-size $size \
        --iterations $iterations --warmup 5 | grep -v '^  '
    done
    $bench --transport $transport --channel basic --tensors 1 --tensor-size 67108864 --iterations 20 --warmup 5 \
      | grep -v '^  '
  done
  $bench --transport shm --channel cuda_ipc --tensor-type cuda --tensors 1 --tensor-size 1048576 \
    --iterations 200 --verify | grep -v '^  '
} > "$out/bench.txt" 2>&1 || rc=1
cat "$out/bench.txt"
log "done in ${SECONDS}s, rc $rc; logs in $out"
exit $rc
