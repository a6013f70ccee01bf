// Connections that break or stall: a reset in the middle of a frame, a
// listener that accepts and never answers, and a receiver that reads slowly
// while its peer writes fast. Each ends in an error (or bounded memory) in
// bounded time, and the Context keeps carrying other pipes.
#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "fault_support.h"

using namespace faults;

TEST_CASE("a connection reset in the middle of a frame fails that pipe only") {
  auto context = makeContext("reset");
  Error error;
  SUBCASE("mid welcome frame") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());  // the hello
    std::string w = welcomeFrame();
    sendAll(fd, w.substr(0, w.size() / 2));
    // Time for the half frame to be read before the reset. A slower machine cannot fail this: a reset that comes first fails the
    // pipe all the same; only the case tested is then a weaker one.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    resetClose(fd);
    error = readSync(*pipe, std::chrono::seconds(15)).error;
  }
  SUBCASE("mid message frame") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());
    sendAll(fd, welcomeFrame());
    wire::MessageFrame m;
    m.descriptor.metadata = std::string(200, 'm');
    m.descriptor.payloads.push_back({1000, "payload"});
    std::string f = frame(wire::FrameType::kMessage, wire::encode(m));
    sendAll(fd, f.substr(0, f.size() / 2));
    // As above: a reset that comes first fails the pipe all the same.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    resetClose(fd);
    error = readSync(*pipe, std::chrono::seconds(15)).error;
  }
  SUBCASE("mid message data, with a write pending") {
    RawServer raw;
    auto pipe = context->connect(raw.url());
    int fd = raw.accept();
    CHECK(!recvFrame(fd).empty());
    sendAll(fd, welcomeFrame());
    wire::MessageFrame m;
    m.descriptor.payloads.push_back({100000, ""});
    sendAll(fd, frame(wire::FrameType::kMessage, wire::encode(m)) + std::string(5000, 'x'));
    // A write the raw peer never reads: big enough to stay pending.
    Storage big;
    big.tensors.push_back(std::vector<uint8_t>(32u << 20, 1));
    auto written = std::make_shared<std::promise<Error>>();
    pipe->write(messageOver(big, "big"), [written](const Error& e) { written->set_value(e); });
    // Time for the write to start. As above: a reset that comes first fails
    // the pipe (and the write) all the same.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    resetClose(fd);
    error = readSync(*pipe, std::chrono::seconds(15)).error;
    auto w = written->get_future();
    REQUIRE(ready(w, std::chrono::seconds(15)));
    CHECK(w.get());
  }
  SUBCASE("a client resets mid hello at a listener") {
    auto listener = context->listen({"tcp://127.0.0.1:0"});
    int fd = rawConnect(listener->url("tcp"));
    std::string hello = frame(wire::FrameType::kHello, wire::encode(wire::Hello{"raw", {}, {}}));
    sendAll(fd, hello.substr(0, hello.size() / 2));
    // Time for the listener to read the half hello. A slower machine cannot
    // fail this: a reset that comes first leaves the listener undisturbed too.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    resetClose(fd);
    // The listener is undisturbed: the next client gets through.
    auto client = tcpContext("client");
    auto pipe = client->connect(listener->url("tcp"));
    auto accepted = acceptSync(*listener);
    REQUIRE(accepted != nullptr);
    REQUIRE(!writeSync(*pipe, Message()));
    CHECK(!readSync(*accepted).error);
    error = ACTORPIPE_ERROR(EOFError);  // nothing to check on the raw side
  }
  MESSAGE("failed with: " << error.what());
  CHECK(error);
  CHECK(!isTestTimeout(error));
  checkUsable(*context);
}

// A pipe from `context` to the raw server, established (its first message
// read by the raw side, so a later failure is the test's, not the
// handshake's); returns the raw side's socket.
int establishWithRaw(Context& context, RawServer& raw, std::shared_ptr<Pipe>& pipe) {
  pipe = context.connect(raw.url());
  const int fd = raw.accept();
  REQUIRE(fd >= 0);
  CHECK(!recvFrame(fd).empty());  // the hello
  sendAll(fd, welcomeFrame());
  REQUIRE(!writeSync(*pipe, Message()));
  CHECK(!recvFrame(fd).empty());
  return fd;
}

