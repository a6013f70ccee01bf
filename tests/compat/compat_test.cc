// TensorPipe's API surface as its users meet it: headers at TensorPipe's
// paths, its configuration macros, its error kinds and utilities. This file
// includes TensorPipe's headers only (through the actorpipe::tensorpipe
// target), as a program written for TensorPipe does.
#include <tensorpipe/tensorpipe.h>

#include <tensorpipe/channel/error.h>
#include <tensorpipe/common/cpu_buffer.h>
#include <tensorpipe/common/cuda_buffer.h>
#include <tensorpipe/channel/cuda_basic/factory.h>
#include <tensorpipe/channel/cuda_ipc/factory.h>
#include <tensorpipe/channel/cuda_xth/factory.h>
#include <tensorpipe/tensorpipe_cuda.h>
#include <tensorpipe/core/pipe.h>
#include <tensorpipe/transport/error.h>
#include <tensorpipe/transport/ibv/utility.h>
#include <tensorpipe/transport/uv/error.h>
#include <tensorpipe/transport/uv/utility.h>

#include <netinet/in.h>

#include <chrono>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "doctest/doctest.h"

#if !TENSORPIPE_HAS_SHM_TRANSPORT || !TENSORPIPE_HAS_CMA_CHANNEL || !TENSORPIPE_HAS_IBV_TRANSPORT
#error "TensorPipe's tests register shm, cma and ibv only when these macros say they exist"
#endif

#if !TENSORPIPE_HAS_CUDA_IPC_CHANNEL
#error "TensorPipe's users register cuda_ipc only when this macro says it exists"
#endif

using namespace tensorpipe;
using namespace std::chrono_literals;

namespace {

// TensorPipe's Error converts to bool implicitly: code stores it as one.
static_assert(std::is_convertible_v<Error, bool>);
bool failed(const Error& error) { return error; }

std::shared_ptr<Context> makeFullContext() {
  auto context = std::make_shared<Context>();
  context->registerTransport(0, "tcp", transport::uv::create());
#if TENSORPIPE_HAS_SHM_TRANSPORT
  context->registerTransport(10, "shm", transport::shm::create());
#endif
  context->registerChannel(0, "basic", channel::basic::create());
#if TENSORPIPE_HAS_CMA_CHANNEL
  context->registerChannel(10, "cma", channel::cma::create());
#endif
  context->registerChannel(20, "xth", channel::xth::create());
  context->registerChannel(5, "mpt", channel::mpt::create(2, "127.0.0.1"));
  return context;
}

template <typename T>
T waitFor(std::future<T>& future) {
  REQUIRE(future.wait_for(20s) == std::future_status::ready);
  return future.get();
}

struct Pair {
  std::shared_ptr<Context> context;
  std::shared_ptr<Listener> listener;
  std::shared_ptr<Pipe> client;
  std::shared_ptr<Pipe> server;

  explicit Pair(const std::string& url, std::shared_ptr<Context> ctx = makeFullContext()) : context(std::move(ctx)) {
    listener = context->listen({url});
    std::promise<std::shared_ptr<Pipe>> accepted;
    listener->accept([&](const Error& e, std::shared_ptr<Pipe> p) { accepted.set_value(e ? nullptr : p); });
    const std::string scheme = url.substr(0, url.find("://"));
    client = context->connect(listener->url(scheme));
    auto f = accepted.get_future();
    server = waitFor(f);
    REQUIRE(static_cast<bool>(server));
  }
  ~Pair() { context->join(); }
};

// One message with one tensor, client to server; the error of the read.
Error roundTrip(Pair& pair, std::vector<uint8_t>& sent, std::vector<uint8_t>& got) {
  Message message;
  message.metadata = "m";
  Message::Tensor tensor;
  tensor.buffer = CpuBuffer{sent.data()};
  tensor.length = sent.size();
  message.tensors.push_back(tensor);
  pair.client->write(message, [](const Error&) {});
  std::promise<Error> done;
  pair.server->readDescriptor([&](const Error& e, Descriptor d) {
    if (e) return done.set_value(e);
    got.assign(d.tensors.at(0).length, 0);
    Allocation allocation;
    Allocation::Tensor t;
    t.buffer = CpuBuffer{got.data()};
    allocation.tensors.push_back(t);
    pair.server->read(allocation, [&](const Error& e) { done.set_value(e); });
  });
  auto f = done.get_future();
  return waitFor(f);
}

}  // namespace

