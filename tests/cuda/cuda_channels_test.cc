// CUDA tensors through pipes in one process (cuda_xth), and what holds
// without a device: the CUDA channels are not offered, a CUDA tensor fails
// clearly, the helpers say why. The descriptor parser of cuda_ipc is
// attacked here too (it needs no device). Tests that need a device print
// "no CUDA device" and return (CTest reports them skipped).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <future>
#include <thread>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>

#include <actorpipe/channels/detail/ack_page.h>
#include <actorpipe/channels/detail/cuda_descriptor.h>

#include "cuda_support.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

bool noDevice() {
  std::string why;
  if (cuda::deviceCount(&why) > 0) return false;
  MESSAGE(why);
  std::printf("%s\n", why.c_str());
  return true;
}

// Two contexts of this process and a pipe between them: every backend
// over shm (cuda_xth is chosen), or only cuda_basic over `basicOver`.
struct Pair {
  explicit Pair(const std::string& basicOver = std::string())
      : a(basicOver.empty() ? makeFullContext("a") : makeCudaBasicContext("a", basicOver)),
        b(basicOver.empty() ? makeFullContext("b") : makeCudaBasicContext("b", basicOver)),
        listener(b->listen({basicOver == "tcp" ? "tcp://127.0.0.1:0" : "shm://"})),
        client(a->connect(listener->url(basicOver.empty() ? "shm" : basicOver))),
        server(acceptSync(*listener)) {}
  std::shared_ptr<Context> a, b;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<Pipe> client, server;
  ~Pair() {
    client->close();
    server->close();
    a->join();
    b->join();
  }
};

// Reads the next message into `into`; the future holds the read's error.
std::future<Error> readInto(Pipe& pipe, CudaMessage& into) {
  auto promise = std::make_shared<std::promise<Error>>();
  auto future = promise->get_future();
  pipe.readDescriptor([&pipe, &into, promise](const Error& e, Descriptor) {
    if (e) return promise->set_value(e);
    pipe.read(into.allocation(), [promise](const Error& e) { promise->set_value(e); });
  });
  return future;
}

std::future<Error> writeFrom(Pipe& pipe, CudaMessage& from, const std::string& metadata) {
  auto promise = std::make_shared<std::promise<Error>>();
  auto future = promise->get_future();
  pipe.write(from.message(metadata), [promise](const Error& e) { promise->set_value(e); });
  return future;
}

}  // namespace

// Needs no device: the receiver's side of cuda_ipc's acknowledgement page
// (ack_page.h) against a peer process that names the wrong things.
TEST_CASE("cuda_ipc acknowledgement page: only a sealed page of the kernel-named peer is mapped") {
  using namespace actorpipe::channel::detail;
  Child peer = Child::spawn([](Child& self) {
    int good = -1;
    void* page = nullptr;
    CHILD_CHECK(!makeAckPage(good, page));
    auto memfd = [](size_t size, bool seal) {
      int fd = static_cast<int>(::syscall(SYS_memfd_create, "forged", MFD_ALLOW_SEALING));
      CHILD_CHECK(fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) == 0);
      if (seal) CHILD_CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
      return fd;
    };
    int unsealed = memfd(kAckPageSize, false);  // could shrink under the mapping
    int twoPages = memfd(2 * kAckPageSize, true);
    int pipeFds[2];
    CHILD_CHECK(::pipe(pipeFds) == 0);
    self.send(std::to_string(good) + " " + std::to_string(unsealed) + " " + std::to_string(twoPages) + " " +
              std::to_string(pipeFds[0]));
    // Done when the parent's acknowledgement shows up in our page.
    auto* word = static_cast<std::atomic<uint64_t>*>(page);
    for (int i = 0; i < 10000 && word->load() != 42; ++i) ::usleep(1000);
    return word->load() == 42 ? 0 : 5;
  });
  int good = -1, unsealed = -1, twoPages = -1, pipeFd = -1;
  std::string fds = peer.receive();
  REQUIRE(std::sscanf(fds.c_str(), "%d %d %d %d", &good, &unsealed, &twoPages, &pipeFd) == 4);
  const actorpipe::detail::PeerProcess kernel{peer.pid(), ::geteuid()};
  void* page = nullptr;
  int pidfd = -1;
  auto refused = [&](std::optional<actorpipe::detail::PeerProcess> who, uint64_t fd) {
    Error e = mapPeerAckPage(who, fd, page, pidfd);
    CHECK(page == nullptr);
    CHECK(pidfd == -1);
    return e;
  };
  CHECK(refused(kernel, static_cast<uint64_t>(unsealed)).isOfType<ProtocolError>());
  CHECK(refused(kernel, static_cast<uint64_t>(twoPages)).isOfType<ProtocolError>());
  CHECK(refused(kernel, static_cast<uint64_t>(pipeFd)).isOfType<ProtocolError>());
  CHECK(refused(kernel, 999).isOfType<SystemError>());                       // no such fd there
  CHECK(refused(kernel, uint64_t{1} << 40).isOfType<ProtocolError>());       // not an fd number
  CHECK(refused(std::nullopt, static_cast<uint64_t>(good)).isOfType<ProtocolError>());  // tcp: nobody named
  CHECK(refused(actorpipe::detail::PeerProcess{peer.pid(), ::geteuid() + 1}, static_cast<uint64_t>(good))
            .isOfType<ProtocolError>());
  // The right one, in the right process: our write lands in the peer's page.
  REQUIRE(!mapPeerAckPage(kernel, static_cast<uint64_t>(good), page, pidfd));
  static_cast<std::atomic<uint64_t>*>(page)->store(42);
  CHECK(peer.wait() == 0);
  ::munmap(page, kAckPageSize);
  ::close(pidfd);
  // Once the peer is gone, its pid names no one (or someone else): refused.
  page = nullptr;
  pidfd = -1;
  CHECK(refused(kernel, static_cast<uint64_t>(good)));
}

