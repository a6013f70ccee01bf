// Node::runOnLoop: actors run on a node's loop thread for their peers'
// messages (detail/loop_unit.h). Loop threads are named "ap.<loop>", CAF's
// workers "caf.*": a handler tells where it ran by its thread's name.
#include <pthread.h>

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "remote_support.h"

#include <actorpipe/actors/remote/detail/loop_unit.h>

using namespace remote_test;
using actorpipe::remote::detail::LoopUnit;

namespace {

using where_atom = caf::atom_constant<caf::atom("where")>;
using nap_atom = caf::atom_constant<caf::atom("nap")>;
using ask_atom = caf::atom_constant<caf::atom("ask")>;

std::string threadName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

bool onLoop(const std::string& thread) { return thread.rfind("ap.", 0) == 0; }

// where -> the name of the thread running the handler; nap -> the same,
// after sleeping 60 ms.
caf::behavior whereAmI(caf::event_based_actor*) {
  return {
      [](where_atom) { return threadName(); },
      [](nap_atom) {
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        return threadName();
      },
  };
}

std::vector<std::string> askWhere(caf::actor_system& system, const caf::actor& to, int times,
                                  caf::atom_value what = where_atom::value) {
  caf::scoped_actor self{system};
  std::vector<std::string> threads;
  for (int i = 0; i < times; ++i) {
    self->request(to, 10s, what)
        .receive([&](const std::string& thread) { threads.push_back(thread); },
                 [&](caf::error& error) { threads.push_back("error: " + system.render(error)); });
  }
  return threads;
}

// Sums the ints it gets; notes any handler that began while another ran,
// and any sender's values out of order (each sends increasing values from
// its own base).
struct Tally {
  std::atomic<bool> running{false};
  std::atomic<int> overlaps{0};
  std::atomic<int> disorders{0};
  std::atomic<int64_t> count{0};
  std::map<int32_t, int32_t> last;  // base -> last value; touched by the handler only
};

caf::behavior tally(caf::event_based_actor*, std::shared_ptr<Tally> t) {
  return {
      [t](int32_t value) {
        if (t->running.exchange(true)) t->overlaps++;
        int32_t base = value / 1000000 * 1000000;
        auto it = t->last.find(base);
        if (it != t->last.end() && it->second >= value) t->disorders++;
        t->last[base] = value;
        t->count++;
        t->running = false;
      },
      [t](get_atom) { return t->count.load(); },
  };
}

} // namespace

