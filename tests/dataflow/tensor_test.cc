#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/group/tree.h>
#include <actorpipe/actors/tensor.h>
#include <actorpipe/runtime/message.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <type_traits>

using actorpipe::Device;
using actorpipe::DType;
using actorpipe::Storage;
using actorpipe::Tensor;

TEST_CASE("tensor: dtype, shape, element access") {
  auto t = Tensor::zeros({2, 3}, DType::kFloat32);
  CHECK(t.defined());
  CHECK(t.dim() == 2);
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.device() == Device::cpu());
  t.data<float>()[4] = 2.5f;
  CHECK(t.data<float>()[4] == 2.5f);
  CHECK_THROWS_AS(t.data<double>(), std::invalid_argument);
  CHECK(!Tensor().defined());
}

TEST_CASE("tensor: copies share storage, clone is the only deep copy") {
  auto original = Tensor::full<std::int64_t>({1000}, 7);
  Tensor copy = original;
  CHECK(copy.sharesStorageWith(original));
  CHECK(copy.rawData() == original.rawData());
  auto reshaped = original.reshape({10, 100});
  CHECK(reshaped.sharesStorageWith(original));
  CHECK_THROWS(original.reshape({3, 3}));
  auto deep = original.clone();
  CHECK(!deep.sharesStorageWith(original));
  CHECK(deep.data<std::int64_t>()[999] == 7);
  original.data<std::int64_t>()[0] = 1;
  CHECK(copy.data<std::int64_t>()[0] == 1);
  CHECK(deep.data<std::int64_t>()[0] == 7);
}

TEST_CASE("tensor: adopted device storage is released by its own deleter") {
  // Stands in for cudaMalloc'ed memory: the library never touches the bytes.
  static char fakeDeviceMemory[256];
  int releases = 0;
  {
    // A device index no machine has: clone() below must fail on any.
    const Device fake = Device::cuda(4096);
    auto storage = Storage::adopt(fakeDeviceMemory, sizeof fakeDeviceMemory, fake, [&](void*) { ++releases; });
    auto t = Tensor::fromStorage(storage, {16, 4}, DType::kFloat32);
    CHECK(t.device() == fake);
    CHECK(t.rawData() == fakeDeviceMemory);
    CHECK_THROWS_AS(t.data<float>(), std::logic_error);
    // A deep copy needs memory on that device: none (no such device, or no
    // CUDA at all), said through the exception.
    CHECK_THROWS_AS(t.clone(), std::runtime_error);
    auto view = Tensor::fromStorage(storage, {8}, DType::kFloat32, 128);
    CHECK(view.rawData() == fakeDeviceMemory + 128);
    CHECK_THROWS_AS(Tensor::fromStorage(storage, {100}, DType::kFloat32),
                    std::out_of_range);
    CHECK(releases == 0);
  }
  CHECK(releases == 1);
}

TEST_CASE("tensor: moves through a channel without copying its data") {
  actorpipe::dataflow::Channel<Tensor> channel;
  auto t = Tensor::empty({1 << 20}, DType::kUint8);
  auto* bytes = t.rawData();
  auto storage = t.storage().get();
  CHECK(channel.write(std::move(t)) == actorpipe::dataflow::Status::kOpen);
  auto received = channel.read();
  REQUIRE(received.item);
  CHECK(received.item->rawData() == bytes);
  CHECK(received.item->storage().get() == storage);
}

// Before, actors/tensor.h defined a Device of its own: with runtime/message.h
// or group/tree.h in the same file (as here) it did not compile, and split
// over two files it broke the One Definition Rule inside the library.
TEST_CASE("tensor: one Device for tensors, pipes and groups") {
  static_assert(std::is_same_v<decltype(Tensor().device()), actorpipe::Device>);
  static_assert(std::is_same_v<decltype(actorpipe::Descriptor::Tensor().sourceDevice), actorpipe::Device>);
  auto t = Tensor::zeros({4}, DType::kInt32);
  CHECK(t.device().toString() == "cpu:0");
  CHECK(t.device() == actorpipe::Device{actorpipe::kCpuDeviceType, 0});
  CHECK(t.device().isCpu());
  CHECK(!Device::cuda(1).isCpu());
  actorpipe::group::TensorView g;
  CHECK(g.device == t.device());
}
