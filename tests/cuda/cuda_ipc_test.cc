// CUDA tensors between two processes of one host (cuda_ipc over shm). CUDA
// does not survive fork, so this process never touches it: every role runs
// in a child of its own (the probe too), and the parent only watches.
#include <doctest/doctest.h>

#include <signal.h>

#include <future>

#include "cuda_support.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

bool noDevice() { return noCudaDeviceAskedInChild(); }

// Child: listen on shm (or tcp), accept one pipe; read each message into
// CUDA memory laid out as the sender's, and write it back from there
// (through cuda_ipc again, or cuda_basic over tcp). Says "read N" after
// each read.
int echoOn(Child& self, const std::string& transport) {
  auto context = makeFullContext("echo");
  auto listener = context->listen({transport == "tcp" ? "tcp://127.0.0.1:0" : "shm://"});
  self.send(listener->url(transport));
  auto pipe = acceptSync(*listener);
  CHILD_CHECK(pipe != nullptr);
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  CHILD_CHECK(!e);
  const auto layouts = cudaLayouts();
  for (int n = 0;; ++n) {
    auto promise = std::make_shared<std::promise<std::pair<Error, int>>>();
    std::unique_ptr<CudaMessage> into;
    pipe->readDescriptor([&, promise](const Error& e, Descriptor d) {
      if (e) return promise->set_value({e, -1});
      int layout = std::stoi(d.metadata);
      into = std::make_unique<CudaMessage>(layouts[layout % layouts.size()], 0, stream);
      pipe->read(into->allocation(), [promise, layout](const Error& e) { promise->set_value({e, layout}); });
    });
    auto [error, layout] = promise->get_future().get();
    if (error) {
      if (!error.isOfType<EOFError>()) std::fprintf(stderr, "echo: %s\n", error.what().c_str());
      return error.isOfType<EOFError>() ? 0 : 7;
    }
    self.send("read " + std::to_string(n));
    Error we = writeSync(*pipe, into->message(std::to_string(layout)), 60s);
    if (we) {
      std::fprintf(stderr, "echo write: %s\n", we.what().c_str());
      return 8;
    }
  }
}

int echo(Child& self) { return echoOn(self, "shm"); }
int echoTcp(Child& self) { return echoOn(self, "tcp"); }

