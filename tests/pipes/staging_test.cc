// Tensors staged through host memory (actors/detail/pipe_staging.cc, what
// cuda_basic rides on), tested on any machine: a stager of the test's own
// stands in for the GPU. Its "device" memory is host memory named as CUDA
// (no CUDA call ever sees it), and its copies happen later, on the loop,
// out of order and after random delays, as device copies finish. So a pipe
// that reused a slot before its chunk was written or copied out, reported
// a write before its copies had read the sender's memory, or let another
// write's bytes in between a staged write's chunks, delivers wrong bytes
// here. The real cuda_basic is tested on a device in
// tests/cuda/cuda_channels_test.cc and cuda_ipc_test.cc.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>

#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

#include "../support/harness.h"
#include "../support/raw_peer.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

// What every test stager saw, across the pipes of a test.
struct StagerStats {
  std::atomic<int> peakOut{0}, peakIn{0};
  std::atomic<int> outCopies{0};   // toHost calls, numbered
  std::atomic<int> afterClose{0};  // copies asked after close(): must stay 0
  std::atomic<int> failAt{-1};     // the toHost call with this number fails
  std::atomic<bool> noSlots{false};  // slot() fails (no host memory to lend)
  std::atomic<const void*> refused{nullptr};  // checkBuffer() refuses this memory
};

class TestStager final : public channel::Endpoint,
                         public channel::Stager,
                         public std::enable_shared_from_this<TestStager> {
 public:
  TestStager(size_t chunk, StagerStats& stats, uint32_t seed) : chunk_(chunk), stats_(stats), random_(seed) {
    for (auto& side : slots_) {
      for (auto& s : side) s.resize(chunk_);
    }
  }
  std::string send(const void*, size_t, done_fn done) override {
    done(ACTORPIPE_ERROR(LogicError, "not out of band"));
    return std::string();
  }
  void recv(const std::string&, void*, size_t, done_fn done) override {
    done(ACTORPIPE_ERROR(LogicError, "not out of band"));
  }
  void close(const Error& reason) override {
    // The pipe calls this on its loop: copies not yet made are dropped
    // (a CUDA stager waits for its copies; these have not started).
    std::map<uint64_t, Pending> pending;
    pending.swap(pending_);
    closed_ = true;
    for (auto& p : pending) p.second.done(reason);
  }
  void attach(actorpipe::detail::Loop& loop) override { loop_ = &loop; }
  Stager* stager() override { return this; }
  Error checkBuffer(const Buffer& buffer, size_t length) override {
    if (std::as_const(buffer).unwrap<CudaBuffer>().ptr == stats_.refused.load()) {
      return ACTORPIPE_ERROR(LogicError, "the test stager refuses this buffer for " + std::to_string(length) + " bytes");
    }
    return Error();
  }

  size_t chunkBytes() const override { return chunk_; }
  void* slot(Side side, size_t slot, Error& error) override {
    REQUIRE(slot < kSlots);
    if (stats_.noSlots.load()) {
      error = ACTORPIPE_ERROR(SystemError, "the test stager's host memory", 12);  // ENOMEM
      return nullptr;
    }
    return slots_[side == Side::kOut ? 0 : 1][slot].data();
  }
  void toHost(void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) override {
    const char* src = static_cast<const char*>(std::as_const(buffer).unwrap<CudaBuffer>().ptr) + offset;
    later(true, host, src, length, std::move(done));
  }
  void fromHost(const void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) override {
    char* dst = static_cast<char*>(std::as_const(buffer).unwrap<CudaBuffer>().ptr) + offset;
    later(false, dst, host, length, std::move(done));
  }

 private:
  struct Pending {
    bool out;
    done_fn done;
  };
  // The copy is made when it "completes", a while later: whatever the pipe
  // did to either side's memory in between shows in the bytes.
  void later(bool out, void* dst, const void* src, size_t length, done_fn done) {
    const int number = out ? stats_.outCopies.fetch_add(1) : -1;
    if (out && number == stats_.failAt.load()) {
      return done(ACTORPIPE_ERROR(SystemError, "the test stager's copy", 5));  // EIO
    }
    const uint64_t id = next_++;
    pending_[id] = Pending{out, std::move(done)};
    int inFlight = 0;
    for (auto& p : pending_) inFlight += p.second.out == out;
    auto& peak = out ? stats_.peakOut : stats_.peakIn;
    if (inFlight > peak.load()) peak = inFlight;
    auto self = shared_from_this();
    auto finish = [self, id, dst, src, length] {
      auto it = self->pending_.find(id);
      if (it == self->pending_.end()) {
        return;  // dropped by close()
      }
      if (self->closed_) ++self->stats_.afterClose;
      std::memcpy(dst, src, length);
      done_fn done = std::move(it->second.done);
      self->pending_.erase(it);
      done(Error());
    };
    const int delay = std::uniform_int_distribution<int>(0, 9)(random_);
    if (delay < 7) {
      loop_->post(finish);  // soon, behind what is queued
    } else {
      loop_->after(std::chrono::milliseconds(delay - 6), finish);  // 1–3 ms: later ones overtake it
    }
  }

  size_t chunk_;
  StagerStats& stats_;
  std::minstd_rand random_;
  actorpipe::detail::Loop* loop_{nullptr};
  std::vector<uint8_t> slots_[2][kSlots];
  std::map<uint64_t, Pending> pending_;  // loop thread
  uint64_t next_{1};
  bool closed_{false};
};