TEST_CASE("shm, cma, xth and mpt registered through TensorPipe's names carry a tensor") {
  for (const std::string url : {"shm://", "tcp://127.0.0.1:0"}) {
    Pair pair(url);
    std::vector<uint8_t> sent(1 << 20), got;
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 7 + 3);
    Error e = roundTrip(pair, sent, got);
    REQUIRE_MESSAGE(!failed(e), e.what());
    CHECK(got == sent);
    // One process, so xth (the highest priority) carries CPU tensors.
    CHECK(pair.client->info().channels.at("cpu") == "xth");
  }
}

TEST_CASE("a peer that hangs up is transport::EOFError to the reader") {
  // Each pipe settled first (a message across), so that the close is a
  // clean one: a TCP socket closed with bytes unread, or a pipe closed while
  // it moves from tcp to shm, is a reset (ECONNRESET), not an EOF.
  auto tcpOnly = std::make_shared<Context>();
  tcpOnly->registerTransport(0, "tcp", transport::uv::create());
  tcpOnly->registerChannel(0, "basic", channel::basic::create());
  for (auto* url : {"tcp://127.0.0.1:0", "shm://"}) {
    CAPTURE(url);
    Pair pair(url, std::string(url) == "shm://" ? makeFullContext() : tcpOnly);
    std::vector<uint8_t> sent(64, 1), got;
    REQUIRE(!failed(roundTrip(pair, sent, got)));
    std::promise<Error> read;
    pair.server->readDescriptor([&](const Error& e, Descriptor) { read.set_value(e); });
    pair.client->close();
    auto f = read.get_future();
    Error e = waitFor(f);
    REQUIRE(e);
    CHECK_MESSAGE(e.isOfType<transport::EOFError>(), e.what());
    CHECK(e.isOfType<EOFError>());  // the same type
  }
}

TEST_CASE("libuv failures are uv::UVError and still SystemError") {
  auto context = makeFullContext();
  auto first = context->listen({"tcp://127.0.0.1:0"});
  const std::string taken = first->url("tcp");
  auto second = context->listen({taken});  // the same port: EADDRINUSE
  std::promise<Error> accepted;
  second->accept([&](const Error& e, std::shared_ptr<Pipe>) { accepted.set_value(e); });
  auto f = accepted.get_future();
  Error e = waitFor(f);
  REQUIRE(e);
  CHECK_MESSAGE(e.isOfType<transport::uv::UVError>(), e.what());
  CHECK(e.isOfType<SystemError>());
  CHECK(e.castToType<SystemError>()->errorCode() == EADDRINUSE);
  context->join();
}

TEST_CASE("the error kinds TensorPipe's users test for exist under its names") {
  Error closed = TP_CREATE_ERROR(channel::ContextClosedError);
  CHECK(closed.isOfType<ContextClosedError>());
  CHECK(closed.isOfType<transport::ContextClosedError>());
  CHECK_FALSE(closed.isOfType<channel::ChannelClosedError>());
  CHECK(TP_CREATE_ERROR(ShortReadError, 8, 3).what().find("short read") == 0);
  CHECK(TP_CREATE_ERROR(ShortWriteError, 8, 3).isOfType<ShortWriteError>());
  CHECK(TP_CREATE_ERROR(transport::ConnectionClosedError).isOfType<transport::ConnectionClosedError>());
  CHECK(TP_CREATE_ERROR(transport::ListenerClosedError).isOfType<ListenerClosedError>());
  CHECK(TP_CREATE_ERROR(channel::ContextNotViableError).isOfType<transport::ContextNotViableError>());
  CHECK(TP_CREATE_ERROR(transport::ibv::IbvError, "x").what().find("ibv: x") == 0);
  CHECK_FALSE(failed(Error::kSuccess));
}

TEST_CASE("Device hashes, alone and in pairs, like TensorPipe's") {
  std::unordered_map<Device, int> byDevice;
  byDevice[Device{kCpuDeviceType, 0}] = 1;
  byDevice[Device{kCudaDeviceType, 0}] = 2;
  byDevice[Device{kCudaDeviceType, 1}] = 3;
  CHECK(byDevice.size() == 3);
  CHECK(byDevice.at(Device{kCudaDeviceType, 1}) == 3);
  std::unordered_set<std::pair<Device, Device>> maps;
  maps.insert({Device{kCpuDeviceType, 0}, Device{kCudaDeviceType, 0}});
  maps.insert({Device{kCudaDeviceType, 0}, Device{kCpuDeviceType, 0}});
  maps.insert({Device{kCpuDeviceType, 0}, Device{kCudaDeviceType, 0}});
  CHECK(maps.size() == 2);
}

