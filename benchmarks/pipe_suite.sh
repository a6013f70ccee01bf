#!/usr/bin/env bash
# Runs each pipe benchmark case REPEAT times (default 5) and prints the median
# of the per-run medians, the table docs/benchmarks.md quotes.
# usage: benchmarks/pipe_suite.sh [build-dir] [baseline-build-dir]
# With a baseline, the two builds' runs alternate (A B A B ...) so both see
# the same machine, and each line ends with the ratio of p50s (this / baseline).
# ONLY=regex runs the cases whose names match (e.g. ONLY='8 B|1 KiB').
set -euo pipefail
build=${1:-build}
baseline=${2:-}
bench=$build/benchmarks/actorpipe-bench
repeat=${REPEAT:-5}
cases=(
  "tcp+basic, 8 B metadata|--iterations 5000 --warmup 500"
  "tcp+basic, 8 B metadata, no polling|--iterations 2000 --warmup 200 --poll-us 0"
  "tcp+basic, 1 KiB payload|--payloads 1 --payload-size 1024 --iterations 5000 --warmup 500"
  "tcp+basic, 1 KiB tensor|--tensors 1 --tensor-size 1024 --iterations 5000 --warmup 500"
  "tcp+basic, 16 MiB tensor|--tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "tcp+basic, 64 MiB tensor|--tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "tcp+mpt(2), 64 MiB tensor|--channel mpt --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "tcp+mpt(2), 64 MiB tensor, unpinned|--channel mpt --no-pin --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "shm+basic, 8 B metadata|--transport shm --iterations 20000 --warmup 2000"
  "shm+basic, 1 KiB tensor|--transport shm --tensors 1 --tensor-size 1024 --iterations 20000 --warmup 2000"
  "shm+cma, 1 KiB tensor|--transport shm --channel cma --tensors 1 --tensor-size 1024 --iterations 20000 --warmup 2000"
  "shm+basic, 16 MiB tensor|--transport shm --tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "shm+cma, 16 MiB tensor|--transport shm --channel cma --tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
  "shm+basic, 64 MiB tensor|--transport shm --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "shm+cma, 64 MiB tensor|--transport shm --channel cma --tensors 1 --tensor-size 67108864 --iterations 12 --warmup 2"
  "one process, shm+xth, 1 KiB tensor|--in-process --transport shm --channel xth --tensors 1 --tensor-size 1024 --iterations 20000 --warmup 2000"
  "one process, shm+basic, 1 KiB tensor|--in-process --transport shm --tensors 1 --tensor-size 1024 --iterations 20000 --warmup 2000"
  "one process, shm+xth, 16 MiB tensor|--in-process --transport shm --channel xth --tensors 1 --tensor-size 16777216 --iterations 40 --warmup 4"
)
summarize='
import json, statistics, sys
text, runs, pos, dec = sys.stdin.read(), [], 0, json.JSONDecoder()
while True:
    pos = text.find("{", pos)
    if pos < 0: break
    doc, pos = dec.raw_decode(text, pos)
    runs.append(doc)
r = [x["results"][0] for x in runs]
med = lambda k: statistics.median(v[k] for v in r)
print("%.3f %.3f %.4f" % (med("p50_us"), med("p99_us"), med("gb_per_s")))
'
if [[ -z $baseline ]]; then
  printf "%-42s %12s %12s %12s\n" "case" "p50 RTT us" "p99 RTT us" "GB/s/dir"
else
  printf "%-42s %12s %12s %12s %12s %8s\n" "case" "p50 us" "base p50" "GB/s/dir" "base GB/s" "ratio"
fi
for c in "${cases[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  [[ -z ${ONLY:-} || $name =~ ${ONLY} ]] || continue
  mine=$(mktemp)
  theirs=$(mktemp)
  for ((i = 0; i < repeat; i++)); do
    # shellcheck disable=SC2086
    "$bench" $args --json >>"$mine"
    # shellcheck disable=SC2086
    [[ -z $baseline ]] || LD_LIBRARY_PATH=$baseline "$baseline/benchmarks/actorpipe-bench" $args --json >>"$theirs"
  done
  read -r p50 p99 gbs < <(python3 -c "$summarize" <"$mine")
  if [[ -z $baseline ]]; then
    printf "%-42s %12.1f %12.1f %12.3f\n" "$name" "$p50" "$p99" "$gbs"
  else
    read -r bp50 bp99 bgbs < <(python3 -c "$summarize" <"$theirs")
    printf "%-42s %12.1f %12.1f %12.3f %12.3f %8.2f\n" "$name" "$p50" "$bp50" "$gbs" "$bgbs" \
      "$(python3 -c "print($p50 / $bp50)")"
  fi
  rm -f "$mine" "$theirs"
done
