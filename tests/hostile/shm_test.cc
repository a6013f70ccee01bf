// Hostile peers of the shm transport (docs/security.md, "shm transport and
// listeners"). Every attacker is a real process that speaks raw bytes on the
// listener's abstract Unix socket and hands over memfds of its own making, as
// the findings did: unsealed rings it shrinks under us, ring counters that
// point outside the ring, rings larger than ours, connections that never send
// their setup, and a flood of connections past our descriptor limit. Each
// test asserts that the server process survives, releases what the attacker
// held, and still serves a good peer afterwards.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/shm/ring.h>
#include <actorpipe/transports/shm/socket.h>

#include "../support/harness.h"
#include "../support/hostile.h"

using namespace actorpipe;
using namespace testing;
using transport::shm::kRingHeaderSize;
using transport::shm::RingHeader;
using Clock = std::chrono::steady_clock;

namespace {

// The setup message of transports/shm/connection.cc, spelled out here on
// purpose: the attacker speaks the wire format, not our code.
constexpr uint32_t kSetupMagic = 0x48535041;
constexpr uint32_t kSetupVersion = 1;
struct Setup {
  uint32_t magic;
  uint32_t version;
  uint64_t ringSize;
};

constexpr size_t kDefaultRing = size_t{2} << 20;  // shm::create()'s default

long msSince(Clock::time_point start) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
}

