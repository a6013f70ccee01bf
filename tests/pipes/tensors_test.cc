// A Tensor written through a pipe arrives as a Tensor (actors/pipe_tensor.h):
// every dtype, several shapes, a view at a non-zero offset, on every
// transport and channel this host has; and a peer's tensor metadata is
// parsed as the hostile input it may be.
#include <doctest/doctest.h>

#include <cstring>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include <actorpipe/actors/pipe_tensor.h>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

// Tensors of every dtype with distinct contents, the last a view into the
// middle of a larger storage (non-zero byte offset).
std::vector<Tensor> sampleTensors() {
  std::vector<Tensor> out;
  out.push_back(Tensor::full<float>({2, 3}, 1.5f));
  out.push_back(Tensor::full<double>({4}, -2.25));
  out.push_back(Tensor::full<int32_t>({1, 2, 3, 4}, 7));
  out.push_back(Tensor::full<int64_t>({}, int64_t{1} << 40));  // a scalar
  out.push_back(Tensor::full<uint8_t>({0, 5}, 9));               // no elements
  Tensor big = Tensor::empty({1 << 16}, DType::kInt32);
  for (int i = 0; i < (1 << 16); ++i) big.data<int32_t>()[i] = i * 3;
  out.push_back(Tensor::fromStorage(big.storage(), {128, 256}, DType::kInt32, 4096 * sizeof(int32_t)));
  for (size_t t = 0; t < out.size(); ++t) {  // make each byte pattern its own
    if (out[t].dtype() == DType::kFloat32) out[t].data<float>()[1] = 42.0f + t;
  }
  return out;
}

bool sameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.rawData(), b.rawData(), a.nbytes()) == 0);
}

std::shared_ptr<Context> contextWith(const std::string& channel) {
  auto context = std::make_shared<Context>(ContextOptions().name("tensors-" + channel));
  context->registerTransport(0, "tcp", transport::uv::create());
  context->registerTransport(10, "shm", transport::shm::create());
  if (channel == "basic") context->registerChannel(0, "basic", channel::basic::create());
  if (channel == "mpt") context->registerChannel(0, "mpt", channel::mpt::create(2, "127.0.0.1"));
  if (channel == "xth") context->registerChannel(0, "xth", channel::xth::create());
  if (channel == "cma") context->registerChannel(0, "cma", channel::cma::create());
  return context;
}

// Writes `tensors` on `pipe` (with "t<i>" as each one's own metadata) and
// waits for the write to complete.
Error writeTensors(Pipe& pipe, const std::vector<Tensor>& tensors) {
  Message message;
  message.metadata = "tensors";
  for (size_t i = 0; i < tensors.size(); ++i) message.tensors.push_back(pipeTensor(tensors[i], "t" + std::to_string(i)));
  std::promise<Error> wrote;
  pipe.write(message, [&](const Error& e) { wrote.set_value(e); });
  auto w = wrote.get_future();
  if (w.wait_for(20s) != std::future_status::ready) return ACTORPIPE_ERROR(TimeoutError, "write", 20000);
  return w.get();
}

// Reads one message of pipe tensors into `received` (reusing what is there
// when dtype and shape match), their own metadata into `notes`.
Error readTensors(Pipe& pipe, std::vector<Tensor>& received, std::vector<std::string>& notes) {
  std::promise<Error> read;
  pipe.readDescriptor([&](const Error& e, Descriptor d) {
    if (e) return read.set_value(e);
    Allocation a;
    received.resize(d.tensors.size());
    notes.resize(d.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      a.tensors.emplace_back();
      if (Error bad = receiveTensor(d.tensors[i], received[i], a.tensors.back(), &notes[i])) {
        return read.set_value(bad);
      }
    }
    pipe.read(a, [&](const Error& e) { read.set_value(e); });
  });
  auto r = read.get_future();
  if (r.wait_for(20s) != std::future_status::ready) return ACTORPIPE_ERROR(TimeoutError, "read", 20000);
  return r.get();
}

// Writes `tensors` on `from`, receives them on `to` as Tensors.
std::vector<Tensor> sendAndReceive(Pipe& from, Pipe& to, const std::vector<Tensor>& tensors,
                                   std::vector<Tensor> received = {}) {
  std::vector<std::string> notes;
  std::promise<Error> readDone;
  // Both directions may share one loop: the read is queued before the write.
  std::thread reader([&] { readDone.set_value(readTensors(to, received, notes)); });
  Error we = writeTensors(from, tensors);
  reader.join();
  Error re = readDone.get_future().get();
  REQUIRE_MESSAGE(!we, we.what());
  REQUIRE_MESSAGE(!re, re.what());
  REQUIRE(notes.size() == tensors.size());
  for (size_t i = 0; i < notes.size(); ++i) CHECK(notes[i] == "t" + std::to_string(i));
  return received;
}

Descriptor::Tensor entry(const std::string& metadata, size_t length) {
  Descriptor::Tensor d;
  d.metadata = metadata;
  d.length = length;
  d.sourceDevice = Device::cpu();
  return d;
}

}  // namespace