TEST_CASE("an actor on the loop answers its peers there, and local actors on CAF's threads") {
  TestNode server;
  TestNode client;
  auto hosted = server.system().spawn(whereAmI);
  // A 2 s budget per resume, not the default 20 ms: a sanitized resume
  // preempted on 2 loaded CPUs would otherwise move the actor off the loop
  // (the budget has its own test below).
  server.node().runOnLoop(hosted, 2s);
  auto plain = server.system().spawn(whereAmI);
  // Started (CAF starts an actor on a worker: a message that comes before
  // that is handled there).
  askWhere(server.system(), hosted, 1);
  REQUIRE(!server.node().publish(hosted, "hosted"));
  REQUIRE(!server.node().publish(plain, "plain"));
  for (std::string transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    auto remoteHosted = client.node().remoteActor(server.node().url(transport), "hosted");
    auto remotePlain = client.node().remoteActor(server.node().url(transport), "plain");
    REQUIRE(remoteHosted);
    REQUIRE(remotePlain);
    for (const auto& thread : askWhere(client.system(), *remoteHosted, 100)) {
      CAPTURE(thread);
      REQUIRE(thread.rfind("error", 0) != 0);
      // Under ThreadSanitizer runOnLoop does nothing (loop_unit.h).
      CHECK(onLoop(thread) == LoopUnit::supported());
    }
    for (const auto& thread : askWhere(client.system(), *remotePlain, 100)) CHECK(!onLoop(thread));
  }
  // A local sender's messages run it on CAF's workers, as ever.
  for (const auto& thread : askWhere(server.system(), hosted, 50)) CHECK(!onLoop(thread));
  // When it ends it is forgotten.
  caf::actor_id aid = hosted.id();
  CHECK(LoopUnit::of(server.system()).hosted(aid) == LoopUnit::supported());
  caf::anon_send_exit(hosted, caf::exit_reason::user_shutdown);
  hosted = nullptr;
  for (int i = 0; i < 500 && LoopUnit::of(server.system()).hosted(aid); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(!LoopUnit::of(server.system()).hosted(aid));
  caf::anon_send_exit(plain, caf::exit_reason::user_shutdown);
}

TEST_CASE("an asking actor on the loop gets its responses there, each request after the last") {
  TestNode server;
  TestNode client;
  auto plain = server.system().spawn(whereAmI);
  REQUIRE(!server.node().publish(plain, "plain"));
  auto remote = client.node().remoteActor(server.node().url("shm"), "plain");
  REQUIRE(remote);
  auto done = std::make_shared<std::promise<std::vector<std::string>>>();
  // Lazy: it asks once it is hosted and told to.
  auto asker = client.system().spawn<caf::lazy_init>(
      [done, to = *remote](caf::event_based_actor* self) -> caf::behavior {
        auto seen = std::make_shared<std::vector<std::string>>();
        auto next = std::make_shared<std::function<void(int)>>();
        *next = [=](int left) {
          self->request(to, 10s, where_atom::value)
              .then(
                  [=](const std::string&) {
                    seen->push_back(threadName());
                    if (left > 1) {
                      (*next)(left - 1);
                    } else {
                      done->set_value(*seen);
                      *next = nullptr;
                      self->quit();
                    }
                  },
                  [=](caf::error&) {
                    done->set_value({});
                    *next = nullptr;
                    self->quit();
                  });
        };
        return {[=](ask_atom) { (*next)(200); }};
      });
  client.node().runOnLoop(asker, 2s);
  caf::anon_send(asker, ask_atom::value);
  auto future = done->get_future();
  REQUIRE(future.wait_for(20s) == std::future_status::ready);
  auto seen = future.get();
  REQUIRE(seen.size() == 200);
  for (const auto& thread : seen) CHECK(onLoop(thread) == LoopUnit::supported());
  caf::anon_send_exit(plain, caf::exit_reason::user_shutdown);
}

TEST_CASE("peers and local actors at once: one handler at a time, each sender's order kept") {
  TestNode server;
  TestNode client;
  auto t = std::make_shared<Tally>();
  auto actor = server.system().spawn(tally, t);
  server.node().runOnLoop(actor, 2s);
  REQUIRE(!server.node().publish(actor, "tally"));
  auto remote = client.node().remoteActor(server.node().url("shm"), "tally");
  REQUIRE(remote);
  constexpr int32_t kEach = 5000;
  // Two remote senders and two local ones, all at once.
  auto sendFrom = [&](caf::actor_system& system, const caf::actor& to, int32_t base) {
    return std::thread([&system, to, base] {
      caf::scoped_actor self{system};
      for (int32_t i = 0; i < kEach; ++i) self->send(to, base + i);
    });
  };
  std::vector<std::thread> senders;
  senders.push_back(sendFrom(client.system(), *remote, 1000000));
  senders.push_back(sendFrom(client.system(), *remote, 2000000));
  senders.push_back(sendFrom(server.system(), actor, 3000000));
  senders.push_back(sendFrom(server.system(), actor, 4000000));
  for (auto& s : senders) s.join();
  for (int i = 0; i < 1000 && t->count < 4 * kEach; ++i) std::this_thread::sleep_for(10ms);
  CHECK(t->count == 4 * kEach);
  CHECK(t->overlaps == 0);
  CHECK(t->disorders == 0);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

TEST_CASE("a handler past its budget: the actor leaves the loop, the link lives on") {
  if (!LoopUnit::supported()) {
    MESSAGE("runOnLoop does nothing under ThreadSanitizer: nothing to leave");
    return;
  }
  TestNode server;
  TestNode client;
  auto hosted = server.system().spawn(whereAmI);
  server.node().runOnLoop(hosted, 10ms);
  askWhere(server.system(), hosted, 1);  // started
  REQUIRE(!server.node().publish(hosted, "hosted"));
  auto remote = client.node().remoteActor(server.node().url("tcp"), "hosted");
  REQUIRE(remote);
  auto first = askWhere(client.system(), *remote, 1, nap_atom::value);
  REQUIRE(first.size() == 1);
  CHECK(onLoop(first[0]));  // it ran there, once, past its budget
  CHECK(!LoopUnit::of(server.system()).hosted(hosted.id()));
  for (const auto& thread : askWhere(client.system(), *remote, 20)) {
    REQUIRE(thread.rfind("error", 0) != 0);
    CHECK(!onLoop(thread));
  }
  CHECK(client.node().peers().size() == 1);
  caf::anon_send_exit(hosted, caf::exit_reason::user_shutdown);
}
