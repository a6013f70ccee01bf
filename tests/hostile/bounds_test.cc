// Small inputs must not pin large resources (docs/security.md, "Bounds").
// Each attacker speaks raw bytes (or runs actorpipe with a forged channel)
// against a victim in a real process, whose memory and descriptors are read
// from /proc. On main before this suite: 40 pipes announcing 64 MiB frames
// took 2.6 GB; connect-and-reset churn held 64 KiB per connection for the
// whole handshake timeout; a 21-digit mpt token aborted the process; silent
// mpt lane connections were held for ever.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <actorpipe/channels/mpt/setup.h>
#include <actorpipe/runtime/detail/wire.h>

#include "../support/harness.h"
#include "../support/hostile.h"
#include "forged_channel.h"

using namespace actorpipe;
using namespace testing;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMiB = 1u << 20;
// How much a victim may grow under attack. Sanitizers keep freed memory in
// quarantine (ASan: 256 MiB) and shadow it: there the bound only tells
// "bounded" from "gigabytes".
// TSan also keeps metadata for every descriptor and allocation it saw (the
// churn below grew a TSan victim by ~550 MiB for 20,000 connections, a plain
// one by 1 MiB): under sanitizers the churn is 2,000 connections.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kGrowth = 512 * kMiB;
constexpr int kChurn = 2000;
#else
constexpr uint64_t kGrowth = 64 * kMiB;
constexpr int kChurn = 20000;
#endif
// The churn's own bound. Its connections wait in the kernel's backlog until
// the victim asks for one, so at most Limits::maxPendingPipes (about 6 KiB
// each) are ours at once; when each arrival was taken at once, a victim that
// fell behind grew by 19-95 MiB (glibc keeps a freed peak).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kChurnGrowth = kGrowth;
#else
constexpr uint64_t kChurnGrowth = 24 * kMiB;
#endif