TEST_CASE("a peer that half-closes with writes queued: no callback before their bytes are out of our hands") {
  // The peer reads nothing while we queue more writes than the socket
  // holds (and than a pipe keeps spare operations for), then shuts its
  // sending side and reads. Every write still queued when it left fails,
  // but the connection still sends its bytes, from the frame and from the
  // user's payload: a callback that fired before that (the pipe once
  // reported them at once) lets the user reuse memory that is still being
  // sent. Here each callback overwrites its payload, as a user may.
  auto context = makeContext("half-close");
  RawServer raw;
  std::shared_ptr<Pipe> pipe;
  const int fd = establishWithRaw(*context, raw, pipe);

  constexpr int kWrites = 24;
  constexpr size_t kBytes = size_t{1} << 20;  // together, more than the socket buffers hold
  std::vector<std::vector<char>> payloads;
  for (int i = 0; i < kWrites; ++i) payloads.emplace_back(kBytes, static_cast<char>('a' + i % 26));
  std::mutex mutex;
  std::condition_variable changed;
  int finished = 0;
  int failed = 0;
  for (int i = 0; i < kWrites; ++i) {
    Message message;
    message.metadata = "write " + std::to_string(i);
    Message::Payload payload;
    payload.data = payloads[i].data();
    payload.length = kBytes;
    message.payloads.push_back(payload);
    pipe->write(std::move(message), [&, i](const Error& error) {
      std::fill(payloads[i].begin(), payloads[i].end(), 'X');  // reused
      std::lock_guard<std::mutex> guard(mutex);
      ++finished;
      failed += error ? 1 : 0;
      changed.notify_all();
    });
  }
  // Time for the writes to reach the connection and fill the socket (2 s:
  // writes still queued in the pipe when it sees the end are dropped, and
  // a sanitized loop on 2 loaded CPUs can take most of a second), then for
  // our side to read the end of the peer's.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  REQUIRE(::shutdown(fd, SHUT_WR) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // Every message arrives whole, with its payload as it was written.
  timeval patience{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  int intact = 0;
  std::string body(kBytes, '\0');
  for (int i = 0; i < kWrites; ++i) {
    const std::string bytes = recvFrame(fd);
    if (bytes.empty()) break;
    wire::MessageFrame decoded;
    REQUIRE(!wire::decode(reinterpret_cast<const uint8_t*>(bytes.data()) + wire::kHeaderSize,
                          bytes.size() - wire::kHeaderSize, Limits(), decoded));
    CHECK(decoded.descriptor.metadata == "write " + std::to_string(i));
    REQUIRE(decoded.descriptor.payloads.size() == 1);
    REQUIRE(decoded.descriptor.payloads[0].length == kBytes);
    size_t got = 0;
    while (got < kBytes) {
      const ssize_t n = ::recv(fd, &body[got], kBytes - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    REQUIRE(got == kBytes);
    const size_t reused = static_cast<size_t>(std::count(body.begin(), body.end(), 'X'));
    CHECK_MESSAGE(reused == 0, "write " << i << " sent " << reused << " bytes after its callback let them be reused");
    ++intact;
  }
  CHECK(intact == kWrites);
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(15), [&] { return finished == kWrites; }));
  }
  MESSAGE(failed << " of " << kWrites << " writes were queued when the peer left, and failed");
  CHECK(failed > 0);  // else none was queued when the peer left: nothing was tested
  ::close(fd);
  pipe->close();
}

