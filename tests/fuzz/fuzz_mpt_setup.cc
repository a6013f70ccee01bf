// mpt's setup string (channels/mpt/setup.h), as a hostile acceptor may write
// it into its welcome: before, a token of more than 64 bits threw out of
// std::stoull on the loop thread and aborted the process. Whatever parses
// must format back to a string that parses the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <actorpipe/channels/mpt/setup.h>

using namespace actorpipe::channel::mpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t lanes = data[0] % 9;
  const std::string setup(reinterpret_cast<const char*>(data + 1), size - 1);
  uint64_t token = 0;
  std::vector<std::string> addresses;
  if (parseSetup(setup, lanes, token, addresses)) return 0;
  if (addresses.size() != lanes) std::abort();
  uint64_t again = 0;
  std::vector<std::string> reparsed;
  if (parseSetup(formatSetup(token, addresses), lanes, again, reparsed) || again != token || reparsed != addresses) {
    std::abort();
  }
  return 0;
}
