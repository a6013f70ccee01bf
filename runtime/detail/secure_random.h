#pragma once
// Unguessable tokens and comparisons that do not leak where two secrets
// differ: for every value a peer could gain by guessing (join tokens, lane
// tokens, xth's endpoint tokens).
#include <cstddef>
#include <cstdint>
#include <string>

namespace actorpipe::detail {

// Fills `out` from the kernel's CSPRNG (getrandom); aborts only if the kernel
// has none, which no supported Linux lacks.
void secureRandom(void* out, size_t length);
uint64_t secureRandom64();
// `bytes` random bytes as lowercase hex.
std::string secureRandomHex(size_t bytes);
// Equal size and contents, in time that depends on the size only.
bool constantTimeEqual(const std::string& a, const std::string& b);

} // namespace actorpipe::detail
