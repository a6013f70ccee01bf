// A workqueue as a Dag stage (Dag::stage(input, queue), Dag::serve) and the
// owner's calls that do not block (writeThen/readThen on a WorkQueue): items
// asked of the queue come out as answers, close and errors travel through
// it both ways, and a question the queue refuses is never left counted.
#include "test_system.h"

#include <actorpipe/actors/dataflow/dag.h>

#include <caf/event_based_actor.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

using namespace actorpipe::dataflow;
using namespace std::chrono_literals;

namespace {

long long drainSum(Channel<long long>& output, int& count) {
  long long sum = 0;
  for (auto read = output.read(); read.item; read = output.read()) {
    sum += *read.item;
    ++count;
  }
  return sum;
}

} // namespace

TEST_CASE("dag: a workqueue stage served by threads; closing the input ends it all") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  WorkQueue<int, long long> queue(3);
  auto answers = dag.stage(input, queue, 4);
  std::atomic<size_t> served{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i)
    workers.emplace_back([&] { served += queue.worker().serve([](int x) { return 3LL * x; }); });
  std::thread producer([&] {
    for (int i = 1; i <= 500; ++i)
      CHECK(input.write(i) == Status::kOpen);
    input.close();
  });
  int count = 0;
  long long sum = drainSum(answers, count);
  producer.join();
  for (auto& w : workers)
    w.join(); // they returned: the stage closed the queue once the input drained
  REQUIRE(dag.waitFor(30s));
  CHECK(count == 500);
  CHECK(sum == 3LL * 500 * 501 / 2);
  CHECK(served.load() == 500);
  CHECK(queue.unanswered() == 0);
}

TEST_CASE("dag: asking stage, worker actors and a sink, all actors") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(8);
  WorkQueue<int, long long> queue(2);
  auto answers = dag.stage(input, queue, 2);
  dag.serve(queue, [](int x) { return static_cast<long long>(x) * x; }, {3, 0});
  std::atomic<long long> sum{0};
  std::atomic<int> count{0};
  dag.sink(answers, [&](long long x) {
    sum += x;
    ++count;
  });
  CHECK(dag.running() == 2 + 3 + 1);
  for (int i = 1; i <= 300; ++i)
    input.write(i);
  input.close();
  REQUIRE(dag.waitFor(30s));
  CHECK(count.load() == 300);
  CHECK(sum.load() == 300LL * 301 * 601 / 6);
  CHECK(answers.status() == Status::kDrained);
}

TEST_CASE("dag: a worker's exception is the workqueue stage's error; everything closes") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  WorkQueue<int, long long> queue(2);
  auto answers = dag.stage(input, queue);
  dag.serve(queue, [](int x) -> long long {
    if (x == 7)
      throw std::invalid_argument("seven");
    return x;
  });
  Status status = Status::kOpen;
  for (int i = 0; i < 100000 && status == Status::kOpen; ++i)
    status = input.write(i);
  CHECK(status != Status::kOpen); // the input was closed upstream
  CHECK_THROWS_WITH_AS(dag.wait(), "seven", std::invalid_argument);
  int count = 0;
  drainSum(answers, count);
  CHECK(count == 7); // one worker, in order: 0..6 answered before 7 failed
  CHECK(queue.questions().status() != Status::kOpen);
}

TEST_CASE("dag: a worker that goes away with a job is the stage's error (WorkerLost)") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  WorkQueue<int, long long> queue;
  auto answers = dag.stage(input, queue);
  input.write(1);
  {
    auto worker = queue.worker();
    auto job = worker.read(); // held, never answered
    REQUIRE(job);
  }
  CHECK_THROWS_AS(dag.wait(), WorkerLost);
  CHECK(answers.status() == Status::kDrained);
  CHECK(input.write(2) != Status::kOpen);
}

TEST_CASE("dag: closing a workqueue stage's output closes the queue and the input") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  WorkQueue<int, long long> queue(2);
  auto answers = dag.stage(input, queue, 1);
  dag.serve(queue, [](int x) { return static_cast<long long>(x); }, {2, 0});
  input.write(0);
  CHECK(answers.read().item.has_value());
  answers.close();
  Status status = Status::kOpen;
  for (int i = 0; i < 100000 && status == Status::kOpen; ++i)
    status = input.write(i);
  CHECK(status != Status::kOpen);
  REQUIRE(dag.waitFor(30s)); // the workers read DRAINED and ended too
}

TEST_CASE("dag: the queue closed under a parked question: it is withdrawn, the answers end") {
  // Capacity 1 and no worker yet: the stage asks 1, then parks asking 2.
  // Closing the queue refuses 2; had it stayed counted as asked, the
  // answers would wait for it for ever and the stage would never end.
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  WorkQueue<int, long long> queue(1);
  auto answers = dag.stage(input, queue);
  input.write(1);
  input.write(2);
  input.write(3);
  // 1 in the queue, 2 numbered (counted) and then parked, 3 left.
  for (int i = 0; i < 2000 && queue.unanswered() < 2; ++i)
    std::this_thread::sleep_for(5ms);
  REQUIRE(queue.unanswered() == 2);
  std::this_thread::sleep_for(50ms); // from numbered to parked is a few instructions
  queue.close();
  auto worker = queue.worker();
  auto job = worker.read();
  REQUIRE(job);
  CHECK(job.item->question == 1);
  worker.answer(job.item->id, 10);
  CHECK(worker.read().status == Status::kDrained);
  REQUIRE(dag.waitFor(10s));
  auto first = answers.read();
  REQUIRE(first.item);
  CHECK(*first.item == 10);
  CHECK(answers.read().status == Status::kDrained);
  CHECK(queue.unanswered() == 0);
  CHECK(input.write(4) != Status::kOpen); // the stage closed its input
}