TEST_CASE("Buffer is a value: unwrap on a copy leaves the original; a wrong kind throws") {
  int a = 0, b = 0;
  Buffer original = CpuBuffer{&a};
  Buffer copy = original;
  copy.unwrap<CpuBuffer>().ptr = &b;
  CHECK(original.unwrap<CpuBuffer>().ptr == &a);
  CHECK(copy.unwrap<CpuBuffer>().ptr == &b);
  CHECK_THROWS_AS(original.unwrap<CudaBuffer>(), std::runtime_error);
  const Buffer& constant = original;
  CHECK_THROWS_AS(constant.unwrap<CudaBuffer>(), std::runtime_error);
}

TEST_CASE("lookupAddr* find addresses a listener can bind, or say NoAddrFoundError") {
  auto [e, lo] = transport::uv::lookupAddrForIface("lo");
  REQUIRE_MESSAGE(!e, e.what());
  CHECK(lo == "127.0.0.1:0");
  auto [e2, none] = transport::uv::lookupAddrForIface("no-such-interface0");
  CHECK(e2.isOfType<transport::uv::NoAddrFoundError>());
  CHECK(none.empty());
  auto [e3, ibvLo] = transport::ibv::lookupAddrForIface("lo");
  CHECK(!e3);
  CHECK(ibvLo == lo);
  CHECK(std::get<0>(transport::ibv::lookupAddrForIface("no-such-interface0"))
            .isOfType<transport::ibv::NoAddrFoundError>());

  // Whatever NCCL's rule and the host name give must be listenable here.
  std::vector<std::string> found;
  for (auto [err, addr] : {transport::uv::lookupAddrLikeNccl(),
                           transport::uv::lookupAddrLikeNccl(AF_INET),
                           transport::uv::lookupAddrForHostname()}) {
    if (err) {
      // A host whose name does not resolve, in a namespace with only lo.
      CHECK_MESSAGE(err.isOfType<transport::uv::NoAddrFoundError>(), err.what());
      continue;
    }
    found.push_back(addr);
  }
  REQUIRE(found.size() >= 2);  // lo at least, for both NCCL-like lookups
  CHECK(found[1].find('[') == std::string::npos);  // AF_INET only
  auto uv = transport::uv::create();
  for (const auto& addr : found) {
    auto listener = uv->listen(addr);
    CHECK_MESSAGE(!listener->addr().empty(), addr);
  }
  uv->close();
  uv->join();
}

TEST_CASE("transport::Context::canCommunicateWithRemote compares domain descriptors") {
  auto uv = transport::uv::create();
  CHECK(uv->canCommunicateWithRemote(uv->domainDescriptor()));
  CHECK_FALSE(uv->canCommunicateWithRemote(uv->domainDescriptor() + "-elsewhere"));
  auto shm = transport::shm::create();
  CHECK(shm->canCommunicateWithRemote(shm->domainDescriptor()));
  CHECK_FALSE(shm->canCommunicateWithRemote("shm:another-boot"));
  uv->close();
  uv->join();
  shm->close();
  shm->join();
}

TEST_CASE("the CUDA channels under TensorPipe's names carry CUDA tensors only, and only where a GPU is") {
  // As PyTorch's agent registers them; CPU tensors still take the CPU channels.
  for (const auto& [name, channel] :
       std::vector<std::pair<std::string, std::shared_ptr<channel::Context>>>{
           {"cuda_ipc", channel::cuda_ipc::create()}, {"cuda_xth", channel::cuda_xth::create()}}) {
    CAPTURE(name);
    CHECK(channel->deviceTypes() == std::vector<std::string>{kCudaDeviceType});
    CHECK_FALSE(channel->sendsInline());
    CHECK(channel->makesEndpoints());
    // Asked without starting CUDA: on these machines (no GPU) never viable.
    if (!std::ifstream("/proc/driver/nvidia/gpus").good() && !std::ifstream("/dev/nvidiactl").good()) {
      CHECK_FALSE(channel->isViable());
    }
  }
  // PyTorch's agent makes cuda_basic over a CPU channel; here its bytes ride
  // the pipe's connection, staged through an endpoint of its own.
  auto basic = channel::cuda_basic::create(channel::basic::create());
  CHECK(basic->deviceTypes() == std::vector<std::string>{kCudaDeviceType});
  CHECK(basic->sendsInline());
  CHECK(basic->makesEndpoints());
  if (!std::ifstream("/proc/driver/nvidia/gpus").good() && !std::ifstream("/dev/nvidiactl").good()) {
    CHECK_FALSE(basic->isViable());
  }
  CudaBuffer buffer{nullptr, nullptr, 1};
  CHECK(Buffer(buffer).device() == Device(kCudaDeviceType, 1));
}