class TestStagingChannel final : public tensorpipe::channel::Context {
 public:
  TestStagingChannel(size_t chunk, StagerStats& stats) : chunk_(chunk), stats_(stats) {}
  const std::vector<std::string>& deviceTypes() const override { return types_; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string) override {}
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return true; }
  bool makesEndpoints() const override { return true; }
  std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error&) override {
    return std::make_shared<TestStager>(chunk_, stats_, seed_++);
  }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string&, Error&) override {
    return std::make_shared<TestStager>(chunk_, stats_, seed_++);
  }

 private:
  size_t chunk_;
  StagerStats& stats_;
  std::vector<std::string> types_{kCudaDeviceType};
  std::string domain_{"staging-test"};
  std::atomic<uint32_t> seed_{1};
};

std::shared_ptr<Context> stagingContext(const std::string& name, const std::string& transport, size_t chunk,
                                        StagerStats& stats) {
  auto context = std::make_shared<Context>(ContextOptions().name(name));
  if (transport == "tcp") context->registerTransport(0, "tcp", transport::uv::create());
  if (transport == "shm") context->registerTransport(0, "shm", transport::shm::create());
  context->registerChannel(0, "basic", channel::basic::create());
  // In one process, CPU tensors from 16 KiB take xth, out of band, beside
  // the staged ones on the connection.
  context->registerChannel(20, "xth", channel::xth::create());
  context->registerChannel(0, "staged", std::make_shared<TestStagingChannel>(chunk, stats));
  return context;
}

// One region of a test message: a payload, a CPU tensor, or a "CUDA" tensor
// (host memory the test stager moves).
struct Part {
  enum Kind { kPayload, kCpu, kStaged } kind;
  size_t length;
};

