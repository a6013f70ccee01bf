#!/usr/bin/env bash
# Fails on a name in actorpipe's own code that breaks its one naming
# convention (docs/architecture.md, "Names"): TensorPipe's, because its API
# is ours and cannot change. Functions and variables are camelCase, types
# PascalCase, enumerators and constants kPascalCase; members end in `_`.
# What this looks at: function declarations and definitions, enumerators and
# type aliases, in runtime/, transports/, channels/ and actors/ (compat/ is
# TensorPipe's names by definition; tests and examples follow the library).
# CAF's and the standard library's customisation points keep their spelling:
# `to_string`, `inspect`, `behavior_type`, `*_atom`; callback types end in
# `_fn` / `_callback_fn` as TensorPipe's do; members that stand in for the
# standard library's (`value_type`, `push_back`, `emplace_back`, `try_lock`,
# `wait_until`) keep its spelling; so does an `override` of a CAF virtual
# (a deserializer's `begin_sequence`, a proxy's `kill_proxy`).
#   tests/layers/names.sh [ROOT]      checks the tree at ROOT (default: here)
#   tests/layers/names.sh --self-test shows that a wrong name is caught
set -euo pipefail

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/actors/dataflow" "$tmp/runtime"
  cat >"$tmp/actors/dataflow/bad.h" <<'EOF'
struct Queue {
  bool try_write(int x) const;
  static Queue make_queue();
  enum class Mode { fast_path, kSlow };
};
EOF
  cat >"$tmp/runtime/fine.h" <<'EOF'
struct Fine {
  bool tryWrite(int x) const { return buffer_.empty() && x.fetch_sub(1); }
  using write_callback_fn = int;
  const char* to_string(int);
  caf::error begin_sequence(size_t& n) override;
  enum class Mode { kFast, kSlow };
};
EOF
  out=$(bash "$0" "$tmp" 2>&1) && { echo "self-test: a tree with wrong names passed"; exit 1; }
  for expected in try_write make_queue fast_path; do
    grep -q "$expected" <<<"$out" || { echo "self-test: $expected not reported"; echo "$out"; exit 1; }
  done
  if grep -q "fine.h" <<<"$out"; then echo "self-test: a right name was reported"; echo "$out"; exit 1; fi
  echo "self-test: every wrong name reported, the right ones not"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
dirs=$(for d in runtime transports channels actors; do [[ -d $d ]] && echo "$d"; done)
files=$(find $dirs \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort)
[[ -n $files ]] || { echo "no sources under $root"; exit 1; }

snake='[a-z][a-z0-9]*(_[a-z0-9]+)+'
allowed='^(to_string|inspect|behavior_type|value_type|push_back|emplace_back|try_lock|wait_until|[a-z0-9_]+_atom|[a-z0-9_]+_fn)$'
violations=0
report() {  # FILE:LINE: text, name
  local name=$2
  [[ $name =~ $allowed ]] && return 0
  echo "$1  ($name: not camelCase; docs/architecture.md, \"Names\")"
  violations=$((violations + 1))
}

# Declarations: a type, then a snake_case name, then "(" (a function) at the
# start of a statement; calls come after ".", "->", "::", "return" or "(".
while IFS= read -r hit; do
  line=${hit#*:*:}
  # An override is named by its base class.
  grep -qP "\)\s*(const\s*)?(noexcept\s*)?override\b" <<<"$line" && continue
  name=$(grep -oP "(?<=[\w>&*\s])$snake(?=\s*\()" <<<"$line" | head -1)
  [[ -n $name ]] && report "$hit" "$name"
done < <(grep -nP "^\s*(template\s*<[^>]*>\s*)?((static|inline|constexpr|virtual|explicit|friend|const|unsigned)\s+)*(?!return\b|else\b|new\b|delete\b|throw\b|case\b|co_\w+\b)[A-Za-z_][\w:<>,]*(\s*<[^;()]*>)?[\s*&]+$snake\s*\(" $files | grep -v "^[^:]*:[0-9]*:\s*//")

# Type aliases.
while IFS= read -r hit; do
  name=$(grep -oP "(?<=using )$snake(?=\s*=)" <<<"${hit#*:*:}")
  [[ -n $name ]] && report "$hit" "$name"
done < <(grep -nP "^\s*using $snake\s*=" $files)

# Enumerators: the lines of an enum's body.
for f in $files; do
  awk -v f="$f" '
    /enum (class|struct) [A-Za-z_0-9]+( : [a-z_:0-9]+)? *\{ *$/ { inside = 1; next }
    inside && /^\s*\}/ { inside = 0 }
    inside { print f ":" NR ":" $0 }
    /enum (class|struct) [A-Za-z_0-9]+( : [a-z_:0-9]+)? *\{.*\}/ {
      body = $0; sub(/.*\{/, "", body); sub(/\}.*/, "", body); print f ":" NR ":" body
    }' "$f"
done | while IFS= read -r hit; do
  for name in $(grep -oP "(?<![\w:])$snake(?=\s*(,|=|$|//))" <<<"${hit#*:*:}"); do
    echo "$hit  ($name: enumerators are kPascalCase; docs/architecture.md, \"Names\")"
  done
done >/tmp/names.$$ || true
if [[ -s /tmp/names.$$ ]]; then
  cat /tmp/names.$$
  violations=$((violations + $(wc -l </tmp/names.$$)))
fi
rm -f /tmp/names.$$

if ((violations > 0)); then
  echo "$violations name(s) against the convention"
  exit 1
fi
echo "names: every declaration in $(wc -w <<<"$files") files follows the convention"