size_t openFds(pid_t pid) {
  size_t n = 0;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

// "shm://name" -> "name".
std::string nameOf(const std::string& url) { return url.rfind("shm://", 0) == 0 ? url.substr(6) : url; }

int rawConnect(const std::string& name, bool nonBlocking = false) {
  sockaddr_un address;
  socklen_t length;
  if (transport::shm::abstractAddress(name, address, length)) return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonBlocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Waits until the server closes `sock` (EOF or reset), discarding wake-up
// bytes. False if it is still open at the deadline.
bool closedByServer(int sock, std::chrono::milliseconds deadline) {
  auto end = Clock::now() + deadline;
  for (;;) {
    char buffer[64];
    ssize_t n = ::recv(sock, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    if (n > 0) continue;
    long left = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
    if (left <= 0) return false;
    pollfd p{sock, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left));
  }
}

// None: a plain memfd; ShrinkOnly: can still grow; ShrinkGrow: what the
// server requires; Full: what a good client sends (F_SEAL_SEAL on top).
enum class Seal { None, ShrinkOnly, ShrinkGrow, Full };

int makeMemfd(size_t size, Seal seal) {
  int fd = ::memfd_create("attacker-ring", MFD_CLOEXEC | (seal == Seal::None ? 0 : MFD_ALLOW_SEALING));
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) return -1;
  int seals = seal == Seal::ShrinkOnly ? F_SEAL_SHRINK
              : seal == Seal::ShrinkGrow ? F_SEAL_SHRINK | F_SEAL_GROW
                                         : F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (seal != Seal::None && ::fcntl(fd, F_ADD_SEALS, seals) != 0) return -1;
  return fd;
}

// A raw shm peer: its own memfds, its own mapping of them, the counters in
// its hands. fds[0]/maps[0]: our outgoing ring (the server's incoming one);
// fds[1]/maps[1]: our incoming ring.
struct RawPeer {
  int sock{-1};
  int fds[2]{-1, -1};
  uint8_t* maps[2]{nullptr, nullptr};
  size_t ring{0};
  uint64_t written{0};
  uint64_t consumed{0};

  // Connects, creates and maps the rings (headers zeroed, as a good client
  // does) and sends the setup announcing `announced` bytes per ring.
  bool start(const std::string& name, size_t ringSize, Seal seal, uint64_t announced = 0) {
    ring = ringSize;
    sock = rawConnect(name);
    if (sock < 0) return false;
    for (int i = 0; i < 2; ++i) {
      fds[i] = makeMemfd(kRingHeaderSize + ring, seal);
      if (fds[i] < 0) return false;
      void* m = ::mmap(nullptr, kRingHeaderSize + ring, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
      if (m == MAP_FAILED) return false;
      maps[i] = static_cast<uint8_t*>(m);
      header(i)->capacity = ring;
    }
    Setup setup{kSetupMagic, kSetupVersion, announced != 0 ? announced : ring};
    return transport::shm::sendWithFds(sock, &setup, sizeof(setup), fds, 2) == sizeof(setup);
  }
  ~RawPeer() {
    for (int i = 0; i < 2; ++i) {
      if (maps[i] != nullptr) ::munmap(maps[i], kRingHeaderSize + ring);
      if (fds[i] >= 0) ::close(fds[i]);
    }
    if (sock >= 0) ::close(sock);
  }

  RingHeader* header(int i) { return reinterpret_cast<RingHeader*>(maps[i]); }
  RingHeader* out() { return header(0); }
  RingHeader* in() { return header(1); }
  void kick() { (void)::send(sock, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT); }

  // An honest write of `n` bytes (there must be room).
  void put(const void* src, size_t n) {
    for (size_t i = 0; i < n; ++i) maps[0][kRingHeaderSize + ((written + i) & (ring - 1))] = static_cast<const uint8_t*>(src)[i];
    written += n;
    out()->head.store(written, std::memory_order_release);
    kick();
  }
  // An honest read of `n` bytes, waiting for them.
  bool get(void* dst, size_t n, std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    if (!waitFor([&] { return in()->head.load(std::memory_order_acquire) - consumed >= n; }, deadline)) return false;
    for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = maps[1][kRingHeaderSize + ((consumed + i) & (ring - 1))];
    consumed += n;
    in()->tail.store(consumed, std::memory_order_release);
    kick();
    return true;
  }
  // One 8-byte echo round trip through the server.
  bool echo(uint64_t value) {
    put(&value, sizeof(value));
    uint64_t back = 0;
    return get(&back, sizeof(back)) && back == value;
  }
};

// --- the servers --------------------------------------------------------------

// SIGTERM ends a server cleanly: exit status 0 then means it was alive (and
// unharmed) when the test asked it to leave.
void exitOnTerm() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { ::_exit(0); };
  ::sigaction(SIGTERM, &sa, nullptr);
}

// Echoes 8-byte messages on one transport connection; reports how it ended
// ("error <what>") to the parent.
struct Echo : std::enable_shared_from_this<Echo> {
  Echo(Child& child, std::shared_ptr<transport::Connection> c) : child(child), c(std::move(c)) {}
  Child& child;
  std::shared_ptr<transport::Connection> c;
  uint64_t value{0};
  void next() {
    auto self = shared_from_this();
    c->read(&value, sizeof(value), [self](const Error& e) {
      if (e) return self->child.send("error " + e.what());
      self->c->write(&self->value, sizeof(self->value), [self](const Error& e) {
        if (e) return self->child.send("error " + e.what());
        self->next();
      });
    });
  }
};

struct AcceptLoop : std::enable_shared_from_this<AcceptLoop> {
  AcceptLoop(Child& child, std::shared_ptr<transport::Listener> l) : child(child), listener(std::move(l)) {}
  Child& child;
  std::shared_ptr<transport::Listener> listener;
  void next() {
    auto self = shared_from_this();
    listener->accept([self](const Error& e, std::shared_ptr<transport::Connection> c) {
      if (e) return self->child.send("accept failed " + e.what());
      self->child.send("accepted");
      std::make_shared<Echo>(self->child, std::move(c))->next();
      self->next();
    });
  }
};

// A bare shm transport context echoing 8-byte messages on every connection
// it accepts. Sends its address, then "fds <limit>" once the descriptor limit
// (`spareFds` above what it has open then; 0: unchanged) is in force.
int transportServer(Child& self, size_t ringSize, int spareFds = 0) {
  exitOnTerm();
  auto context = transport::shm::create(ringSize);
  auto listener = context->listen("");
  if (listener->addr().empty()) return 5;
  if (spareFds > 0) {
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = openFds(::getpid()) + static_cast<rlim_t>(spareFds);
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return 6;
  }
  std::make_shared<AcceptLoop>(self, listener)->next();
  self.send(listener->addr());
  for (;;) ::pause();
}

// A full actorpipe Context (pipes, the handshake, `secret` when not empty)
// listening on shm only, echoing every message of every pipe it accepts.
int contextServer(Child& self, const std::string& secret) {
  exitOnTerm();
  ContextOptions options;
  if (!secret.empty()) options.secret(secret);
  auto context = makeContext("shm-server", options);
  auto listener = context->listen({"shm://"});
  self.send(listener->url("shm"));
  for (;;) {
    auto pipe = acceptSync(*listener, nullptr, std::chrono::hours(1));
    if (!pipe) continue;
    std::thread([pipe] {
      for (;;) {
        Received r = readSync(*pipe, std::chrono::hours(1));
        if (r.error) return;
        if (writeSync(*pipe, messageOver(r.storage, r.descriptor.metadata))) return;
      }
    }).detach();
  }
}

// The next line from `child` that contains `text` ("" if none in time).
std::string lineWith(Child& child, const std::string& text, std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  auto end = Clock::now() + deadline;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return "";
    std::string line = child.receive(left);
    if (line.empty()) return "";
    if (line.find(text) != std::string::npos) return line;
  }
}