// A message's memory, filled with a pattern; compared after a trip.
struct Memory {
  std::vector<Part> parts;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<uint8_t>> expected;
  Memory(std::vector<Part> p, int seed) : parts(std::move(p)) {
    for (size_t i = 0; i < parts.size(); ++i) {
      expected.push_back(pattern(parts[i].length, seed + static_cast<int>(i)));
      bytes.emplace_back(parts[i].length + 1, 0xEE);  // one guard byte: nothing writes past a region
    }
  }
  void fill() {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].length > 0) std::memcpy(bytes[i].data(), expected[i].data(), parts[i].length);
    }
  }
  void scribble() {
    for (size_t i = 0; i < parts.size(); ++i) std::memset(bytes[i].data(), 0x5A, parts[i].length);
  }
  Message message(const std::string& metadata) {
    Message m;
    m.metadata = metadata;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].kind == Part::kPayload) {
        m.payloads.push_back(Message::Payload{bytes[i].data(), parts[i].length, ""});
        continue;
      }
      Message::Tensor t;
      t.length = parts[i].length;
      if (parts[i].kind == Part::kStaged) {
        t.buffer = CudaBuffer{bytes[i].data(), nullptr, 0};
      } else {
        t.buffer = CpuBuffer{bytes[i].data()};
      }
      m.tensors.push_back(std::move(t));
    }
    return m;
  }
  Allocation allocation() {
    Allocation a;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].kind == Part::kPayload) {
        a.payloads.push_back(Allocation::Payload{bytes[i].data()});
        continue;
      }
      Allocation::Tensor t;
      if (parts[i].kind == Part::kStaged) {
        t.buffer = CudaBuffer{bytes[i].data(), nullptr, 0};
      } else {
        t.buffer = CpuBuffer{bytes[i].data()};
      }
      a.tensors.push_back(std::move(t));
    }
    return a;
  }
  // Empty when every region holds `sent`'s pattern and its guard byte is intact.
  std::string compare(const Memory& sent) const {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].length > 0 && std::memcmp(bytes[i].data(), sent.expected[i].data(), parts[i].length) != 0) {
        size_t at = 0;
        while (bytes[i][at] == sent.expected[i][at]) ++at;
        size_t end = parts[i].length;
        while (bytes[i][end - 1] == sent.expected[i][end - 1]) --end;
        return "part " + std::to_string(i) + " (" + std::to_string(parts[i].length) + " bytes) differs from byte " +
               std::to_string(at) + " to " + std::to_string(end) + " (got " + std::to_string(bytes[i][at]) + ")";
      }
      if (bytes[i][parts[i].length] != 0xEE) return "part " + std::to_string(i) + " written past its end";
    }
    return std::string();
  }
};

std::future<Error> readInto(Pipe& pipe, Memory& into, std::string* metadata = nullptr) {
  auto promise = std::make_shared<std::promise<Error>>();
  auto future = promise->get_future();
  pipe.readDescriptor([&pipe, &into, promise, metadata](const Error& e, Descriptor d) {
    if (e) return promise->set_value(e);
    if (metadata != nullptr) *metadata = d.metadata;
    pipe.read(into.allocation(), [promise](const Error& e) { promise->set_value(e); });
  });
  return future;
}

// A raw peer's side of the handshake: accepts, reads the hello, and
// welcomes the connector with "cuda" tensors mapped to `channel`.
int rawWelcome(RawServer& raw, const std::string& channel) {
  int fd = raw.accept();
  REQUIRE(fd >= 0);
  CHECK(!recvFrame(fd).empty());  // the hello
  wire::Welcome w;
  w.contextName = "raw";
  w.transport = "tcp";
  w.channels.emplace_back(kCpuDeviceType, "basic");
  w.channels.emplace_back(kCudaDeviceType, channel);
  if (channel == "staged") w.setups.emplace_back("staged", "");
  sendAll(fd, frame(wire::FrameType::kWelcome, wire::encode(w)));
  return fd;
}

struct Pair {
  StagerStats stats;
  std::shared_ptr<Context> a, b;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<Pipe> client, server;
  Pair(const std::string& transport, size_t chunk) {
    a = stagingContext("a", transport, chunk, stats);
    b = stagingContext("b", transport, chunk, stats);
    listener = b->listen({transport == "tcp" ? "tcp://127.0.0.1:0" : "shm://"});
    client = a->connect(listener->url(transport));
    server = acceptSync(*listener);
    REQUIRE(server != nullptr);
  }
  ~Pair() {
    client->close();
    server->close();
    a->join();
    b->join();
  }
};