TEST_CASE("cuda: the helpers fail with a CudaError where there is no device") {
  std::string why;
  if (cuda::deviceCount(&why) > 0) return;
  CHECK(why.find("no CUDA device") != std::string::npos);
  Error e;
  CHECK(cuda::allocate(16, 0, e) == nullptr);
  CHECK(e.isOfType<CudaError>());
  CHECK(cuda::copy(&e, &why, 1).isOfType<CudaError>());
  CHECK(cuda::deviceOf(&why) == -1);
}

TEST_CASE("cuda: without a device no CUDA channel is offered and a CUDA tensor fails clearly") {
  std::string why;
  if (cuda::deviceCount(&why) > 0) return;
  Pair p;
  auto info = p.server->info();
  CHECK(info.channels.count("cpu") == 1);
  CHECK(info.channels.count("cuda") == 0);
  // The pointer is never touched: the write fails before any channel sees it.
  Message m;
  Message::Tensor t;
  t.buffer = CudaBuffer{reinterpret_cast<void*>(0x1000), nullptr, 0};
  t.length = 64;
  m.tensors.push_back(t);
  Error e = writeSync(*p.client, std::move(m));
  REQUIRE(e.isOfType<NegotiationError>());
  CHECK(e.what().find("cuda:0") != std::string::npos);
  // The pipe carries on.
  Storage s = makeStorage({10}, {100}, 1);
  CHECK(!writeSync(*p.client, messageOver(s, "after")));
  Received r = readSync(*p.server);
  CHECK(!r.error);
  CHECK(r.descriptor.metadata == "after");
}

TEST_CASE("cuda_ipc descriptor: every field the peer wrote is checked") {
  using namespace actorpipe::channel::detail;
  CudaIpcDescriptor d;
  d.seq = 7;
  d.length = 1 << 20;
  d.offset = 13;
  d.bufferId = 99;
  d.ackFd = 12;
  d.slot = 3;
  for (size_t i = 0; i < kIpcHandleBytes; ++i) {
    d.memory[i] = static_cast<uint8_t>(i * 7);
    d.event[i] = static_cast<uint8_t>(255 - i);
  }
  const std::string good = formatCudaIpcDescriptor(d);
  CudaIpcDescriptor back;
  REQUIRE(!parseCudaIpcDescriptor(good, back));
  CHECK(back.seq == 7);
  CHECK(back.length == d.length);
  CHECK(back.offset == 13);
  CHECK(back.bufferId == 99);
  CHECK(back.ackFd == 12);
  CHECK(back.slot == 3);
  CHECK(back.memory == d.memory);
  CHECK(back.event == d.event);

  const std::string handles = good.substr(good.size() - 4 * kIpcHandleBytes);
  auto bad = [&](const std::string& text) {
    CudaIpcDescriptor out;
    Error e = parseCudaIpcDescriptor(text, out);
    CHECK_MESSAGE(e.isOfType<ProtocolError>(), text.substr(0, 60));
  };
  bad("");
  bad(good.substr(0, good.size() - 1));                                    // short handle
  bad(good + "0");                                                          // trailing byte
  bad("7:1048576:13:99:12:65:" + handles);                                  // slot past kNoEvent
  bad("7:1048576:13:99:2147483648:3:" + handles);                           // fd out of range
  bad("7:1048576:18446744073709551615:99:12:3:" + handles);                 // offset + length overflows
  bad("7:1048576:13:99:12:" + handles);                                     // a field missing
  bad("7:1048576:13:99:12:3:4:" + handles);                                 // a field too many
  bad("+7:1048576:13:99:12:3:" + handles);                                  // a sign
  bad("7:1048576:13:99:12:3:" + std::string(handles.size(), 'A'));        // upper case hex
  bad("7:1048576:13:99:12:3:" + std::string(handles.size(), 'g'));        // not hex
  bad("7:1048576:13:99:12:3:" + std::string(100000, '0'));                // huge
  bad("99999999999999999999999:1:1:1:1:1:" + handles);                     // overflow
  CudaIpcDescriptor none;
  REQUIRE(!parseCudaIpcDescriptor("1:0:0:0:0:64:" + handles, none));        // no event: the sender synchronised
  CHECK(none.slot == kNoEvent);
}