// A good peer: an 8-byte round trip through a transport server.
bool servesTransportPeer(const std::string& addr, size_t ringSize = kDefaultRing) {
  auto context = transport::shm::create(ringSize);
  auto c = context->connect(addr);
  auto out = std::make_shared<uint64_t>(0x0123456789abcdefULL);
  auto in = std::make_shared<uint64_t>(0);
  auto wrote = std::make_shared<std::promise<Error>>();
  auto read = std::make_shared<std::promise<Error>>();
  auto w = wrote->get_future();
  auto r = read->get_future();
  c->write(out.get(), sizeof(*out), [wrote, out](const Error& e) { wrote->set_value(e); });
  c->read(in.get(), sizeof(*in), [read, in](const Error& e) { read->set_value(e); });
  bool ok = ready(w, std::chrono::seconds(20)) && !w.get() && ready(r, std::chrono::seconds(20)) && !r.get() &&
            *in == *out;
  c->close();
  context->join();
  return ok;
}

// A good peer: a message round trip through a context server.
bool servesPipePeer(const std::string& url, const std::string& secret) {
  ContextOptions options;
  if (!secret.empty()) options.secret(secret);
  auto context = makeContext("good-peer", options);
  auto pipe = context->connect(url);
  Storage sent = makeStorage({100}, {70000}, 7);
  bool ok = !writeSync(*pipe, messageOver(sent, "good"));
  Received r;
  if (ok) r = readSync(*pipe);
  ok = ok && !r.error && r.descriptor.metadata == "good" && r.storage.tensors.size() == 1 &&
       r.storage.tensors[0] == sent.tensors[0];
  pipe->close();
  context->join();
  return ok;
}

// Asks a server to leave; 0 means it was still alive and well.
int stop(Child& server) {
  server.kill(SIGTERM);
  return server.wait();
}

// A transport server child, its address, and the check that ends every
// attack on it: it still serves a good peer, then leaves cleanly.
struct Server {
  explicit Server(size_t ringSize = kDefaultRing, int spareFds = 0)
      : ringSize(ringSize),
        child(Child::spawn([=](Child& self) { return transportServer(self, ringSize, spareFds); },
                           std::chrono::seconds(100))),
        addr(child.receive()) {
    REQUIRE(!addr.empty());
  }
  void checkUnharmed() {
    CHECK(servesTransportPeer(addr, ringSize));
    CHECK(stop(child) == 0);
  }
  // Runs `body` (its CHILD_CHECKs the attack's expectations) in an attacker
  // process against us and checks that all its expectations held.
  void attack(const std::function<int(const std::string& addr)>& body) {
    Child attacker = Child::spawn([&](Child&) { return body(addr); });
    CHECK(attacker.wait() == 0);
  }
  size_t ringSize;
  Child child;
  std::string addr;
};