// The layouts: staged tensors of every size around the chunk (`c`), with
// payloads and CPU tensors before, between and after them.
std::vector<std::vector<Part>> layouts(size_t c) {
  std::vector<std::vector<Part>> out;
  for (size_t size : {size_t{1}, c - 1, c, c + 1, 4 * c, 5 * c + 7, (size_t{1} << 20) + 5}) {
    out.push_back({{Part::kStaged, size}});
  }
  out.push_back({{Part::kPayload, 100}, {Part::kStaged, 3 * c + 1}, {Part::kCpu, 777}, {Part::kStaged, 0},
                 {Part::kStaged, c / 2}, {Part::kCpu, 5}});
  out.push_back({{Part::kPayload, 10}, {Part::kCpu, 10000}});  // nothing staged, behind staged ones
  // An out-of-band CPU tensor (xth, in one process) between staged ones;
  // a message whose only staged tensor is empty.
  out.push_back({{Part::kStaged, 2 * c + 3}, {Part::kCpu, size_t{100} << 10}, {Part::kStaged, c}});
  out.push_back({{Part::kCpu, 64}, {Part::kStaged, 0}});
  return out;
}

}  // namespace

TEST_CASE("staged tensors: every size and layout, over tcp and shm, land whole and in order") {
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    constexpr size_t kChunk = 4096 + 3;
    Pair p(transport, kChunk);
    auto info = p.server->info();  // the acceptor's: established once accepted
    REQUIRE(info.channels.count("cuda") == 1);
    CHECK(info.channels["cuda"] == "staged");
    int n = 0;
    for (const auto& layout : layouts(kChunk)) {
      CAPTURE(n);
      Memory from(layout, n), to(layout, 1000 + n);
      from.fill();
      auto read = readInto(*p.server, to);
      Error we = writeSync(*p.client, from.message(std::to_string(n)), 30s);
      REQUIRE_MESSAGE(!we, we.what());
      REQUIRE(read.wait_for(30s) == std::future_status::ready);
      Error re = read.get();
      REQUIRE_MESSAGE(!re, re.what());
      std::string diff = to.compare(from);
      CHECK_MESSAGE(diff.empty(), diff);
      ++n;
    }
    CHECK(p.stats.peakOut.load() >= 2);  // chunks overlap
    CHECK(p.stats.peakOut.load() <= static_cast<int>(channel::Stager::kSlots));
    CHECK(p.stats.peakIn.load() <= static_cast<int>(channel::Stager::kSlots));
  }
}

TEST_CASE("staged tensors: many writes in flight, mixed with plain ones, each scribbled after its callback") {
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    constexpr size_t kChunk = 1000;
    Pair p(transport, kChunk);
    const auto all = layouts(kChunk);
    constexpr int kMessages = 48;
    std::vector<std::unique_ptr<Memory>> from, to;
    std::vector<std::future<Error>> writes;
    for (int i = 0; i < kMessages; ++i) {
      const auto& layout = all[static_cast<size_t>(i) % all.size()];
      from.push_back(std::make_unique<Memory>(layout, i));
      to.push_back(std::make_unique<Memory>(layout, 5000 + i));
      from.back()->fill();
    }
    // Every write asked before any read: later writes (some with nothing
    // staged) queue behind staged ones; each sender overwrites its memory
    // as soon as its callback says the pipe is done with it.
    for (int i = 0; i < kMessages; ++i) {
      auto promise = std::make_shared<std::promise<Error>>();
      writes.push_back(promise->get_future());
      Memory* m = from[i].get();
      p.client->write(m->message(std::to_string(i)), [promise, m](const Error& e) {
        if (!e) m->scribble();
        promise->set_value(e);
      });
    }
    for (int i = 0; i < kMessages; ++i) {
      std::string metadata;
      auto read = readInto(*p.server, *to[i], &metadata);
      REQUIRE(read.wait_for(30s) == std::future_status::ready);
      Error re = read.get();
      REQUIRE_MESSAGE(!re, re.what());
      CHECK(metadata == std::to_string(i));
      std::string diff = to[i]->compare(*from[i]);
      CHECK_MESSAGE(diff.empty(), "message " << i << ": " << diff);
    }
    for (auto& w : writes) {
      REQUIRE(w.wait_for(30s) == std::future_status::ready);
      Error we = w.get();
      CHECK_MESSAGE(!we, we.what());
    }
    CHECK(p.stats.peakOut.load() <= static_cast<int>(channel::Stager::kSlots));
    CHECK(p.stats.peakIn.load() <= static_cast<int>(channel::Stager::kSlots));
  }
}

