// Tensors in CAF messages: the receiver sees the sender's storage.

#include "test_system.h"

#include <actorpipe/actors/dataflow/message_types.h>
#include <actorpipe/actors/tensor.h>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <doctest/doctest.h>

#include <cstdint>

using actorpipe::DType;
using actorpipe::Tensor;

namespace {

std::uint64_t addressOf(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

caf::behavior storageReporter() {
  return {[](const Tensor& t) { return addressOf(t.storage().get()); }};
}

caf::behavior echoTensor() {
  return {[](Tensor& t) { return std::move(t); }};
}

} // namespace

TEST_CASE("tensor messages: the receiver sees the sender's storage") {
  TestSystem system(2);
  auto reporter = system.get().spawn(storageReporter);
  caf::scoped_actor self{system.get()};

  auto moved = Tensor::zeros({1024}, DType::kFloat32);
  auto movedStorage = addressOf(moved.storage().get());
  std::uint64_t seen = 0;
  self->request(reporter, caf::infinite, std::move(moved))
    .receive([&](std::uint64_t addr) { seen = addr; }, [&](caf::error&) {});
  CHECK(seen == movedStorage);

  // Even sending an lvalue copies only the handle.
  auto kept = Tensor::zeros({1024}, DType::kFloat32);
  self->request(reporter, caf::infinite, kept)
    .receive([&](std::uint64_t addr) { seen = addr; }, [&](caf::error&) {});
  CHECK(seen == addressOf(kept.storage().get()));
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
}

TEST_CASE("tensor messages: a 64 MiB tensor makes a round trip by reference") {
  TestSystem system(2);
  auto echo = system.get().spawn(echoTensor);
  caf::scoped_actor self{system.get()};
  auto big = Tensor::empty({64 << 20}, DType::kUint8);
  big.data<std::uint8_t>()[12345] = 77;
  Tensor returned;
  self->request(echo, caf::infinite, big)
    .receive([&](Tensor& t) { returned = std::move(t); }, [&](caf::error&) {});
  REQUIRE(returned.defined());
  CHECK(returned.sharesStorageWith(big));
  CHECK(returned.rawData() == big.rawData());
  CHECK(returned.data<std::uint8_t>()[12345] == 77);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}
