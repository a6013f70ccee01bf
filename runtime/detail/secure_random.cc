#include <actorpipe/runtime/detail/secure_random.h>

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace actorpipe::detail {

void secureRandom(void* out, size_t length) {
  auto* bytes = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::getrandom(bytes + done, length - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "actorpipe: getrandom failed: no secure randomness\n");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
}

uint64_t secureRandom64() {
  uint64_t value;
  secureRandom(&value, sizeof(value));
  return value;
}

std::string secureRandomHex(size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string raw(bytes, '\0');
  secureRandom(&raw[0], bytes);
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char c : raw) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

bool constantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

} // namespace actorpipe::detail