// The attacks that need no cooperation from the server's upper layers, for
// the context servers (secret, other user): each must end with the server
// closing the attacker's connection. Child body; 0 when all held.
int attackBattery(const std::string& name) {
  {  // unsealed rings, shrunk right after they were sent
    RawPeer p;
    CHILD_CHECK(p.start(name, kDefaultRing, Seal::None));
    CHILD_CHECK(::ftruncate(p.fds[0], 0) == 0 && ::ftruncate(p.fds[1], 0) == 0);
    CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
  }
  {  // rings larger than the server's
    RawPeer p;
    CHILD_CHECK(p.start(name, 2 * kDefaultRing, Seal::Full));
    CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
  }
  {  // a head a terabyte ahead
    RawPeer p;
    CHILD_CHECK(p.start(name, kDefaultRing, Seal::Full));
    p.out()->head.store(uint64_t{1} << 40);
    p.kick();
    CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
  }
  {  // honest counters, garbage bytes (more than a pre-handshake frame may
     // hold, whatever length they spell): the handshake refuses them
    RawPeer p;
    CHILD_CHECK(p.start(name, kDefaultRing, Seal::Full));
    std::vector<uint8_t> junk(70000);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 131 + 7);
    p.put(junk.data(), junk.size());
    CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(30)));
  }
  return 0;
}

}  // namespace

TEST_CASE("hostile shm: unsealed memfds are refused, so shrinking them cannot hurt the server") {
  Server server;
  server.attack([](const std::string& addr) {
    RawPeer p;
    CHILD_CHECK(p.start(addr, kDefaultRing, Seal::None));
    // The original attack: shrink the rings once the server may have mapped them.
    CHILD_CHECK(::ftruncate(p.fds[0], 0) == 0 && ::ftruncate(p.fds[1], 0) == 0);
    CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
    // Sealed against shrinking only, not growing: refused too.
    RawPeer q;
    CHILD_CHECK(q.start(addr, kDefaultRing, Seal::ShrinkOnly));
    CHILD_CHECK(closedByServer(q.sock, std::chrono::seconds(20)));
    return 0;
  });
  server.checkUnharmed();
}

TEST_CASE("hostile shm: sealed rings cannot be shrunk or write-sealed after the setup") {
  Server server;
  server.attack([](const std::string& addr) {
    RawPeer p;
    // Only SHRINK and GROW, no F_SEAL_SEAL: the most the server asks for.
    CHILD_CHECK(p.start(addr, kDefaultRing, Seal::ShrinkGrow));
    CHILD_CHECK(p.echo(42));  // the server has mapped both rings
    for (int fd : p.fds) {
      CHILD_CHECK(::ftruncate(fd, 0) != 0 && errno == EPERM);
      CHILD_CHECK(::ftruncate(fd, 1 << 30) != 0 && errno == EPERM);
      // The server's writable mapping keeps F_SEAL_WRITE out (EBUSY).
      CHILD_CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);
    }
    // Punching a hole in the data area only zeroes pages: no SIGBUS either.
    (void)::fallocate(p.fds[0], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kRingHeaderSize, 4096);
    CHILD_CHECK(p.echo(43));
    CHILD_CHECK(p.echo(44));
    return 0;
  });
  CHECK(!lineWith(server.child, "accepted").empty());
  server.checkUnharmed();
}