TEST_CASE("staged tensors: a receiver that reads late, so that chunks wait on the connection, still gets every byte") {
  // Far more than a socket's or a ring's buffer: the connection holds the
  // chunks' host memory while it waits, and a slot reused before its write
  // called back would send the next chunk's bytes in its place.
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    constexpr size_t kChunk = (size_t{64} << 10) + 3;
    Pair p(transport, kChunk);
    constexpr int kMessages = 12;
    std::vector<std::unique_ptr<Memory>> from, to;
    std::vector<std::future<Error>> writes;
    for (int i = 0; i < kMessages; ++i) {
      std::vector<Part> layout{{Part::kStaged, (size_t{2} << 20) + 11}, {Part::kCpu, 100}};
      from.push_back(std::make_unique<Memory>(layout, i));
      to.push_back(std::make_unique<Memory>(layout, 100 + i));
      from.back()->fill();
      auto promise = std::make_shared<std::promise<Error>>();
      writes.push_back(promise->get_future());
      p.client->write(from.back()->message(std::to_string(i)), [promise](const Error& e) { promise->set_value(e); });
    }
    std::this_thread::sleep_for(300ms);
    for (int i = 0; i < kMessages; ++i) {
      auto read = readInto(*p.server, *to[i]);
      REQUIRE(read.wait_for(30s) == std::future_status::ready);
      Error re = read.get();
      REQUIRE_MESSAGE(!re, re.what());
      std::string diff = to[i]->compare(*from[i]);
      CHECK_MESSAGE(diff.empty(), "message " << i << ": " << diff);
    }
    for (auto& w : writes) {
      REQUIRE(w.wait_for(30s) == std::future_status::ready);
      CHECK(!w.get());
    }
  }
}

TEST_CASE("staged tensors: to an echo in another process and back, 16 in flight, each scribbled after its callback") {
  // Both directions of each pipe busy at once: the echo writes message n
  // back while message n + 1 comes in, the client reads while it writes.
  constexpr size_t kChunk = (size_t{64} << 10) + 1;
  const std::vector<Part> layout{{Part::kStaged, (size_t{1} << 20) + 5}};
  Child echo = Child::spawn(
      [&](Child& self) {
        StagerStats stats;
        auto context = stagingContext("echo", "tcp", kChunk, stats);
        auto listener = context->listen({"tcp://127.0.0.1:0"});
        self.send(listener->url("tcp"));
        auto pipe = acceptSync(*listener);
        CHILD_CHECK(pipe != nullptr);
        for (;;) {
          Memory into(layout, 0);
          auto read = readInto(*pipe, into);
          Error e = read.get();
          if (e) return e.isOfType<EOFError>() ? 0 : 7;
          Error we = writeSync(*pipe, into.message("back"), 30s);
          if (we) return 8;
        }
      },
      60s);
  const std::string url = echo.receive(30s);
  REQUIRE(!url.empty());
  StagerStats stats;
  auto context = stagingContext("client", "tcp", kChunk, stats);
  auto pipe = context->connect(url);
  constexpr int kBurst = 16;
  std::vector<std::unique_ptr<Memory>> from;
  std::vector<std::future<Error>> writes;
  for (int i = 0; i < kBurst; ++i) {
    from.push_back(std::make_unique<Memory>(layout, 100 + i));
    from.back()->fill();
    auto promise = std::make_shared<std::promise<Error>>();
    writes.push_back(promise->get_future());
    Memory* m = from.back().get();
    pipe->write(m->message("out"), [promise, m](const Error& e) {
      if (!e) m->scribble();
      promise->set_value(e);
    });
  }
  for (int i = 0; i < kBurst; ++i) {
    Memory back(layout, 0);
    auto read = readInto(*pipe, back);
    REQUIRE(read.wait_for(30s) == std::future_status::ready);
    Error re = read.get();
    REQUIRE_MESSAGE(!re, re.what());
    std::string diff = back.compare(*from[i]);
    CHECK_MESSAGE(diff.empty(), "message " << i << ": " << diff);
  }
  for (auto& w : writes) CHECK(!w.get());
  pipe->close();
  context->join();
  CHECK(echo.wait(30s) == 0);
}

