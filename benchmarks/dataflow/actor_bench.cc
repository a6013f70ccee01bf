// Tensor messages between two local actors, and moving big tensors.

#include "bench_common.h"

#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/dataflow/message_types.h>
#include <actorpipe/actors/tensor.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<actorpipe::Tensor>)

namespace bench {

namespace {

using actorpipe::DType;
using actorpipe::Tensor;
using actorpipe::dataflow::Channel;

using credit_atom = caf::atom_constant<caf::atom("credit")>;
using start_atom = caf::atom_constant<caf::atom("start")>;

// Acknowledge in chunks, and let the sender run ahead by a window, so the
// mailbox stays bounded without a round trip per message.
constexpr std::size_t kAckEvery = 1024;
constexpr std::size_t window = 16 * kAckEvery;

caf::behavior tensorSink(caf::event_based_actor* self, std::size_t expected,
                          Channel<double> finished) {
  auto received = std::make_shared<std::size_t>(0);
  auto spent = std::make_shared<std::vector<Tensor>>();
  // Tensors go back with the credit, so they circulate by move only: no
  // reference count is touched per message, let alone the payload.
  return {[=](Tensor& tensor) {
    spent->push_back(std::move(tensor));
    ++*received;
    if (spent->size() == kAckEvery) {
      self->send(caf::actor_cast<caf::actor>(self->current_sender()), credit_atom::value,
                 std::move(*spent));
      spent->clear();
    }
    if (*received == expected)
      finished.write(1.0);
  }};
}

caf::behavior tensorSource(caf::event_based_actor* self, caf::actor sink, std::size_t total,
                            std::vector<Tensor> pool) {
  auto sent = std::make_shared<std::size_t>(0);
  auto idle = std::make_shared<std::vector<Tensor>>(std::move(pool));
  auto pump = [=] {
    while (!idle->empty() && *sent < total) {
      self->send(sink, std::move(idle->back()));
      idle->pop_back();
      ++*sent;
    }
  };
  return {
    [=](start_atom) { pump(); },
    [=](credit_atom, std::vector<Tensor>& returned) {
      for (auto& tensor : returned)
        idle->push_back(std::move(tensor));
      pump();
    },
  };
}

double tensorMessageRun(caf::actor_system& system, std::size_t messages) {
  Channel<double> finished;
  // The window: as many tensors as may be in flight at once.
  std::vector<Tensor> pool;
  for (std::size_t i = 0; i < window; ++i)
    pool.push_back(Tensor::zeros({16}, DType::kFloat32));
  auto sink = system.spawn(tensorSink, messages, finished);
  auto source = system.spawn(tensorSource, sink, messages, std::move(pool));
  auto start = std::chrono::steady_clock::now();
  caf::anon_send(source, start_atom::value);
  finished.read();
  auto seconds = secondsSince(start);
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return seconds;
}

// Round trip of one tensor through an echo actor, in microseconds.
double roundTripUs(caf::actor_system& system, const Tensor& tensor, int trips) {
  auto echo = system.spawn([]() -> caf::behavior { return {[](Tensor& t) { return std::move(t); }}; });
  caf::scoped_actor self{system};
  std::vector<double> times;
  for (int i = 0; i < trips; ++i) {
    auto start = std::chrono::steady_clock::now();
    self->request(echo, caf::infinite, tensor)
      .receive([&](Tensor& back) {
                 if (!back.sharesStorageWith(tensor))
                   std::fprintf(stderr, "tensor was copied!\n");
               },
               [&](caf::error&) {});
    times.push_back(secondsSince(start) * 1e6);
  }
  self->send_exit(echo, caf::exit_reason::user_shutdown);
  return median(times);
}

double channelMoveUs(const Tensor& tensor, int trips) {
  Channel<Tensor> channel;
  std::vector<double> times;
  for (int i = 0; i < trips; ++i) {
    auto start = std::chrono::steady_clock::now();
    channel.write(tensor);
    auto back = channel.read();
    times.push_back(secondsSince(start) * 1e6);
  }
  return median(times);
}

} // namespace

void actorBenchmarks(const Settings& settings) {
  caf::actor_system_config config;
  // CAF 0.17 defaults to at least 4 scheduler threads; on a 2-core machine
  // that oversubscribes the CPUs, so use one thread per core.
  auto cores = std::max(1u, std::thread::hardware_concurrency());
  config.set("scheduler.max-threads", static_cast<int>(cores));
  caf::actor_system system{config};

  auto runs = repeat(settings.repetitions, [&] {
    return tensorMessageRun(system, settings.actorMessages);
  });
  auto rate = settings.actorMessages / median(runs) / 1e6;
  std::printf("tensor messages, actor to actor (%u scheduler threads): %.2f M/s "
              "(target >= 2.0) %s\n",
              cores, rate, rate >= 2.0 ? "OK" : "BELOW TARGET");

  auto small = Tensor::zeros({16}, DType::kFloat32);
  auto big = Tensor::zeros({64 << 20}, DType::kUint8);
  auto smallTrip = roundTripUs(system, small, 200);
  auto bigTrip = roundTripUs(system, big, 200);
  auto smallChannel = channelMoveUs(small, 200);
  auto bigChannel = channelMoveUs(big, 200);
  std::vector<double> copies;
  auto target = Tensor::empty({64 << 20}, DType::kUint8);
  for (int i = 0; i < 5; ++i) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(target.rawData(), big.rawData(), big.nbytes());
    copies.push_back(secondsSince(start) * 1e6);
  }
  std::printf("actor round trip: 64 B tensor %.1f us, 64 MiB tensor %.1f us "
              "(one memcpy of 64 MiB: %.0f us)\n",
              smallTrip, bigTrip, median(copies));
  std::printf("channel write+read: 64 B tensor %.2f us, 64 MiB tensor %.2f us\n",
              smallChannel, bigChannel);
}

} // namespace bench