TEST_CASE("hostile shm: impossible ring counters fail that connection with a ProtocolError") {
  Server server;
  const std::string addr = server.addr;
  struct Attack {
    const char* what;
    const char* ring;  // which of the server's rings it corrupts
    std::function<void(RawPeer&)> act;
  };
  std::vector<Attack> attacks = {
      {"head a terabyte ahead: the server would read far past the ring", "incoming",
       [](RawPeer& p) {
         p.out()->head.store(uint64_t{1} << 40);
         p.kick();
       }},
      {"head just over one ring ahead (the old clamp let reads run ~60 KB past the mapping)", "incoming",
       [](RawPeer& p) {
         p.out()->head.store(kDefaultRing + 60000);
         p.kick();
       }},
      {"tail past the server's head: the server would write past the ring", "outgoing",
       [](RawPeer& p) {
         p.in()->tail.store(uint64_t{1} << 40);
         p.put("12345678", 8);
       }},
      {"tail going backwards", "outgoing",
       [](RawPeer& p) {
         CHILD_CHECK(p.echo(7));
         CHILD_CHECK(p.echo(8));  // the server saw our tail at 8 on this one's way back
         p.in()->tail.store(4);
         p.put("12345678", 8);
       }},
      {"head going backwards", "incoming",
       [](RawPeer& p) {
         CHILD_CHECK(p.echo(7));
         p.out()->head.store(4);
         p.kick();
       }},
  };
  for (auto& attack : attacks) {
    std::string what = attack.what;
    CAPTURE(what);
    Child attacker = Child::spawn([addr, &attack](Child& self) {
      RawPeer p;
      CHILD_CHECK(p.start(addr, kDefaultRing, Seal::Full));
      attack.act(p);
      CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
      return 0;
    });
    CHECK(!lineWith(server.child, "accepted").empty());
    std::string error = lineWith(server.child, "error ");
    CHECK(error.find("protocol error: the peer corrupted the shm ring counters (" + std::string(attack.ring) +
                     " ring)") != std::string::npos);
    MESSAGE(what << " -> " << error);
    CHECK(attacker.wait() == 0);
  }
  server.checkUnharmed();
}

TEST_CASE("hostile shm: rings larger than the server's own are refused") {
  constexpr size_t kRing = 64 << 10;
  Server server(kRing);
  server.attack([](const std::string& addr) {
    {
      RawPeer p;  // twice ours
      CHILD_CHECK(p.start(addr, 2 * kRing, Seal::Full));
      CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
    }
    {
      RawPeer p;  // announces ours, sends bigger memfds
      CHILD_CHECK(p.start(addr, 2 * kRing, Seal::Full, kRing));
      CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
    }
    RawPeer p;  // as large as ours: fine
    CHILD_CHECK(p.start(addr, kRing, Seal::Full));
    CHILD_CHECK(p.echo(9));
    return 0;
  });
  server.checkUnharmed();
}

TEST_CASE("hostile shm: connections that never send their setup are dropped after ~5 s") {
  Server server;
  const std::string addr = server.addr;
  size_t baseline = openFds(server.child.pid());
  REQUIRE(baseline > 0);
  constexpr int kSilent = 20;
  Child attacker = Child::spawn([addr](Child& self) {
    {
      // Refused and released at once: its setup timer, cancelled, must not
      // fire for it later (a freed connection) while we wait below.
      RawPeer p;
      CHILD_CHECK(p.start(addr, kDefaultRing, Seal::None));
      CHILD_CHECK(closedByServer(p.sock, std::chrono::seconds(20)));
    }
    std::vector<int> socks;
    std::vector<Clock::time_point> opened;
    for (int i = 0; i < kSilent; ++i) {
      socks.push_back(rawConnect(addr));
      opened.push_back(Clock::now());
      CHILD_CHECK(socks.back() >= 0);
    }
    self.send("connected");
    long longest = 0;
    for (int i = 0; i < kSilent; ++i) {
      CHILD_CHECK(closedByServer(socks[i], std::chrono::seconds(30)));
      longest = std::max(longest, msSince(opened[i]));
    }
    self.send("closed " + std::to_string(longest));
    return 0;
  });
  REQUIRE(attacker.receive() == "connected");
  // The server holds them for a while...
  CHECK(waitFor([&] { return openFds(server.child.pid()) >= baseline + kSilent; }, std::chrono::seconds(10)));
  // ...then lets go of every one.
  std::string closed = attacker.receive(std::chrono::seconds(30));
  REQUIRE(closed.rfind("closed ", 0) == 0);
  long longest = std::stol(closed.substr(7));
  MESSAGE("silent connections dropped after " << longest << " ms (kSetupTimeout 5000 ms)");
  CHECK(longest >= 4000);
  CHECK(longest < 8000);
  CHECK(waitFor([&] { return openFds(server.child.pid()) == baseline; }, std::chrono::seconds(5)));
  CHECK(attacker.wait() == 0);
  CHECK(servesTransportPeer(addr));
  CHECK(waitFor([&] { return openFds(server.child.pid()) == baseline; }, std::chrono::seconds(5)));
  CHECK(stop(server.child) == 0);
}

