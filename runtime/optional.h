#pragma once
// TensorPipe exposes `tensorpipe::optional` (a pre-C++17 backport); ours is
// std::optional, so code that says `tensorpipe::optional<Device>` or
// `tensorpipe::nullopt` keeps compiling.
#include <optional>

namespace actorpipe {
using std::nullopt;
using std::optional;
} // namespace actorpipe