TEST_CASE("staged tensors: a failing copy fails that pipe's writes clearly, and nothing is copied after") {
  constexpr size_t kChunk = 512;
  Pair p("tcp", kChunk);
  p.stats.failAt = p.stats.outCopies.load() + 5;  // the sixth chunk of the next write
  Memory from({{Part::kStaged, 20 * kChunk}}, 1);
  from.fill();
  Memory to({{Part::kStaged, 20 * kChunk}}, 2);
  auto read = readInto(*p.server, to);
  Error we = writeSync(*p.client, from.message("x"), 30s);
  REQUIRE(we.isOfType<SystemError>());
  CHECK(we.what().find("test stager") != std::string::npos);
  // The peer sees the pipe end (part of the message came, then EOF), and
  // reports it through its read.
  REQUIRE(read.wait_for(30s) == std::future_status::ready);
  CHECK(read.get());
  // The next write fails at once with the pipe's error.
  Error after = writeSync(*p.client, from.message("y"), 10s);
  CHECK(after.isOfType<SystemError>());
  CHECK(p.stats.afterClose.load() == 0);
}

TEST_CASE("staged tensors: closing a pipe mid-transfer fails its operations, and no copy runs after") {
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    constexpr size_t kChunk = 256;
    Pair p(transport, kChunk);
    std::vector<std::unique_ptr<Memory>> from;
    std::vector<std::future<Error>> writes;
    for (int i = 0; i < 8; ++i) {
      from.push_back(std::make_unique<Memory>(std::vector<Part>{{Part::kStaged, 4000 * kChunk}}, i));
      from.back()->fill();
      auto promise = std::make_shared<std::promise<Error>>();
      writes.push_back(promise->get_future());
      p.client->write(from.back()->message("big"), [promise](const Error& e) { promise->set_value(e); });
    }
    Memory to({{Part::kStaged, 4000 * kChunk}}, 99);
    auto read = readInto(*p.server, to);
    std::this_thread::sleep_for(20ms);  // some chunks copied and written, most not
    p.client->close();
    int failed = 0;
    for (auto& w : writes) {
      REQUIRE(w.wait_for(30s) == std::future_status::ready);
      failed += static_cast<bool>(w.get());
    }
    CHECK(failed >= 7);
    REQUIRE(read.wait_for(30s) == std::future_status::ready);
    (void)read.get();  // whole, or failed with the pipe: either is right
    CHECK(p.stats.afterClose.load() == 0);
  }
}

TEST_CASE("staged tensors: a reader's buffer the stager refuses fails that read alone; the descriptor waits") {
  Pair p("tcp", 4096);
  Memory from({{Part::kStaged, 50000}}, 3), wrong({{Part::kStaged, 50000}}, 4), right({{Part::kStaged, 50000}}, 5);
  from.fill();
  p.stats.refused = wrong.bytes[0].data();
  auto refused = std::make_shared<std::promise<Error>>();
  auto landed = std::make_shared<std::promise<Error>>();
  p.server->readDescriptor([&, refused, landed](const Error& e, Descriptor) {
    if (e) return refused->set_value(e);
    p.server->read(wrong.allocation(), [&, refused, landed](const Error& e) {
      refused->set_value(e);
      p.server->read(right.allocation(), [landed](const Error& e) { landed->set_value(e); });
    });
  });
  CHECK(!writeSync(*p.client, from.message("x"), 30s));
  auto r1 = refused->get_future();
  auto r2 = landed->get_future();
  REQUIRE(r1.wait_for(30s) == std::future_status::ready);
  Error e1 = r1.get();
  CHECK(e1.isOfType<LogicError>());
  CHECK_MESSAGE(e1.what().find("refuses this buffer for 50000 bytes") != std::string::npos, e1.what());
  REQUIRE(r2.wait_for(30s) == std::future_status::ready);
  CHECK(!r2.get());
  CHECK(right.compare(from).empty());
}