TEST_CASE("hostile shm: a connection flood past the descriptor limit does not spin the listener") {
  constexpr int kSpare = 16;
  Server server(kDefaultRing, kSpare);
  const std::string addr = server.addr;
  size_t baseline = openFds(server.child.pid());
  Child attacker = Child::spawn([addr](Child& self) {
    std::vector<int> socks;
    for (int i = 0; i < 200; ++i) {
      int fd = rawConnect(addr, true);
      if (fd >= 0) socks.push_back(fd);
    }
    self.send("flooding " + std::to_string(socks.size()));
    for (;;) ::pause();  // until killed
    return 0;
  }, std::chrono::seconds(100));
  std::string flooding = attacker.receive();
  REQUIRE(flooding.rfind("flooding ", 0) == 0);
  MESSAGE(flooding << " connections");
  // The server runs out of descriptors...
  CHECK(waitFor([&] { return openFds(server.child.pid()) >= baseline + kSpare - 2; }, std::chrono::seconds(10)));
  // ...and must not spin on its still-readable listening socket. One quiet
  // window is proof enough; a loaded machine gets several tries.
  auto deadline = Clock::now() + std::chrono::seconds(15);
  double best = 1e9;
  while (Clock::now() < deadline) {
    double cpu0 = cpuSeconds(server.child.pid());
    auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, (cpuSeconds(server.child.pid()) - cpu0) / wall);
    if (best < 0.2) break;
  }
  MESSAGE("server CPU while out of descriptors: " << best * 100 << "% of one core (best window)");
  CHECK(best < 0.2);
  attacker.kill(SIGKILL);
  attacker.wait();
  // With the attackers gone, their connections drain and a good peer is served.
  CHECK(servesTransportPeer(addr));
  CHECK(waitFor([&] { return openFds(server.child.pid()) == baseline; }, std::chrono::seconds(15)));
  CHECK(stop(server.child) == 0);
}

TEST_CASE("hostile shm: a context with a secret survives the attacks and serves its peers") {
  const std::string secret = "shm-hostile-secret";
  Child server = Child::spawn([secret](Child& self) { return contextServer(self, secret); });
  std::string url = server.receive();
  REQUIRE(!url.empty());
  Child attacker = Child::spawn([url](Child&) { return attackBattery(nameOf(url)); });
  CHECK(attacker.wait(std::chrono::seconds(60)) == 0);
  CHECK(servesPipePeer(url, secret));
  CHECK(stop(server) == 0);
}

TEST_CASE("hostile shm: an attacker running as another user does no better") {
  if (::getuid() != 0) {
    MESSAGE("skipped: needs root to switch the attacker to another user");
    return;
  }
  Child server = Child::spawn([](Child& self) { return contextServer(self, ""); });
  std::string url = server.receive();
  REQUIRE(!url.empty());
  Child attacker = Child::spawn([url](Child&) {
    CHILD_CHECK(::setgid(65534) == 0 && ::setuid(65534) == 0);
    CHILD_CHECK(::getuid() == 65534);
    return attackBattery(nameOf(url));
  });
  CHECK(attacker.wait(std::chrono::seconds(60)) == 0);
  CHECK(servesPipePeer(url, ""));
  CHECK(stop(server) == 0);
}

TEST_CASE("hostile shm: a context shut down while silent peers wait for their setup releases them") {
  // In this process, so that ASan and LSan see the teardown: the loop stops
  // with setup timers pending and connections half set up.
  auto context = transport::shm::create();
  auto listener = context->listen("");
  REQUIRE(!listener->addr().empty());
  size_t before = openFds(::getpid());
  std::vector<int> socks;
  for (int i = 0; i < 4; ++i) socks.push_back(rawConnect(listener->addr()));
  CHECK(waitFor([&] { return openFds(::getpid()) >= before + 8; }, std::chrono::seconds(10)));
  context->join();
  for (int fd : socks) CHECK(closedByServer(fd, std::chrono::seconds(5)));
  for (int fd : socks) ::close(fd);
  CHECK(openFds(::getpid()) <= before);
}
