#pragma once
// Helpers shared by the fault tests: raw sockets that play a misbehaving
// peer, a tcp-only context, memory readings, and a check that a Context
// still carries other pipes after a fault.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <actorpipe/runtime/detail/wire.h>

#include "../support/harness.h"
#include "../support/raw_peer.h"

namespace faults {

using namespace actorpipe;
using namespace testing;
using Clock = std::chrono::steady_clock;

// uv + basic only: pipes between two such contexts stay on TCP.
inline std::shared_ptr<Context> tcpContext(const std::string& name, ContextOptions options = {}) {
  auto context = std::make_shared<Context>(options.name(name));
  context->registerTransport(0, "tcp", transport::uv::create());
  context->registerChannel(0, "basic", channel::basic::create());
  return context;
}

// A seed for the random choices of a test: ACTORPIPE_FAULT_SEED or the clock.
inline unsigned faultSeed() {
  if (const char* s = std::getenv("ACTORPIPE_FAULT_SEED")) return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  return static_cast<unsigned>(Clock::now().time_since_epoch().count());
}

// Resident memory of this process in bytes (VmRSS), from /proc.
inline size_t residentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Errors that mean "the test's own wait gave up": a hang, not a failure.
inline bool isTestTimeout(const Error& e) {
  return e.isOfType<LogicError>() && e.what().find("test timeout") != std::string::npos;
}

// A new pipe through `context` (to a listener of its own) carries a
// message with a payload and a tensor, byte for byte.
inline void checkUsable(Context& context) {
  auto listener = context.listen({"tcp://127.0.0.1:0"});
  auto pipe = context.connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  Storage s;
  s.payloads.push_back(pattern(1000, 3));
  s.tensors.push_back(pattern(100000, 4));
  // Pulled tensors (cma, xth) complete their write once the reader copied
  // them: read while the write is pending.
  auto written = std::make_shared<std::promise<Error>>();
  pipe->write(messageOver(s, "still usable"), [written](const Error& e) { written->set_value(e); });
  Received got = readSync(*accepted);
  INFO("read: " << got.error.what() << "; transport " << pipe->info().transport);
  REQUIRE(!got.error);
  auto w = written->get_future();
  REQUIRE(ready(w, std::chrono::seconds(20)));
  Error writeError = w.get();
  INFO("write: " << writeError.what());
  REQUIRE(!writeError);
  CHECK(got.descriptor.metadata == "still usable");
  CHECK(got.storage.payloads == s.payloads);
  CHECK(got.storage.tensors == s.tensors);
  pipe->close();
  accepted->close();
  listener->close();
}

}  // namespace faults