// Every layout to an echo in another process and back, twice, then a burst
// of 16 scribbled after their callbacks. Over shm the full set of channels
// picks cuda_ipc; over tcp (no peer process to name) cuda_basic.
void roundTrips(const std::string& transport) {
  Child server = Child::spawn(transport == "tcp" ? echoTcp : echo, 120s);
  std::string url = server.receive(60s);
  REQUIRE(!url.empty());
  Child client = Child::spawn(
      [url, transport](Child& self) {
        auto context = makeFullContext("client");
        auto pipe = context->connect(url);
        Error e;
        cudaStream_t stream = cuda::createStream(0, e);
        CHILD_CHECK(!e);
        const auto layouts = cudaLayouts();
        // Each layout twice (the second trip reuses cached handles), and a
        // burst of 16 in flight.
        std::vector<size_t> order;
        for (size_t i = 0; i < layouts.size(); ++i) order.push_back(i);
        for (size_t i = 0; i < layouts.size(); ++i) order.push_back(i);
        for (size_t i = 0; i < order.size(); ++i) {
          CudaMessage from(layouts[order[i]], static_cast<int>(i), stream);
          CudaMessage back(layouts[order[i]], 0, stream);
          from.fill();
          Error we = writeSync(*pipe, from.message(std::to_string(order[i])), 60s);
          if (we) std::fprintf(stderr, "client write: %s\n", we.what().c_str());
          CHILD_CHECK(!we);
          auto promise = std::make_shared<std::promise<Error>>();
          pipe->readDescriptor([&, promise](const Error& e, Descriptor) {
            if (e) return promise->set_value(e);
            pipe->read(back.allocation(), [promise](const Error& e) { promise->set_value(e); });
          });
          Error re = promise->get_future().get();
          if (re) std::fprintf(stderr, "client read: %s\n", re.what().c_str());
          CHILD_CHECK(!re);
          std::string diff = back.compare(from);
          if (!diff.empty()) std::fprintf(stderr, "layout %zu: %s\n", order[i], diff.c_str());
          CHILD_CHECK(diff.empty());
        }
        // The burst: layout 3 (1 MiB + 5 at an odd offset), each in its own allocation.
        constexpr int kBurst = 16;
        std::vector<std::unique_ptr<CudaMessage>> from;
        std::vector<std::future<Error>> writes;
        for (int i = 0; i < kBurst; ++i) {
          from.push_back(std::make_unique<CudaMessage>(layouts[3], 100 + i, stream));
          from.back()->fill();
          auto promise = std::make_shared<std::promise<Error>>();
          writes.push_back(promise->get_future());
          CudaMessage* m = from.back().get();
          pipe->write(m->message("3"), [promise, m](const Error& e) {
            if (!e) m->scribble();  // the receiver is done with it: reuse
            promise->set_value(e);
          });
        }
        for (int i = 0; i < kBurst; ++i) {
          CudaMessage back(layouts[3], 0, stream);
          auto promise = std::make_shared<std::promise<Error>>();
          pipe->readDescriptor([&, promise](const Error& e, Descriptor) {
            if (e) return promise->set_value(e);
            pipe->read(back.allocation(), [promise](const Error& e) { promise->set_value(e); });
          });
          CHILD_CHECK(!promise->get_future().get());
          CHILD_CHECK(back.compare(*from[i]).empty());
        }
        for (auto& w : writes) CHILD_CHECK(!w.get());
        auto info = pipe->info();
        CHILD_CHECK(info.transport == transport);
        CHILD_CHECK(info.channels["cuda"] == (transport == "tcp" ? "cuda_basic" : "cuda_ipc"));
        self.send("done");
        pipe->close();
        context->join();
        return 0;
      },
      120s);
  CHECK(client.receive(110s) == "done");
  CHECK(client.wait(30s) == 0);
  CHECK(server.wait(30s) == 0);
}

void killedMidTransfer(const std::string& transport) {
  Child server = Child::spawn(transport == "tcp" ? echoTcp : echo, 120s);
  std::string url = server.receive(60s);
  REQUIRE(!url.empty());
  Child client = Child::spawn(
      [url](Child& self) {
        auto context = makeFullContext("client");
        auto pipe = context->connect(url);
        Error e;
        cudaStream_t stream = cuda::createStream(0, e);
        CHILD_CHECK(!e);
        // 256 MiB tensors (layout 5) until a write fails.
        CudaMessage from(cudaLayouts()[5], 1, stream);
        from.fill();
        for (int i = 0; i < 1000; ++i) {
          Error we = writeSync(*pipe, from.message("5"), 30s);
          if (we) {
            self.send(we.isOfType<LogicError>() ? "timeout" : "failed");
            return 0;
          }
          if (i == 0) self.send("wrote");
        }
        self.send("never failed");
        return 1;
      },
      120s);
  REQUIRE(client.receive(60s) == "wrote");
  REQUIRE(server.receive(60s) == "read 0");
  server.kill(SIGKILL);
  CHECK(client.receive(60s) == "failed");
  CHECK(client.wait(30s) == 0);
  server.wait(10s);
}

}  // namespace

TEST_CASE("cuda_ipc: CUDA tensors of every size and layout to another process and back") {
  if (noDevice()) return;
  roundTrips("shm");
}

TEST_CASE("cuda_basic: CUDA tensors of every size and layout to another process over tcp and back") {
  if (noDevice()) return;
  roundTrips("tcp");
}

TEST_CASE("cuda_ipc: a peer killed mid-transfer fails the writer, no hang") {
  if (noDevice()) return;
  killedMidTransfer("shm");
}

TEST_CASE("cuda_basic: a peer killed mid-transfer fails the writer, no hang") {
  if (noDevice()) return;
  killedMidTransfer("tcp");
}