namespace {

void everyLayout(const std::string& basicOver) {
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  REQUIRE(!e);
  Pair p(basicOver);
  auto info = p.server->info();  // the acceptor's: established once accepted
  REQUIRE(info.channels.count("cuda") == 1);
  CHECK(info.channels["cuda"] == (basicOver.empty() ? "cuda_xth" : "cuda_basic"));
  int n = 0;
  for (const auto& layout : cudaLayouts()) {
    CAPTURE(n);
    CudaMessage from(layout, n, stream);
    CudaMessage to(layout, 1000 + n, stream);
    from.fill();
    auto read = readInto(*p.server, to);
    auto wrote = writeFrom(*p.client, from, std::to_string(n));
    REQUIRE(read.wait_for(30s) == std::future_status::ready);
    REQUIRE(wrote.wait_for(30s) == std::future_status::ready);
    Error re = read.get();
    Error we = wrote.get();
    REQUIRE_MESSAGE(!re, re.what());
    REQUIRE_MESSAGE(!we, we.what());
    std::string diff = to.compare(from);
    CHECK_MESSAGE(diff.empty(), diff);
    ++n;
  }
  REQUIRE(!cuda::destroyStream(stream));
}

void manyInFlight(const std::string& basicOver) {
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  cudaStream_t loadStream = cuda::createStream(0, e);
  REQUIRE(!e);
  // A concurrent load on the device: large memsets on a stream of their own.
  std::atomic<bool> stop{false};
  void* scratch = cuda::allocate(size_t{256} << 20, 0, e);
  REQUIRE(!e);
  std::thread load([&] {
    while (!stop.load()) {
      (void)cuda::memsetAsync(scratch, 1, size_t{256} << 20, loadStream);
      (void)cuda::synchronize(loadStream);
    }
  });
  {
    Pair p(basicOver);
    constexpr int kInFlight = 32;
    std::vector<std::unique_ptr<CudaMessage>> from, to;
    std::vector<std::future<Error>> reads;
    std::vector<std::future<Error>> writes;
    std::vector<TensorSpec> layout{{true, (size_t{1} << 20) + 3, 0, 1}, {false, 100}};
    for (int i = 0; i < kInFlight; ++i) {
      from.push_back(std::make_unique<CudaMessage>(layout, i, stream));
      to.push_back(std::make_unique<CudaMessage>(layout, 500 + i, stream));
      from.back()->fill();
    }
    // Every write asked before any read; each sender scribbles over its
    // tensors as soon as its callback says it may.
    std::vector<std::shared_ptr<std::promise<Error>>> scribbled;
    for (int i = 0; i < kInFlight; ++i) {
      auto promise = std::make_shared<std::promise<Error>>();
      writes.push_back(promise->get_future());
      CudaMessage* m = from[i].get();
      p.client->write(m->message(std::to_string(i)), [promise, m](const Error& e) {
        if (!e) m->scribble();
        promise->set_value(e);
      });
    }
    for (int i = 0; i < kInFlight; ++i) reads.push_back(readInto(*p.server, *to[i]));
    for (int i = 0; i < kInFlight; ++i) {
      REQUIRE(reads[i].wait_for(30s) == std::future_status::ready);
      REQUIRE(writes[i].wait_for(30s) == std::future_status::ready);
      Error re = reads[i].get();
      Error we = writes[i].get();
      REQUIRE_MESSAGE(!re, re.what());
      REQUIRE_MESSAGE(!we, we.what());
    }
    for (int i = 0; i < kInFlight; ++i) {
      // Compared against the pattern `from` was filled with, not its
      // scribbled memory.
      std::string diff = to[i]->compare(*from[i]);
      CHECK_MESSAGE(diff.empty(), diff);
    }
  }
  stop = true;
  load.join();
  REQUIRE(!cuda::release(scratch));
  REQUIRE(!cuda::destroyStream(stream));
  REQUIRE(!cuda::destroyStream(loadStream));
}

}  // namespace

