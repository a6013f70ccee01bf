#!/usr/bin/env bash
# Heap allocations per small round trip, on the client's side of
# actorpipe-bench (issue 14: "no heap allocation per small message in steady
# state"). A malloc counter is preloaded; the bench runs twice, with N and
# 2N round trips, and the difference divided by N is what one round trip
# costs (setup, warm-up and teardown cancel out). The forked server leaves
# with _exit and reports nothing; its side does about the same work.
#   benchmarks/count-allocations.sh [build-dir] [transport] [N]
set -euo pipefail
build=${1:-build}
transport=${2:-shm}
n=${3:-10000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/count.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
static atomic_long calls;
static void* (*next)(size_t);
void* malloc(size_t size) {
  if (!next) next = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
  return next(size);
}
__attribute__((destructor)) static void report(void) {
  char line[64];
  int k = snprintf(line, sizeof line, "mallocs %ld\n", (long)calls);
  if (write(2, line, k) < 0) {}
}
EOF
cc -O2 -shared -fPIC -o "$tmp/count.so" "$tmp/count.c" -ldl
count() {
  LD_PRELOAD="$tmp/count.so" "$build/benchmarks/actorpipe-bench" --transport "$transport" \
    --iterations "$1" --warmup 100 2>&1 >/dev/null | grep -oP '^mallocs \K[0-9]+' | tail -1
}
one=$(count "$n")
two=$(count $((2 * n)))
awk -v a="$one" -v b="$two" -v n="$n" -v t="$transport" \
  'BEGIN { printf "%s, 8 B: %.1f mallocs per round trip on the client side (%d round trips: %d, %d: %d)\n", t, (b - a) / n, n, a, 2 * n, b }'
