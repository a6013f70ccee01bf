// A Tree's state lives on its Context's loop (actors/group/tree_core.h):
// the caller's thread hands it work and waits for what it asked, and no
// thread waits on a lock that the loop holds while it handles a network
// event. Two ranks formed in this process, one thread each, on pipes (the
// host arena turned off, so every collective runs on the loop, unless a
// test asks for it).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <actorpipe/actors/group/tree.h>
#include <actorpipe/runtime/error.h>

using namespace actorpipe::group;
using Clock = std::chrono::steady_clock;

namespace {

struct Pair {
  std::unique_ptr<Tree> ranks[2];
};

// Forms a group of two in this process (a file rendezvous of its own).
// rank1Options, where given, replace options at rank 1 (a test whose
// bound must fire at rank 0 only gives rank 1 one that never does).
// With `arena`, allReduce goes through the host arena on the callers'
// threads (as it does by default on one host) instead of the loops.
void formPair(TreeOptions options, Pair& pair, const TreeOptions* rank1Options = nullptr, bool arena = false) {
  static int formed = 0;
  const std::string file = "/tmp/actorpipe-group-actor-test-" + std::to_string(::getpid()) + "-" +
                           std::to_string(formed++);
  if (!arena) options.arenaSlotBytes = 0;
  options.rendezvousTimeout = std::chrono::seconds(20);
  TreeOptions other = rank1Options != nullptr ? *rank1Options : options;
  other.arenaSlotBytes = options.arenaSlotBytes;
  other.rendezvousTimeout = options.rendezvousTimeout;
  std::future<actorpipe::Error> joined[2];
  for (int rank = 0; rank < 2; ++rank) {
    TreeOptions mine = rank == 0 ? options : other;
    joined[rank] = std::async(std::launch::async, [&pair, mine, file, rank] {
      RankInfo info;
      info.rank = rank;
      info.worldSize = 2;
      info.localRank = rank;
      info.localSize = 2;
      info.host = "localhost";
      info.address = "127.0.0.1";
      info.rendezvous = "file://" + file;
      info.source = "actorpipe";
      info.jobId = "actor-test";
      return Tree::create(info, mine, pair.ranks[rank]);
    });
  }
  for (auto& result : joined) {
    const actorpipe::Error error = result.get();
    REQUIRE_MESSAGE(!error, error.what());
  }
}

// Runs `body(rank)` on one thread per rank and waits for both.
template <typename Body>
void onBothRanks(Body body) {
  std::thread other([&] { body(1); });
  body(0);
  other.join();
}

} // namespace

TEST_CASE("a reduction running on a rank's loop leaves other threads free to ask that rank") {
  Pair pair;
  formPair({}, pair);
  // The first time a rank's loop combines, another thread asks both ranks
  // for their links while the combine waits for its answer. With the state
  // under a lock that the loop held for the whole event, that thread would
  // wait for the combine, which waits for it: both give up after 5 s.
  std::mutex mutex;
  std::condition_variable answered;
  bool asking = false;
  bool answer = false;
  std::vector<std::string> seen;
  std::thread asker([&] {
    std::unique_lock<std::mutex> lock(mutex);
    answered.wait(lock, [&] { return asking; });
    lock.unlock();
    std::vector<std::string> links = pair.ranks[0]->links();
    const std::vector<std::string> more = pair.ranks[1]->links();
    links.insert(links.end(), more.begin(), more.end());
    lock.lock();
    seen = links;
    answer = true;
    answered.notify_all();
  });
  std::atomic<bool> first{true};
  std::atomic<bool> waitedInVain{false};
  const Reduction sum = Reduction::custom([&](const TensorView& accumulator, const TensorView& incoming) {
    if (first.exchange(false)) {
      std::unique_lock<std::mutex> lock(mutex);
      asking = true;
      answered.notify_all();
      if (!answered.wait_for(lock, std::chrono::seconds(5), [&] { return answer; })) {
        waitedInVain = true;
      }
    }
    auto* into = static_cast<float*>(accumulator.data);
    const auto* from = static_cast<const float*>(incoming.data);
    for (size_t i = 0; i < accumulator.count; ++i) into[i] += from[i];
  });
  std::vector<float> data[2] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  actorpipe::Error errors[2];
  onBothRanks([&](int rank) { errors[rank] = pair.ranks[rank]->allReduce({tensorOf(data[rank])}, sum); });
  asker.join();
  CHECK_MESSAGE(!errors[0], errors[0].what());
  CHECK_MESSAGE(!errors[1], errors[1].what());
  CHECK_FALSE(waitedInVain.load());
  CHECK(seen.size() >= 2);
  for (int rank = 0; rank < 2; ++rank) CHECK(data[rank] == std::vector<float>{11, 22, 33, 44});
}