TEST_CASE("a peer that half-closes and reads no more: the writes it left queued fail, bounded in time") {
  // As above, but the peer never reads again: the writes still on the wire
  // cannot leave, and waiting for them would hold their callbacks (and
  // every write asked after them) for ever. The pipe gives them a bounded
  // time (5 s), then fails and drops them.
  auto context = makeContext("half-close-silent");
  RawServer raw;
  std::shared_ptr<Pipe> pipe;
  const int fd = establishWithRaw(*context, raw, pipe);
  constexpr int kWrites = 24;
  std::vector<char> payload(size_t{1} << 20, 'p');
  std::mutex mutex;
  std::condition_variable changed;
  int finished = 0;
  int failed = 0;
  auto record = [&](const Error& error) {
    std::lock_guard<std::mutex> guard(mutex);
    ++finished;
    failed += error ? 1 : 0;
    changed.notify_all();
  };
  for (int i = 0; i < kWrites; ++i) {
    Message message;
    Message::Payload p;
    p.data = payload.data();
    p.length = payload.size();
    message.payloads.push_back(p);
    pipe->write(std::move(message), record);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = Clock::now();
  REQUIRE(::shutdown(fd, SHUT_WR) == 0);
  pipe->write(Message(), record);  // asked after the peer left: refused, reported in order
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(changed.wait_for(lock, std::chrono::seconds(30), [&] { return finished == kWrites + 1; }));
  }
  MESSAGE(failed << " writes failed, the last " << secondsSince(start) << " s after the peer left");
  CHECK(failed > 1);
  CHECK(secondsSince(start) < 25);
  // The pipe failed: a new write fails at once.
  CHECK(writeSync(*pipe, Message()));
  ::close(fd);
  checkUsable(*context);
}

TEST_CASE("a listener that accepts and never answers: the handshake times out") {
  using std::chrono::milliseconds;
  RawServer raw;
  std::shared_ptr<Context> context;
  PipeOptions pipeOptions;
  int accepted = -1;
  SUBCASE("accepted, silent (Context handshakeTimeout)") {
    context = makeContext("patient", ContextOptions().handshakeTimeout(milliseconds(3000)));
  }
  SUBCASE("never accepted: only the kernel's backlog (Context handshakeTimeout)") {
    context = makeContext("patient", ContextOptions().handshakeTimeout(milliseconds(3000)));
    accepted = -2;
  }
  SUBCASE("accepted, silent (PipeOptions handshakeTimeout)") {
    context = makeContext("patient");
    pipeOptions.handshakeTimeout(milliseconds(800));
  }
  auto start = Clock::now();
  auto pipe = context->connect(raw.url(), pipeOptions);
  if (accepted == -1) accepted = raw.accept();
  auto written = std::make_shared<std::promise<Error>>();
  auto described = std::make_shared<std::promise<Error>>();
  pipe->write(Message(), [written](const Error& e) { written->set_value(e); });
  pipe->readDescriptor([described](const Error& e, Descriptor) { described->set_value(e); });
  auto w = written->get_future();
  auto d = described->get_future();
  REQUIRE(ready(w, std::chrono::seconds(20)));
  REQUIRE(ready(d, std::chrono::seconds(20)));
  double elapsed = secondsSince(start);
  Error we = w.get();
  Error de = d.get();
  MESSAGE("after " << elapsed << " s: write: " << we.what() << "; readDescriptor: " << de.what());
  CHECK(we.isOfType<TimeoutError>());
  CHECK(de.isOfType<TimeoutError>());
  CHECK(elapsed < 15.0);
  if (accepted >= 0) ::close(accepted);
  checkUsable(*context);
}

