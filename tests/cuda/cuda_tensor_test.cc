// The library's Tensor with CUDA storage: made on a device, copied between
// host and device, through pipes as a Tensor that lands in CUDA memory, and
// in actor messages to another node. What holds without a device runs
// everywhere; the rest runs in forked children (CUDA does not survive fork:
// this process never starts it) and skips with "no CUDA device".
#include <doctest/doctest.h>

#include <signal.h>

#include <future>

#include <caf/all.hpp>

#include <actorpipe/actors/pipe_tensor.h>
#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>

#include "cuda_support.h"

using namespace actorpipe;
using namespace testing;
using namespace std::chrono_literals;

namespace {

const Device kGpu{kCudaDeviceType, 0};

Descriptor::Tensor entryOf(const Message::Tensor& sent, optional<Device> target = nullopt) {
  Descriptor::Tensor d;
  d.length = sent.length;
  d.sourceDevice = sent.buffer.device();
  d.targetDevice = target;
  d.metadata = sent.metadata;
  return d;
}

// A host tensor 0, 1, 2, ... of `shape`.
Tensor counting(Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::kFloat32);
  float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(i);
  return t;
}

bool countsUp(const Tensor& host, float plus = 0) {
  const float* v = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (v[i] != static_cast<float>(i) + plus) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("CUDA Tensors: where they land, and what fails clearly without a device") {
  // These never start CUDA: the checks come before any allocation.
  Tensor host = counting({4, 5});
  Message::Tensor sent = pipeTensor(host);
  Tensor out;
  Allocation::Tensor a;
  {
    // A CPU tensor targeted at a GPU: tensors land on their source's type.
    Error e = receiveTensor(entryOf(sent, kGpu), out, a);
    CHECK(e.isOfType<LogicError>());
    CHECK(e.what().find("type it left from") != std::string::npos);
  }
  {
    Descriptor::Tensor tpu = entryOf(sent);
    tpu.sourceDevice = Device{"tpu", 0};
    CHECK(receiveTensor(tpu, out, a).isOfType<LogicError>());
  }
  if (!noCudaDeviceAskedInChild()) return;  // the rest is for machines without one
  // Without a device (or without CUDA support): allocating fails saying why.
  CHECK_THROWS_AS(Tensor::empty({3}, DType::kFloat32, kGpu), std::runtime_error);
  CHECK_THROWS_AS(host.to(kGpu), std::runtime_error);
  CHECK(host.to(Device::cpu()).sharesStorageWith(host));
  Descriptor::Tensor fromGpu = entryOf(sent);
  fromGpu.sourceDevice = kGpu;
  Error e = receiveTensor(fromGpu, out, a);
  CHECK(e.isOfType<CudaError>());
  CHECK(!out.defined());
}

TEST_CASE("CUDA Tensors: made, copied, cloned, and through pipes as Tensors that land in CUDA memory") {
  if (noCudaDeviceAskedInChild()) return;
  Child child = Child::spawn([](Child& self) {
    Tensor host = counting({257, 3});
    Tensor gpu = host.to(kGpu);
    CHILD_CHECK(gpu.device() == kGpu);
    CHILD_CHECK(gpu.to(kGpu).sharesStorageWith(gpu));
    Tensor copy = gpu.clone();
    CHILD_CHECK(!copy.sharesStorageWith(gpu) && copy.device() == kGpu);
    CHILD_CHECK(countsUp(copy.to(Device::cpu())));
    CHILD_CHECK(Tensor::empty({0}, DType::kInt64, kGpu).nbytes() == 0);
    // In one process (cuda_xth over shm), and staged over tcp (cuda_basic).
    for (std::string transport : {"shm", "tcp"}) {
      auto a = transport == "shm" ? makeFullContext("a") : makeCudaBasicContext("a", "tcp");
      auto b = transport == "shm" ? makeFullContext("b") : makeCudaBasicContext("b", "tcp");
      auto listener = b->listen({transport == "tcp" ? "tcp://127.0.0.1:0" : "shm://"});
      auto client = a->connect(listener->url(transport));
      auto server = acceptSync(*listener);
      CHILD_CHECK(server != nullptr);
      auto promise = std::make_shared<std::promise<Error>>();
      std::vector<Tensor> received(2);
      std::string note;
      server->readDescriptor([&, promise](const Error& e, Descriptor d) {
        if (e) return promise->set_value(e);
        Allocation alloc;
        for (size_t i = 0; i < d.tensors.size(); ++i) {
          alloc.tensors.emplace_back();
          if (Error bad = receiveTensor(d.tensors[i], received[i], alloc.tensors.back(), i == 0 ? &note : nullptr)) {
            return promise->set_value(bad);
          }
        }
        server->read(alloc, [promise](const Error& e) { promise->set_value(e); });
      });
      // The read is asked first: cuda_xth's write completes when the reader has copied.
      Message m;
      m.tensors.push_back(pipeTensor(gpu, "weights"));
      m.tensors.push_back(pipeTensor(host));
      Error we = writeSync(*client, std::move(m), 30s);
      if (we) std::fprintf(stderr, "%s: write: %s\n", transport.c_str(), we.what().c_str());
      CHILD_CHECK(!we);
      Error re = promise->get_future().get();
      if (re) std::fprintf(stderr, "%s: %s\n", transport.c_str(), re.what().c_str());
      CHILD_CHECK(!re);
      CHILD_CHECK(received[0].device() == kGpu);
      CHILD_CHECK(received[0].shape() == (Shape{257, 3}));
      CHILD_CHECK(note == "weights");
      CHILD_CHECK(countsUp(received[0].to(Device::cpu())));
      CHILD_CHECK(received[1].device().isCpu() && countsUp(received[1]));
      CHILD_CHECK(server->info().channels["cuda"] == (transport == "shm" ? "cuda_xth" : "cuda_basic"));
      client->close();
      server->close();
      a->join();
      b->join();
    }
    self.send("done");
    return 0;
  });
  CHECK(child.receive(120s) == "done");
  CHECK(child.wait(30s) == 0);
}

TEST_CASE("remote actors: a CUDA Tensor to an actor on another node arrives as a CUDA Tensor, and so does its answer") {
  if (noCudaDeviceAskedInChild()) return;
  // A node listening on shm only (its pipes take cuda_ipc), then one on tcp
  // only (cuda_basic): each answers a CUDA tensor with a new CUDA tensor,
  // each element plus one.
  for (std::string listen : {"shm://", "tcp://127.0.0.1:0"}) {
    CAPTURE(listen);
    Child node = Child::spawn(
        [listen](Child& self) {
          caf::actor_system_config cfg;
          remote::configure(cfg);
          caf::actor_system system{cfg};
          remote::NodeOptions options;
          options.listen = {listen};
          remote::Node node(system, options);
          auto plusOne = system.spawn([]() -> caf::behavior {
            return {[](const Tensor& in) -> caf::result<Tensor> {
              if (in.device() != kGpu) return caf::make_error(caf::sec::unexpected_message);
              Tensor host = in.to(Device::cpu());
              float* v = host.data<float>();
              for (int64_t i = 0; i < host.numel(); ++i) v[i] += 1.0f;
              return host.to(kGpu);
            }};
          });
          node.publish(plusOne, "plus-one");
          self.send(node.url(listen.substr(0, 3)));
          ::pause();
          return 0;
        },
        120s);
    const std::string url = node.receive(60s);
    REQUIRE(!url.empty());
    Child client = Child::spawn([url](Child& self) {
      caf::actor_system_config cfg;
      remote::configure(cfg);
      caf::actor_system system{cfg};
      remote::Node node(system);
      auto plusOne = node.remoteActor(url, "plus-one");
      CHILD_CHECK(static_cast<bool>(plusOne));
      Tensor sent = counting({1000}).to(kGpu);
      caf::scoped_actor self_{system};
      std::string outcome = "no answer";
      self_->request(*plusOne, std::chrono::seconds(30), sent)
          .receive(
              [&](const Tensor& back) {
                outcome = back.device() != kGpu             ? "the answer is on " + back.device().toString()
                          : !countsUp(back.to(Device::cpu()), 1) ? std::string("wrong values")
                                                                 : std::string("ok");
              },
              [&](caf::error& e) { outcome = system.render(e); });
      if (outcome != "ok") std::fprintf(stderr, "%s: %s\n", url.c_str(), outcome.c_str());
      CHILD_CHECK(outcome == "ok");
      self.send("done");
      ::_exit(0);  // the node's actor system ends with the process
      return 0;
    });
    CHECK(client.receive(90s) == "done");
    CHECK(client.wait(30s) == 0);
    node.kill(SIGKILL);
    node.wait(10s);
  }
}