TEST_CASE("close() from another thread ends a collective that waits for a rank, and the rank sees it left") {
  Pair pair;
  formPair({}, pair);
  std::vector<float> mine{1, 2};
  const auto start = Clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    pair.ranks[0]->close();
  });
  // Rank 1 has not called: rank 0 waits until it is closed.
  const actorpipe::Error error = pair.ranks[0]->allReduce({tensorOf(mine)}, Reduction::sum());
  const auto took = Clock::now() - start;
  closer.join();
  CHECK(error.isOfType<actorpipe::ContextClosedError>());
  CHECK(took < std::chrono::seconds(5));
  // Rank 0 said goodbye before its pipes closed: rank 1's next collective
  // fails naming it, at once.
  std::vector<float> theirs{1, 2};
  actorpipe::Error late;
  for (int i = 0; i < 200; ++i) {
    late = pair.ranks[1]->allReduce({tensorOf(theirs)}, Reduction::sum());
    if (late) break;
  }
  REQUIRE(late);
  CHECK(late.isOfType<RankFailedError>());
  CHECK_MESSAGE(late.what().find("rank 0") != std::string::npos, late.what());
}

TEST_CASE("a collective that waits past operationTimeout fails with a TimeoutError naming the rank") {
  TreeOptions options;
  options.operationTimeout = std::chrono::milliseconds(300);
  // Rank 1 must hear rank 0's verdict, not reach its own: its bound is
  // one no loaded (sanitizer) run waits out.
  TreeOptions patient;
  patient.operationTimeout = std::chrono::seconds(60);
  Pair pair;
  formPair(options, pair, &patient);
  std::vector<int32_t> mine{7};
  const auto start = Clock::now();
  // Rank 1 does not call.
  const actorpipe::Error error = pair.ranks[0]->allReduce({tensorOf(mine)}, Reduction::sum());
  const auto took = Clock::now() - start;
  REQUIRE(error);
  CHECK(error.isOfType<actorpipe::TimeoutError>());
  CHECK_MESSAGE(error.what().find("rank(s) 1") != std::string::npos, error.what());
  CHECK(took >= std::chrono::milliseconds(300));
  CHECK(took < std::chrono::seconds(5));
  // Rank 0 told rank 1, which fails its next call with the same error.
  std::vector<int32_t> theirs{7};
  actorpipe::Error told;
  for (int i = 0; i < 200 && !told; ++i) {
    told = pair.ranks[1]->allReduce({tensorOf(theirs)}, Reduction::sum());
  }
  REQUIRE(told);
  CHECK_MESSAGE(told.isOfType<actorpipe::TimeoutError>(), told.what());
  // Rank 0's own words (rank 1 timing out by itself would say "at rank 1").
  CHECK_MESSAGE(told.what().find("at rank 0") != std::string::npos, told.what());
}

// A custom reduction is the user's code, and may throw anything: a
// std::exception or not. Either way the collective fails at once on every
// rank, with a LogicError where it threw, saying what; before, anything but
// a std::exception escaped the reduction (into the pipe's read callback on
// the loop, or out of allReduce on the arena) and the ranks waited out
// operationTimeout.
TEST_CASE("a custom reduction that throws fails the collective on every rank, whatever it throws") {
  struct NotAnException {};
  for (bool arena : {false, true}) {
    for (size_t floats : {size_t{16}, size_t{1} << 18}) {  // the tree; the ring or pairwise
      for (int kind = 0; kind < 2; ++kind) {
        CAPTURE(arena);
        CAPTURE(floats);
        CAPTURE(kind);
        if (arena && floats > 16) continue;  // the arena has one path
        TreeOptions options;
        options.operationTimeout = std::chrono::seconds(60);  // far beyond what a failure takes
        Pair pair;
        formPair(options, pair, nullptr, arena);
        const Reduction throwing = Reduction::custom([kind](const TensorView&, const TensorView&) {
          if (kind == 0) throw std::runtime_error("thrown by a reduction, on purpose");
          throw NotAnException{};
        });
        std::vector<float> data[2] = {std::vector<float>(floats, 1.0f), std::vector<float>(floats, 2.0f)};
        actorpipe::Error errors[2];
        const auto start = Clock::now();
        onBothRanks([&](int rank) { errors[rank] = pair.ranks[rank]->allReduce({tensorOf(data[rank])}, throwing); });
        const auto took = Clock::now() - start;
        MESSAGE("failed after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
        int threwHere = 0;
        for (int rank = 0; rank < 2; ++rank) {
          CAPTURE(rank);
          REQUIRE(errors[rank]);
          CHECK_FALSE(errors[rank].isOfType<actorpipe::TimeoutError>());
          INFO(errors[rank].what());
          if (errors[rank].what().find(kind == 0 ? "thrown by a reduction, on purpose"
                                                 : "not a std::exception") != std::string::npos) {
            CHECK(errors[rank].isOfType<actorpipe::LogicError>());
            ++threwHere;
          }
        }
        CHECK(threwHere >= 1);
        CHECK(took < options.operationTimeout);
      }
    }
  }
}