TEST_CASE("staged tensors: a stager with no host memory to lend fails the write, clearly") {
  Pair p("tcp", 4096);
  p.stats.noSlots = true;
  Memory from({{Part::kStaged, 10000}}, 1);
  from.fill();
  Error we = writeSync(*p.client, from.message("x"), 30s);
  CHECK(we.isOfType<SystemError>());
  CHECK_MESSAGE(we.what().find("host memory") != std::string::npos, we.what());
}

TEST_CASE("staged tensors: a peer that shuts its sending side mid-write still gets the whole message") {
  // As an unstaged write's bytes: the peer may only have half-closed, so
  // the write goes on to its end (bounded by the linger timer), then
  // reports the peer's leaving.
  StagerStats stats;
  constexpr size_t kChunk = 4096;
  constexpr size_t kLength = size_t{8} << 20;
  auto context = stagingContext("writer", "tcp", kChunk, stats);
  RawServer raw;
  auto pipe = context->connect(raw.url());
  int fd = rawWelcome(raw, "staged");
  Memory from({{Part::kStaged, kLength}}, 7);
  from.fill();
  auto promise = std::make_shared<std::promise<Error>>();
  auto wrote = promise->get_future();
  pipe->write(from.message("big"), [promise](const Error& e) { promise->set_value(e); });
  // The message's frame, then a little of its tensor, then EOF our way.
  std::string message = recvFrame(fd);
  REQUIRE(!message.empty());
  std::vector<uint8_t> got(kLength);
  size_t have = 0;
  auto take = [&](size_t upTo) {
    while (have < upTo) {
      ssize_t n = ::recv(fd, got.data() + have, upTo - have, 0);
      if (n <= 0) return false;
      have += static_cast<size_t>(n);
    }
    return true;
  };
  REQUIRE(take(64 << 10));
  ::shutdown(fd, SHUT_WR);
  std::this_thread::sleep_for(100ms);  // the writer sees EOF while chunks remain
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  CHECK_MESSAGE(take(kLength), "the tensor stopped after " << have << " of " << kLength << " bytes");
  CHECK(std::memcmp(got.data(), from.expected[0].data(), have) == 0);
  REQUIRE(wrote.wait_for(30s) == std::future_status::ready);
  CHECK(wrote.get());  // failed: the peer left before it could answer
  ::close(fd);
  pipe->close();
  context->join();
}

TEST_CASE("hostile: a CUDA tensor inline on a channel that does not stage, or out of band on one that does") {
  StagerStats stats;
  auto context = stagingContext("victim", "tcp", 1024, stats);
  // The raw peer welcomes us with "cuda" mapped to `channel`, then sends one
  // message whose CUDA tensor comes `inlineData` or not.
  auto attack = [&](const std::string& channel, bool inlineData) {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = rawWelcome(raw, channel);
    wire::MessageFrame m;
    m.descriptor.tensors.push_back({4096, Device{kCudaDeviceType, 0}, nullopt, ""});
    m.routes.push_back({channel, inlineData, ""});
    sendAll(fd, frame(wire::FrameType::kMessage, wire::encode(m)) + std::string(4096, 'x'));
    Memory into({{Part::kStaged, 4096}}, 1);
    auto read = readInto(*pipe, into);
    REQUIRE(read.wait_for(10s) == std::future_status::ready);
    Error error = read.get();
    if (!error) {
      std::vector<uint8_t> expected(4096, 'x');
      expected.push_back(0xEE);
      CHECK(into.bytes[0] == expected);
    }
    ::close(fd);
    return error;
  };
  Error inlineOnBasic = attack("basic", true);
  CHECK(inlineOnBasic.isOfType<ProtocolError>());
  CHECK_MESSAGE(inlineOnBasic.what().find("only CPU tensors") != std::string::npos, inlineOnBasic.what());
  Error outOfBand = attack("staged", false);
  CHECK(outOfBand.isOfType<ProtocolError>());
  CHECK_MESSAGE(outOfBand.what().find("out of band") != std::string::npos, outOfBand.what());
  // The same frame, inline on the staging channel, is a message like any.
  Error fine = attack("staged", true);
  CHECK_MESSAGE(!fine, fine.what());
  context->join();
}