namespace {

constexpr size_t kChunk = 1u << 20;

// Child: accepts one pipe and reads 1 MiB tensors into one reused buffer,
// sleeping between reads, until a "stop" message. Reports how many it read
// and its resident memory after warm-up and at its peak.
int slowReader(Child& self) {
  auto context = makeContext("slow-reader");
  auto listener = context->listen({"tcp://127.0.0.1:0", "shm://"});
  self.send(listener->url("tcp"));
  self.send(listener->url("shm"));
  auto pipe = acceptSync(*listener, nullptr, std::chrono::seconds(30));
  CHILD_CHECK(pipe != nullptr);
  std::vector<uint8_t> buffer(kChunk);
  size_t messages = 0;
  size_t baseline = 0;
  size_t peak = 0;
  for (;;) {
    std::promise<std::pair<Error, Descriptor>> described;
    pipe->readDescriptor([&](const Error& e, Descriptor d) { described.set_value({e, std::move(d)}); });
    auto r = described.get_future();
    CHILD_CHECK(r.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    auto [error, d] = r.get();
    CHILD_CHECK(!error);
    Allocation a;
    if (d.metadata != "stop") {
      CHILD_CHECK(d.tensors.size() == 1 && d.tensors[0].length == kChunk);
      a.tensors.push_back({CpuBuffer{buffer.data()}});
    }
    std::promise<Error> read;
    pipe->read(std::move(a), [&](const Error& e) { read.set_value(e); });
    auto f = read.get_future();
    CHILD_CHECK(f.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    CHILD_CHECK(!f.get());
    if (d.metadata == "stop") break;
    CHILD_CHECK(buffer[0] == 0x5a && buffer[kChunk - 1] == 0x5a);
    ++messages;
    size_t rss = residentBytes();
    if (messages == 10) baseline = rss;
    peak = std::max(peak, rss);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  self.send(std::to_string(messages) + " " + std::to_string(baseline) + " " + std::to_string(peak));
  return 0;
}

}  // namespace

TEST_CASE("a receiver that reads slowly while the sender writes fast: memory stays bounded") {
  for (bool tcpOnly : {true, false}) {
    CAPTURE(tcpOnly);
    Child child = Child::spawn(slowReader, std::chrono::seconds(120));
    std::string tcpUrl = child.receive();
    std::string shmUrl = child.receive();
    REQUIRE(!shmUrl.empty());
    auto context = tcpOnly ? tcpContext("fast-writer") : makeContext("fast-writer");
    auto pipe = context->connect(tcpOnly ? tcpUrl : shmUrl);
    std::vector<uint8_t> data(kChunk, 0x5a);
    std::mutex mutex;
    std::condition_variable changed;
    int outstanding = 0;
    size_t completed = 0;
    Error firstError;
    size_t baseline = 0;
    size_t peak = 0;
    auto start = Clock::now();
    while (secondsSince(start) < 3.0) {
      std::unique_lock<std::mutex> lock(mutex);
      REQUIRE(changed.wait_for(lock, std::chrono::seconds(30), [&] { return outstanding < 8; }));
      if (firstError) break;
      ++outstanding;
      size_t done = completed;
      lock.unlock();
      Message m;
      m.metadata = "chunk";
      Message::Tensor t;
      t.buffer = CpuBuffer{data.data()};
      t.length = data.size();
      m.tensors.push_back(std::move(t));
      pipe->write(std::move(m), [&](const Error& e) {
        std::lock_guard<std::mutex> guard(mutex);
        --outstanding;
        ++completed;
        if (e && !firstError) firstError = e;
        changed.notify_all();
      });
      size_t rss = residentBytes();
      if (done >= 10 && baseline == 0) baseline = rss;
      peak = std::max(peak, rss);
    }
    {
      std::unique_lock<std::mutex> lock(mutex);
      REQUIRE(changed.wait_for(lock, std::chrono::seconds(60), [&] { return outstanding == 0; }));
    }
    REQUIRE(!firstError);
    Message stop;
    stop.metadata = "stop";
    REQUIRE(!writeSync(*pipe, std::move(stop), std::chrono::seconds(60)));
    std::string report = child.receive(std::chrono::seconds(60));
    REQUIRE(!report.empty());
    CHECK(child.wait() == 0);
    size_t readerMessages = 0, readerBaseline = 0, readerPeak = 0;
    std::sscanf(report.c_str(), "%zu %zu %zu", &readerMessages, &readerBaseline, &readerPeak);
    MESSAGE(pipe->info().transport << ": wrote " << completed << " MiB in " << secondsSince(start) << " s; reader read "
                     << readerMessages << ", RSS " << readerBaseline / 1048576 << " -> "
                     << readerPeak / 1048576 << " MiB; writer RSS " << baseline / 1048576
                     << " -> " << peak / 1048576 << " MiB");
    CHECK(readerMessages == completed);
    // A reader that buffered whatever it was sent would grow by the bytes in
    // flight; bounded, it grows by its transport's buffers at most.
    CHECK(readerPeak < readerBaseline + (128u << 20));
    if (baseline) CHECK(peak < baseline + (128u << 20));
    checkUsable(*context);
  }
}