// "tcp://127.0.0.1:4242" -> a connected blocking socket, or -1.
int dial(const std::string& url) {
  auto colon = url.rfind(':');
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::stoi(url.substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool recvAll(int fd, void* out, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::recv(fd, static_cast<uint8_t*>(out) + done, length - done, 0);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A HELLO as the victim's own kind would send it: tcp and basic only, so the
// pipe is established on this connection right after the welcome.
std::string helloFrame() {
  wire::Hello hello;
  hello.contextName = "attacker";
  hello.transports.push_back({"tcp", 0, transport::uv::create()->domainDescriptor(), {}, ""});
  hello.channels.push_back({"basic", 0, channel::basic::create()->domainDescriptor(), {kCpuDeviceType}, ""});
  std::string body = wire::encode(hello);
  return wire::encodeHeader(wire::FrameType::kHello, body.size()) + body;
}

// Reads one whole frame (header and body) off `fd`; false on EOF.
bool skipFrame(int fd) {
  uint8_t header[wire::kHeaderSize];
  if (!recvAll(fd, header, sizeof(header))) return false;
  wire::FrameHeader decoded;
  if (wire::decodeHeader(header, Limits(), decoded)) return false;
  std::vector<uint8_t> body(decoded.length);
  return recvAll(fd, body.data(), body.size());
}

size_t openDescriptors(pid_t pid) {
  size_t count = 0;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return 0;
  while (auto* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

// One round trip with a well-behaved peer: the victim's loop has handled
// what arrived before, and still serves.
void echoOnce(const std::string& url) {
  auto context = makeContext("good");
  auto pipe = context->connect(url);
  Storage s = makeStorage({100}, {4096}, 3);
  REQUIRE(!writeSync(*pipe, messageOver(s, "good")));
  Received r = readSync(*pipe);
  REQUIRE_MESSAGE(!r.error, r.error.what());
  CHECK(r.storage.tensors[0] == s.tensors[0]);
  pipe.reset();
  context->join();
}

}  // namespace

TEST_CASE("message frames commit memory as their bytes arrive, not as announced") {
  constexpr int kPipes = 40;
  Child victim = Child::spawn([](Child& self) { return echoServer(self, kPipes + 1); });
  const std::string url = victim.receive();
  REQUIRE(!url.empty());
  echoOnce(url);  // the victim's baseline includes a served pipe
  // echoOnce used one of the server's pipes: kPipes attackers, then one more good peer.
  const uint64_t before = rssBytes(victim.pid());
  std::vector<int> attackers;
  for (int i = 0; i < kPipes - 1; ++i) {
    int fd = dial(url);
    REQUIRE(fd >= 0);
    REQUIRE(sendAll(fd, helloFrame()));
    REQUIRE(skipFrame(fd));  // the welcome: the pipe is established
    // 8 bytes that announce 64 MiB, and 100 of them.
    REQUIRE(sendAll(fd, wire::encodeHeader(wire::FrameType::kMessage, 64 * kMiB) + std::string(100, 'x')));
    attackers.push_back(fd);
  }
  echoOnce(url);
  const uint64_t after = rssBytes(victim.pid());
  MESSAGE("victim RSS " << before / kMiB << " MiB before, " << after / kMiB << " MiB with " << kPipes - 1
                        << " pipes each announcing a 64 MiB frame");
  CHECK(after < before + kGrowth);  // before: 64 MiB per pipe, 2.5 GB in all
  for (int fd : attackers) ::close(fd);
  victim.kill(SIGKILL);
  victim.wait();
}

TEST_CASE("connect-and-reset churn holds nothing once the connections are gone") {
  Child victim = Child::spawn([](Child& self) { return echoServer(self, 2); });
  const std::string url = victim.receive();
  REQUIRE(!url.empty());
  echoOnce(url);
  const uint64_t rssBefore = rssBytes(victim.pid());
  const size_t fdsBefore = openDescriptors(victim.pid());
  // Each sends half a frame header (so the victim reads and buffers), then
  // resets the connection (SO_LINGER 0).
  const std::string half = wire::encodeHeader(wire::FrameType::kHello, 100).substr(0, 4);
  int made = 0;
  const auto end = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < end && made < kChurn) {  // at most 1.3 GB held before the fix
    int fd = dial(url);
    REQUIRE(fd >= 0);
    sendAll(fd, half);
    linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(fd);
    ++made;
  }
  // Once the victim has seen the resets, its descriptors and memory return.
  const bool released = waitFor([&] { return openDescriptors(victim.pid()) <= fdsBefore + 2; },
                                std::chrono::seconds(10));
  const uint64_t rssAfter = rssBytes(victim.pid());
  MESSAGE(made << " connections reset; victim RSS " << rssBefore / kMiB << " -> " << rssAfter / kMiB
               << " MiB, descriptors " << fdsBefore << " -> " << openDescriptors(victim.pid()));
  CHECK(released);
  CHECK(rssAfter < rssBefore + kChurnGrowth);
  echoOnce(url);  // and it still serves
  CHECK(victim.wait() == 0);
}

TEST_CASE("mpt: a setup that does not parse fails the pipe, not the process") {
  uint64_t token = 0;
  std::vector<std::string> addresses;
  CHECK(!channel::mpt::parseSetup("42;a;b", 2, token, addresses));
  CHECK(token == 42);
  CHECK(addresses == std::vector<std::string>{"a", "b"});
  for (const char* bad : {"", ";a;b", "42;a", "42;a;b;c", "42;a;", "-1;a;b", "+1;a;b", "0x1;a;b",
                          "123456789012345678901234567890;a;b", "18446744073709551616;a;b"}) {
    CAPTURE(bad);
    CHECK(channel::mpt::parseSetup(bad, 2, token, addresses).isOfType<ProtocolError>());
  }
  // A hostile acceptor whose welcome carries a 30-digit token: before, the
  // victim's std::stoull threw on its loop thread and aborted.
  // (No fork while this process holds live loops: the attacker is spawned first.)
  Child server = spawnForgedServer("mpt", [] {
    const std::string domain = channel::mpt::create(2, "127.0.0.1")->domainDescriptor();
    return Forgery{domain, "", "", "123456789012345678901234567890;127.0.0.1:1;127.0.0.1:2"};
  });
  const std::string url = server.receive();
  REQUIRE(!url.empty());
  auto mpt = channel::mpt::create(2, "127.0.0.1");
  auto victim = std::make_shared<Context>(ContextOptions().name("victim"));
  victim->registerTransport(0, "tcp", transport::uv::create());
  victim->registerChannel(0, "basic", channel::basic::create());
  victim->registerChannel(10, "mpt", mpt);
  auto pipe = victim->connect(url);
  Storage s = makeStorage({}, {kMiB}, 4);
  Error e = writeSync(*pipe, messageOver(s, "to a liar"));
  REQUIRE(e);
  CHECK_MESSAGE(e.isOfType<ProtocolError>(), e.what());
  pipe.reset();
  victim->join();
  CHECK(server.wait() == 0);
}

TEST_CASE("mpt: a lane connection that never says hello is dropped") {
  std::vector<std::shared_ptr<transport::Context>> contexts{transport::uv::create()};
  std::vector<std::shared_ptr<transport::Listener>> listeners{contexts[0]->listen("127.0.0.1")};
  auto mpt = channel::mpt::create(contexts, listeners);
  const std::string address = listeners[0]->addr();
  REQUIRE(!address.empty());
  int fd = dial("tcp://" + address);
  REQUIRE(fd >= 0);
  const auto start = Clock::now();
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 20000) == 1);  // the lane's hello timeout is 5 s
  char byte;
  CHECK(::recv(fd, &byte, 1, 0) == 0);  // closed by the victim
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  MESSAGE("silent mpt lane dropped after " << seconds << " s");
  CHECK(seconds > 4);
  CHECK(seconds < 15);
  ::close(fd);
  mpt->close();
  mpt->join();
}

TEST_CASE("silent tcp connections are dropped after the handshake timeout, with or without a secret") {
  // 20 connections that send nothing and 20 that send half a frame header:
  // each is closed by the victim once its greeting is overdue.
  for (const std::string secret : {"", "a shared secret"}) {
    CAPTURE(secret);
    auto victim = std::make_shared<Context>(
        ContextOptions().name("victim").secret(secret).handshakeTimeout(std::chrono::milliseconds(2000)));
    victim->registerTransport(0, "tcp", transport::uv::create());
    victim->registerChannel(0, "basic", channel::basic::create());
    auto listener = victim->listen({"tcp://127.0.0.1:0"});
    const std::string url = listener->url("tcp");
    const std::string half = wire::encodeHeader(wire::FrameType::kHello, 100).substr(0, 4);
    std::vector<int> silent;
    for (int i = 0; i < 40; ++i) {
      int fd = dial(url);
      REQUIRE(fd >= 0);
      if (i % 2 == 1) REQUIRE(sendAll(fd, half));
      silent.push_back(fd);
    }
    const auto start = Clock::now();
    double longest = 0;
    for (int fd : silent) {
      pollfd p{fd, POLLIN, 0};
      REQUIRE(::poll(&p, 1, 20000) == 1);
      char byte;
      CHECK(::recv(fd, &byte, 1, 0) <= 0);  // EOF or reset: the victim hung up
      longest = std::chrono::duration<double>(Clock::now() - start).count();
      ::close(fd);
    }
    MESSAGE("40 silent tcp connections" << std::string(secret.empty() ? "" : " (secret set)") << " dropped after "
                                        << longest << " s (handshake timeout 2 s)");
    CHECK(longest > 1.5);
    CHECK(longest < 10);
    victim->join();
  }
}
