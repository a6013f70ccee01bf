#!/usr/bin/env bash
# Runs actorpipe's and OpenMPI's all-reduce benchmarks one after the other,
# for 2 and 4 ranks, in one go (the machine is noisy: compare figures from
# the same run). Usage: benchmarks/group/compare.sh [build dir] [extra args]
# ACTORPIPE_COMPARE_PIPES=1 also runs ours with the host arena off.
set -euo pipefail
build=${1:-build}
shift || true
run=$build/actors/group/actorpipe-run
ours=$build/benchmarks/group/actorpipe-allreduce-bench
mpi=$build/benchmarks/group/mpi-allreduce-bench
mpirun_flags=()
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
for ranks in 2 4; do
  "$run" -n "$ranks" --no-prefix -- "$ours" "$@"
  if [[ ${ACTORPIPE_COMPARE_PIPES:-0} == 1 ]]; then
    echo "# the same on pipes alone (ACTORPIPE_GROUP_ARENA=0)"
    ACTORPIPE_GROUP_ARENA=0 "$run" -n "$ranks" --no-prefix -- "$ours" "$@"
  fi
  if [[ -x $mpi ]]; then
    mpirun "${mpirun_flags[@]}" --oversubscribe -n "$ranks" "$mpi" "$@"
  else
    echo "# $mpi not built (no MPI found at configure time)"
  fi
done