TEST_CASE("writeThen/readThen on a workqueue: an owner actor asks and reads without blocking") {
  TestSystem system(2);
  WorkQueue<int, int> queue(1); // bounded: every write after the first parks
  auto result = std::make_shared<std::promise<std::pair<int, Status>>>();
  // Held: a parked write holds its actor only weakly.
  auto owner = system.get().spawn([queue, result](caf::event_based_actor* self) mutable -> caf::behavior {
    auto ask = std::make_shared<std::function<void(int)>>();
    *ask = [self, queue, result, ask](int next) mutable {
      if (next > 50) {
        queue.close();
        auto sum = std::make_shared<int>(0);
        auto read = std::make_shared<std::function<void()>>();
        *read = [self, queue, result, sum, read] {
          readThen(self, queue, [self, result, sum, read](ReadResult<Answer<int>> answer) {
            if (!answer.item) {
              result->set_value({*sum, answer.status});
              *read = nullptr;
              self->quit();
              return;
            }
            *sum += answer.item->get();
            (*read)();
          });
        };
        (*read)();
        *ask = nullptr; // ends the cycle through the closure; nothing after it
        return;
      }
      writeThen(self, queue, next, [ask, next](Status status) {
        CHECK(status == Status::kOpen);
        (*ask)(next + 1);
      });
    };
    (*ask)(1);
    return {[](int) {}};
  });
  // Started after the spawn: the actor, built on this thread, is then
  // ordered before the worker's first post to it in a way TSan sees (the
  // real order runs through CAF's scheduler, which it cannot see).
  std::thread worker([queue] { queue.worker().serve([](int x) { return -x; }); });
  auto done = result->get_future();
  REQUIRE(done.wait_for(30s) == std::future_status::ready);
  auto [sum, status] = done.get();
  CHECK(sum == -(50 * 51 / 2));
  CHECK(status == Status::kDrained);
  worker.join();
  CHECK(queue.unanswered() == 0);
}

TEST_CASE("writeThen on a closed workqueue: refused, and not counted") {
  TestSystem system(1);
  WorkQueue<int, int> queue;
  queue.close();
  auto result = std::make_shared<std::promise<Status>>();
  auto owner = system.get().spawn([queue, result](caf::event_based_actor* self) -> caf::behavior {
    writeThen(self, queue, 5, [self, result](Status status) {
      result->set_value(status);
      self->quit();
    });
    return {[](int) {}};
  });
  auto done = result->get_future();
  REQUIRE(done.wait_for(10s) == std::future_status::ready);
  CHECK(done.get() != Status::kOpen);
  CHECK(queue.unanswered() == 0);
  CHECK(queue.read().status == Status::kDrained);
}

TEST_CASE("writeThen on a workqueue: a parked question whose actor ended is settled once") {
  // The actor parks question 2 on a full queue, then ends (no handle kept
  // here). When the queue next has room, the waiter is either dropped (its
  // actor gone: the question is withdrawn) or, if CAF still held the actor,
  // written (and then served like any other). Either way the answers end.
  TestSystem system(2);
  WorkQueue<int, int> queue(1);
  REQUIRE(queue.write(1) == Status::kOpen);
  auto parked = std::make_shared<std::promise<void>>();
  system.get().spawn([queue, parked](caf::event_based_actor* self) -> caf::behavior {
    writeThen(self, queue, 2, [](Status) { FAIL_CHECK("the write of an ended actor was answered"); });
    parked->set_value();
    self->quit();
    return {[](int) {}};
  });
  REQUIRE(parked->get_future().wait_for(10s) == std::future_status::ready);
  for (int i = 0; i < 2000 && queue.unanswered() < 2; ++i)
    std::this_thread::sleep_for(5ms);
  CHECK(queue.unanswered() == 2);
  std::this_thread::sleep_for(50ms); // the actor's end, as a rule, before the read
  auto worker = queue.worker();
  auto job = worker.read(); // room: the parked waiter is dropped or written
  REQUIRE(job);
  CHECK(job.item->question == 1);
  worker.answer(job.item->id, 10);
  queue.close();
  int served = 0;
  for (auto next = worker.read(); next; next = worker.read(), ++served)
    worker.answer(next.item->id, 20);
  MESSAGE(std::string(served == 0 ? "question 2 withdrawn (its actor was gone)" : "question 2 written, then served"));
  CHECK(served <= 1);
  int answers = 0;
  auto answer = queue.readFor(10s);
  for (; answer.item; answer = queue.readFor(10s))
    ++answers;
  CHECK(answer.status == Status::kDrained); // not EMPTY: nothing left counted
  CHECK(answers == 1 + served);
  CHECK(queue.unanswered() == 0);
}