TEST_CASE("cuda_xth: CUDA tensors of every size and layout between two pipes of one process") {
  if (noDevice()) return;
  everyLayout("");
}

TEST_CASE("cuda_xth: many messages in flight, the sender scribbling over each after its callback, under load") {
  if (noDevice()) return;
  manyInFlight("");
}

TEST_CASE("cuda_basic: CUDA tensors of every size and layout, staged over tcp and over shm") {
  if (noDevice()) return;
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    everyLayout(transport);
  }
}

TEST_CASE("cuda_basic: many messages in flight, the sender scribbling over each after its callback, under load") {
  if (noDevice()) return;
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    manyInFlight(transport);
  }
}

TEST_CASE("cuda_basic: memory past the tensor's allocation, or host memory named as CUDA, fails that write alone") {
  if (noDevice()) return;
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  REQUIRE(!e);
  Pair p("tcp");
  void* block = cuda::allocate(4096, 0, e);
  REQUIRE(!e);
  std::vector<uint8_t> host(4096);
  for (auto [ptr, length] : {std::pair<void*, size_t>{static_cast<char*>(block) + 100, 4096},
                             std::pair<void*, size_t>{host.data(), 64}}) {
    Message m;
    Message::Tensor t;
    t.buffer = CudaBuffer{ptr, stream, 0};
    t.length = length;
    m.tensors.push_back(t);
    Error we = writeSync(*p.client, std::move(m));
    CHECK_MESSAGE((we.isOfType<LogicError>() || we.isOfType<CudaError>()), we.what());
  }
  // The pipe carries on.
  std::vector<TensorSpec> layout{{true, 4000, 0, 9}};
  CudaMessage from(layout, 3, stream), to(layout, 4, stream);
  from.fill();
  auto read = readInto(*p.server, to);
  CHECK(!writeSync(*p.client, from.message("after")));
  REQUIRE(read.wait_for(30s) == std::future_status::ready);
  CHECK(!read.get());
  CHECK(to.compare(from).empty());
  REQUIRE(!cuda::release(block));
  REQUIRE(!cuda::destroyStream(stream));
}

TEST_CASE("cuda_xth: a CPU allocation for a CUDA tensor is refused, and the descriptor waits for a right one") {
  if (noDevice()) return;
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  REQUIRE(!e);
  Pair p;
  std::vector<TensorSpec> layout{{true, 4096, 0, 5}};
  CudaMessage from(layout, 1, stream);
  CudaMessage to(layout, 2, stream);
  from.fill();
  auto wrote = writeFrom(*p.client, from, "x");
  std::promise<Error> wrong;
  std::vector<uint8_t> cpu(4096);
  std::atomic<bool> fromCuda{false};
  p.server->readDescriptor([&](const Error& e, Descriptor d) {
    fromCuda = !e && d.tensors.size() == 1 && d.tensors[0].sourceDevice.type == "cuda";
    Allocation a;
    Allocation::Tensor t;
    t.buffer = CpuBuffer{cpu.data()};
    a.tensors.push_back(t);
    p.server->read(a, [&](const Error& e) { wrong.set_value(e); });
  });
  Error refused = wrong.get_future().get();
  CHECK(fromCuda);
  CHECK(refused.isOfType<LogicError>());
  CHECK(refused.what().find("needs cuda memory") != std::string::npos);
  std::promise<Error> right;
  p.server->read(to.allocation(), [&](const Error& e) { right.set_value(e); });
  auto rf = right.get_future();
  REQUIRE(rf.wait_for(30s) == std::future_status::ready);
  Error re = rf.get();
  REQUIRE_MESSAGE(!re, re.what());
  REQUIRE(wrote.wait_for(30s) == std::future_status::ready);
  CHECK(!wrote.get());
  CHECK(to.compare(from).empty());
  REQUIRE(!cuda::destroyStream(stream));
}
