// libFuzzer targets for the addresses a peer or a user hands us:
//   url          splitUrl, then the uv parser (parseAddress) on tcp:// addresses
//   shm_address  the shm transport's abstract socket names
// parseAddress resolves with getaddrinfo; here every lookup is numeric only
// (the getaddrinfo below adds AI_NUMERICHOST), so the fuzzer never does DNS.
#include <dlfcn.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <actorpipe/runtime/detail/url.h>
#include <actorpipe/transports/shm/socket.h>
#include <actorpipe/transports/uv/sockaddr.h>

#define FUZZ_ASSERT(cond)          \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

#if defined(FUZZ_URL)
extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  using Fn = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "getaddrinfo"));
  struct addrinfo numeric {};
  if (hints) numeric = *hints;
  numeric.ai_flags |= AI_NUMERICHOST;
  return real(node, service, &numeric, res);
}
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
#if defined(FUZZ_URL)
  std::string scheme, address;
  if (actorpipe::detail::splitUrl(input, scheme, address)) {
    FUZZ_ASSERT(!scheme.empty());
    FUZZ_ASSERT(scheme + "://" + address == input);
  }
  // The address part alone, and the whole input as an address.
  for (const std::string* a : {&address, &input}) {
    if (a->size() > 256) continue;
    actorpipe::transport::uv::SockAddr parsed;
    actorpipe::Error error = actorpipe::transport::uv::parseAddress(*a, parsed);
    if (!error) {
      auto family = parsed.get()->sa_family;
      FUZZ_ASSERT(family == AF_INET || family == AF_INET6);
      std::string printed = actorpipe::transport::uv::formatAddress(parsed.get());
      actorpipe::transport::uv::SockAddr again;
      FUZZ_ASSERT(!actorpipe::transport::uv::parseAddress(printed, again));
      FUZZ_ASSERT(actorpipe::transport::uv::formatAddress(again.get()) == printed);
    }
  }
#elif defined(FUZZ_SHM_ADDRESS)
  sockaddr_un address;
  socklen_t length = 0;
  actorpipe::Error error = actorpipe::transport::shm::abstractAddress(input, address, length);
  if (!error) {
    FUZZ_ASSERT(length <= sizeof(address));
    FUZZ_ASSERT(actorpipe::transport::shm::abstractName(address, length) == input);
  }
  // Names as the kernel reports them: any length, any bytes.
  sockaddr_un raw{};
  size_t n = std::min(size, sizeof(raw));
  std::memcpy(&raw, data, n);
  (void)actorpipe::transport::shm::abstractName(raw, static_cast<socklen_t>(n));
#else
#error "define one FUZZ_<TARGET>"
#endif
  return 0;
}
