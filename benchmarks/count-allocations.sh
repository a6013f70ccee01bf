#!/usr/bin/env bash
# Heap allocations per small round trip, on the client's side of
# actorpipe-bench (issue 14: "no heap allocation per small message in steady
# state"). A malloc counter is preloaded; the bench runs twice, with N and
# 2N round trips, and the difference divided by N is what one round trip
# costs (setup, warm-up and teardown cancel out). The forked server leaves
# with _exit and reports nothing; its side does about the same work.
#
# Each malloc is also attributed: the first frame of its stack outside the C
# and C++ runtimes is either in the benchmark program itself (its callbacks
# are std::functions holding shared_ptrs, it copies each Descriptor: what a
# user's code costs) or in the libraries. The library's share is what the
# issue's target is about.
#   benchmarks/count-allocations.sh [build-dir] [transport] [N]
# With transport "remote:ROW" it counts the asking process of
# actorpipe-remote-bench's row named ROW instead (issue 12; e.g.
# "remote:8 B, shm, on loop"): that bench warms up with N/10 round trips of
# its own, so the difference is divided by 1.1 N.
set -euo pipefail
build=${1:-build}
transport=${2:-shm}
n=${3:-10000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/count.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static atomic_long calls, fromProgram;
static __thread int inside;
static void* (*next)(size_t);
// Whether the first frame outside libc, libstdc++ and this counter is in
// the benchmark program.
static int fromBenchmark(void) {
  void* frames[8];
  int n = backtrace(frames, 8);
  for (int i = 1; i < n; ++i) {
    Dl_info info;
    if (!dladdr(frames[i], &info) || !info.dli_fname) return 0;
    const char* name = info.dli_fname;
    if (strstr(name, "libc.so") || strstr(name, "libstdc++") || strstr(name, "count.so")) continue;
    return strstr(name, "-bench") != NULL;  /* actorpipe-bench, actorpipe-remote-bench */
  }
  return 0;
}
void* malloc(size_t size) {
  if (!next) next = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
  if (!inside) {
    inside = 1;  // backtrace and dladdr may allocate themselves
    if (fromBenchmark()) atomic_fetch_add_explicit(&fromProgram, 1, memory_order_relaxed);
    inside = 0;
  }
  return next(size);
}
__attribute__((destructor)) static void report(void) {
  char line[96];
  int k = snprintf(line, sizeof line, "mallocs %ld %ld\n", (long)calls, (long)fromProgram);
  if (write(2, line, k) < 0) {}
}
EOF
cc -O2 -shared -fPIC -o "$tmp/count.so" "$tmp/count.c" -ldl
count() {
  if [[ $transport == remote:* ]]; then
    LD_PRELOAD="$tmp/count.so" "$build/benchmarks/remote/actorpipe-remote-bench" --rounds 1 \
      --iterations "$1" --only "${transport#remote:}" 2>&1 >/dev/null | grep -oP '^mallocs \K[0-9]+ [0-9]+' | head -1
  else
    LD_PRELOAD="$tmp/count.so" "$build/benchmarks/actorpipe-bench" --transport "$transport" \
      --iterations "$1" --warmup 100 2>&1 >/dev/null | grep -oP '^mallocs \K[0-9]+ [0-9]+' | tail -1
  fi
}
one=$(count "$n")
two=$(count $((2 * n)))
per=$n
[[ $transport == remote:* ]] && per=$((n + n / 10))
awk -v a="$one" -v b="$two" -v n="$n" -v per="$per" -v t="$transport" 'BEGIN {
  split(a, x, " "); split(b, y, " ");
  all = (y[1] - x[1]) / per; program = (y[2] - x[2]) / per; lib = all - program; if (lib < 0.05) lib = 0;
  printf "%s, 8 B: %.1f mallocs per round trip on the client side: %.1f in the libraries, %.1f in the benchmark program (%d round trips: %d, %d: %d)\n", t, all, lib, program, n, x[1], 2 * n, y[1] }'
