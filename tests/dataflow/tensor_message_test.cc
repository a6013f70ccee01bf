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

std::uint64_t address_of(const void* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

caf::behavior storage_reporter() {
  return {[](const Tensor& t) { return address_of(t.storage().get()); }};
}

caf::behavior echo_tensor() {
  return {[](Tensor& t) { return std::move(t); }};
}

} // namespace

TEST_CASE("tensor messages: the receiver sees the sender's storage") {
  TestSystem system(2);
  auto reporter = system.get().spawn(storage_reporter);
  caf::scoped_actor self{system.get()};

  auto moved = Tensor::zeros({1024}, DType::float32);
  auto moved_storage = address_of(moved.storage().get());
  std::uint64_t seen = 0;
  self->request(reporter, caf::infinite, std::move(moved))
    .receive([&](std::uint64_t addr) { seen = addr; }, [&](caf::error&) {});
  CHECK(seen == moved_storage);

  // Even sending an lvalue copies only the handle.
  auto kept = Tensor::zeros({1024}, DType::float32);
  self->request(reporter, caf::infinite, kept)
    .receive([&](std::uint64_t addr) { seen = addr; }, [&](caf::error&) {});
  CHECK(seen == address_of(kept.storage().get()));
  self->send_exit(reporter, caf::exit_reason::user_shutdown);
}

TEST_CASE("tensor messages: a 64 MiB tensor makes a round trip by reference") {
  TestSystem system(2);
  auto echo = system.get().spawn(echo_tensor);
  caf::scoped_actor self{system.get()};
  auto big = Tensor::empty({64 << 20}, DType::uint8);
  big.data<std::uint8_t>()[12345] = 77;
  Tensor returned;
  self->request(echo, caf::infinite, big)
    .receive([&](Tensor& t) { returned = std::move(t); }, [&](caf::error&) {});
  REQUIRE(returned.defined());
  CHECK(returned.shares_storage_with(big));
  CHECK(returned.raw_data() == big.raw_data());
  CHECK(returned.data<std::uint8_t>()[12345] == 77);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}