TEST_CASE("tensors of every dtype and shape, and a view, cross every transport and channel as Tensors") {
  const std::vector<Tensor> sent = sampleTensors();
  for (const std::string transport : {"tcp", "shm"}) {
    for (const std::string channel : {"basic", "mpt", "xth"}) {
      CAPTURE(transport);
      CAPTURE(channel);
      auto context = contextWith(channel);
      auto listener = context->listen({transport == "tcp" ? "tcp://127.0.0.1:0" : "shm://"});
      auto client = context->connect(listener->url(transport));
      auto server = acceptSync(*listener);
      REQUIRE(server != nullptr);
      auto received = sendAndReceive(*client, *server, sent);
      CHECK(client->info().transport == transport);
      CHECK(client->info().channels.at("cpu") == channel);
      REQUIRE(received.size() == sent.size());
      for (size_t i = 0; i < sent.size(); ++i) {
        CAPTURE(i);
        CHECK(sameTensor(received[i], sent[i]));
      }
      // Back the other way, into Tensors the reader already has: read in place.
      std::vector<Tensor> reuse;
      for (const auto& t : sent) reuse.push_back(Tensor::zeros(t.shape(), t.dtype()));
      const void* first = reuse[0].rawData();
      auto back = sendAndReceive(*server, *client, received, reuse);
      CHECK(back[0].rawData() == first);
      for (size_t i = 0; i < sent.size(); ++i) CHECK(sameTensor(back[i], sent[i]));
      context->join();
    }
  }
}

TEST_CASE("tensors cross to another process over shm and cma, and come back") {
  Child child = Child::spawn([](Child& self) {
    auto context = contextWith("cma");
    auto listener = context->listen({"shm://"});
    self.send(listener->url("shm"));
    auto pipe = acceptSync(*listener);
    CHILD_CHECK(pipe != nullptr);
    std::vector<Tensor> received;
    std::vector<std::string> notes;
    Error e = readTensors(*pipe, received, notes);
    CHILD_CHECK(!e);
    self.send(pipe->info().channels.at("cpu"));
    CHILD_CHECK(!writeTensors(*pipe, received));  // echo, from the Tensors just made
    readSync(*pipe);  // until the parent hangs up
    return 0;
  });
  const std::string url = child.receive();
  REQUIRE(!url.empty());
  auto context = contextWith("cma");
  auto pipe = context->connect(url);
  const std::vector<Tensor> sent = sampleTensors();
  REQUIRE(!writeTensors(*pipe, sent));
  CHECK(child.receive() == "cma");
  std::vector<Tensor> back;
  std::vector<std::string> notes;
  Error e = readTensors(*pipe, back, notes);
  REQUIRE_MESSAGE(!e, e.what());
  REQUIRE(back.size() == sent.size());
  for (size_t i = 0; i < sent.size(); ++i) CHECK(sameTensor(back[i], sent[i]));
  pipe->close();
  CHECK(child.wait() == 0);
  context->join();
}

TEST_CASE("a peer's tensor metadata is parsed strictly, before any allocation") {
  DType dtype;
  Shape shape;
  std::string mine;
  REQUIRE(!parsePipeTensor(entry("apT1 float32 2,3;mine", 24), dtype, shape, &mine));
  CHECK(dtype == DType::kFloat32);
  CHECK(shape == Shape{2, 3});
  CHECK(mine == "mine");
  REQUIRE(!parsePipeTensor(entry("apT1 int64 ;", 8), dtype, shape));
  CHECK(shape.empty());
  CHECK_FALSE(isPipeTensor(entry("plain bytes", 8)));

  const std::string tooLarge = std::to_string(std::numeric_limits<uint64_t>::max());
  for (auto [metadata, length] : std::vector<std::pair<std::string, size_t>>{
           {"plain bytes", 8},                          // not ours
           {"apT1 float16 2;", 4},                      // unknown dtype
           {"apT1 float32 2,3", 24},                    // no ';'
           {"apT1 float32 2,3;", 25},                   // length disagrees
           {"apT1 float32 2,,3;", 24},                  // empty extent
           {"apT1 float32 2,3,;", 24},                  // trailing ','
           {"apT1 float32 -2;", 8},                     // sign
           {"apT1 float32 2x3;", 24},                   // not a separator
           {"apT1 uint8 " + tooLarge + ";", 8},         // extent too large
           {"apT1 uint8 9444444224222222229;", 8},      // 19 digits, above int64 (the fuzzer's find)
           {"apT1 uint8 4611686018427387905;", 8},      // just above 2^62
           {"apT1 uint8 4294967296,4294967296;", 0},    // product overflows
           {"apT1 float32 3511112008884480,4224,0;", 0},  // empty, but the rest overflows int64 (the fuzzer's)
           {"apT1 float64 4611686018427387904;", 0},    // bytes overflow
           {"apT1 uint8 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1;", 1},  // 17 extents
       }) {
    CAPTURE(metadata);
    Error e = parsePipeTensor(entry(metadata, length), dtype, shape);
    CHECK_MESSAGE(e.isOfType<ProtocolError>(), e.what());
    Tensor out;
    Allocation::Tensor a;
    CHECK(receiveTensor(entry(metadata, length), out, a).isOfType<ProtocolError>());
    CHECK_FALSE(out.defined());  // nothing allocated
  }
}
