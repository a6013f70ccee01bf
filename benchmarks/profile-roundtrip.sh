#!/usr/bin/env bash
# Where the microseconds of one small pipe round trip go (issue 14's profile).
#   benchmarks/profile-roundtrip.sh [build-dir] [transport]     (root: perf -a)
# 1. The round trip's p50 without a profiler: the pipe (actorpipe-bench, 8 B
#    metadata) and the transport alone (actorpipe-transport-bench), same
#    transport, both pinned to CPUs 0 and 1 as always.
# 2. perf samples both CPUs during a longer pipe run. Both CPUs are busy the
#    whole time (each side polls while it waits for the other), so one round
#    trip costs 2 x its mean of CPU time (the mean, not the p50: samples
#    are shares of all the time, tails included). Samples in the polling path (epoll_wait
#    the rings' checks and the clock reads between them) are waiting; every
#    other sample is work, sorted into the kinds below by symbol, and turned
#    into microseconds per round trip as
#    share x 2 x mean of the profiled run.
# The kinds are a reading of symbol names (the classification is the awk
# table at the end): a figure is as good as that reading, not better. One
# kind is both: libuv's turns (epoll_wait with a zero timeout, in the kernel)
# run while waiting too, one turn in 8, but a turn taken between a message
# and its answer is on the round trip's critical path.
set -euo pipefail
build=${1:-build}
transport=${2:-shm}
iterations=${ITERATIONS:-400000}
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

p50() { grep -oP 'p50\s+\K[0-9.]+' | head -1; }
pipe_runs=() transport_runs=()
for round in 1 2 3; do
  pipe_runs+=("$("$build/benchmarks/actorpipe-bench" --transport "$transport" --iterations 20000 --warmup 2000 2>/dev/null | p50)")
  transport_runs+=("$("$build/benchmarks/actorpipe-transport-bench" "$transport" 2>/dev/null | p50)")
done
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
pipe=$(median "${pipe_runs[@]}")
alone=$(median "${transport_runs[@]}")
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $transport, 8 B, medians of 3 runs"
echo "pipe round trip p50:       $pipe us   (runs: ${pipe_runs[*]})"
echo "transport round trip p50:  $alone us   (runs: ${transport_runs[*]})"
awk -v p="$pipe" -v t="$alone" 'BEGIN { printf "pipe layer (difference):   %.2f us\n", p - t }'

perf record -q -F 15000 -a -o "$tmp/perf.data" -- \
  "$build/benchmarks/actorpipe-bench" --transport "$transport" --iterations "$iterations" --warmup 2000 \
  --json >"$tmp/run.txt" 2>/dev/null
mean=$(grep -oP '"mean_us": \K[0-9.]+' "$tmp/run.txt")
echo "profiled run: p50 $(grep -oP '"p50_us": \K[0-9.]+' "$tmp/run.txt") us, mean $mean us (perf's sampling slows it)"
# The bench's threads: its main thread and the loops ("ap." and the loop's
# name, runtime/detail/loop.cc), client and server.
comms=actorpipe-bench,ap.bench-client,ap.bench-server
perf report -i "$tmp/perf.data" --no-children --comm "$comms" --sort dso,sym --stdio \
  --percent-limit 0 2>/dev/null | grep -v '^#' | grep -v '^$' >"$tmp/symbols.txt"

awk -v rt="$mean" '
  function kind(s) {
    if (s ~ /clock_gettime|steady_clock|pollPollers|ShmConnection::poll|checkRings|serveReads|Loop::run/) return "waiting (polling the peer)"
    if (s ~ /epoll_wait|do_syscall_64|fdget|fput|uv_run|libuv|rcu_read|asynccancel|__errno_location|syscall|ep_poll|entry_SYSCALL|exit_to_user|pv_native|\[k\]/) return "libuv turns: epoll_wait system calls"
    if (s ~ /caf::|libcaf|spawnOnLoop|Binding::enqueue|trivial_match_case|anon_send|mailbox/) return "CAF: mailbox element, matching, dispatch"
    if (s ~ /malloc|_int_free|cfree|operator new|operator delete|tcache/) return "heap: malloc/free"
    if (s ~ /_M_manager|_Sp_counted|~deque|deque<|_Deque_base|~Error|~Descriptor|basic_string|_M_mutate|vector</) return "std::function, shared_ptr, string copies"
    if (s ~ /Loop::drainQueue|Loop::post|pthread_mutex|pthread_cond/) return "loop hop: post and drain"
    if (s ~ /wire::|memmove|memcpy|codec/) return "frame encode/decode, copies"
    if (s ~ /PipeCore|readMore|advanceReads|onHeader|onFrame|readBody|Pipe::/) return "pipe state machine and handles"
    if (s ~ /ShmConnection|ConnectionBase|Ring|UvConnection/) return "transport: rings, connection"
    if (s ~ /bench::|actorpipe-bench /) return "the benchmark program"
    return "other"
  }
  match($0, /^ *[0-9.]+%/) {
    share = substr($0, RSTART, RLENGTH); sub(/%/, "", share); share += 0
    rest = substr($0, RSTART + RLENGTH)
    total += share; by[kind(rest)] += share
  }
  END {
    waiting = by["waiting (polling the peer)"]
    printf "samples: %.1f%% waiting, %.1f%% working; work per round trip: %.2f us of CPU\n", \
      100 * waiting / total, 100 * (total - waiting) / total, 2 * rt * (total - waiting) / total
    n = 0
    for (k in by) if (k != "waiting (polling the peer)") order[++n] = k
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (by[order[j]] > by[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
    for (i = 1; i <= n; i++) printf "  %-42s %5.1f%% of samples  %5.2f us per round trip\n", order[i], 100 * by[order[i]] / total, 2 * rt * by[order[i]] / total
  }' "$tmp/symbols.txt"
