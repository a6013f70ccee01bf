#!/usr/bin/env bash
# Fails on an include against the direction of the library's layers
# (docs/architecture.md, "Layers"), bottom to top:
#   runtime/      the vocabulary: errors, devices, buffers, messages, options,
#                 the loop, the wire format
#   transports/   byte streams between contexts        (may use runtime/)
#   channels/     tensor movers                        (may use transports/)
#   actors/       the cores of Context, Listener, Pipe (actors/detail/), the
#                 handles (actors/handles.cc), dataflow, groups, remote
#   compat/       TensorPipe's names over all of it; nothing includes it
# Inside actors/: the cores never include dataflow, groups or remote;
# dataflow never includes groups or remote; groups never include remote.
#   tests/layers/check.sh [ROOT]      checks the tree at ROOT (default: here)
#   tests/layers/check.sh --self-test shows that a wrong include is caught
set -euo pipefail

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/runtime" "$tmp/channels/basic" "$tmp/actors/detail"
  echo '#include <actorpipe/actors/detail/pipe_core.h>' >"$tmp/runtime/bad.cc"
  echo '#include <actorpipe/transports/context.h>' >"$tmp/channels/basic/fine.cc"
  echo '#include <actorpipe/actors/group/tree.h>' >"$tmp/actors/detail/bad.h"
  out=$("$0" "$tmp" 2>&1) && { echo "self-test: a tree with wrong includes passed"; exit 1; }
  for expected in "runtime/bad.cc" "actors/detail/bad.h"; do
    grep -q "$expected" <<<"$out" || { echo "self-test: $expected not reported"; echo "$out"; exit 1; }
  done
  if grep -q "fine.cc" <<<"$out"; then echo "self-test: a right include was reported"; exit 1; fi
  echo "self-test: both wrong includes reported, the right one not"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# allowed FILE: the folder prefixes a file there may include; a prefix
# written !like/this/ is refused even where a shorter one allows it
allowed() {
  case $1 in
    runtime/*) echo "runtime/" ;;
    transports/*) echo "runtime/ transports/" ;;
    channels/*) echo "runtime/ transports/ channels/" ;;
    actors/remote/*) echo "runtime/ transports/ channels/ actors/" ;;
    actors/group/*) echo "runtime/ transports/ channels/ actors/ !actors/remote/" ;;
    actors/dataflow/*) echo "runtime/ transports/ channels/ actors/ !actors/group/ !actors/remote/" ;;
    actors/*) echo "runtime/ transports/ channels/ actors/ !actors/group/ !actors/dataflow/ !actors/remote/" ;;
    compat/*) echo "runtime/ transports/ channels/ actors/ compat/" ;;
  esac
}

violations=0
while IFS= read -r file; do
  ok=$(allowed "$file")
  [[ -z $ok ]] && continue
  while IFS= read -r included; do
    fine=0
    for prefix in $ok; do
      [[ $prefix != !* && $included == "$prefix"* ]] && fine=1
    done
    for prefix in $ok; do
      [[ $prefix == !* && $included == "${prefix#!}"* ]] && fine=0
    done
    if ((!fine)); then
      echo "$file includes <actorpipe/$included>, against the layers"
      violations=$((violations + 1))
    fi
  done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*<actorpipe/\([^>]*\)>.*|\1|p' "$file")
done < <(find runtime transports channels actors compat -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) 2>/dev/null | sort)

if ((violations)); then
  echo "$violations include(s) against the layers (docs/architecture.md, \"Layers\")"
  exit 1
fi
echo "layers: every include points down"
