#include <actorpipe/actors/dataflow/workqueue.h>
#include <actorpipe/actors/tensor.h>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

using namespace actorpipe::dataflow;
using actorpipe::DType;
using actorpipe::Tensor;
using namespace std::chrono_literals;

namespace {

template <class Q, class A, class Fn>
std::vector<std::thread> startWorkers(WorkQueue<Q, A>& queue, int count, Fn fn) {
  std::vector<std::thread> workers;
  for (int i = 0; i < count; ++i)
    workers.emplace_back([worker = queue.worker(), fn]() mutable { worker.serve(fn); });
  return workers;
}

void joinAll(std::vector<std::thread>& threads) {
  for (auto& thread : threads)
    thread.join();
}

} // namespace

TEST_CASE("workqueue: echo of values") {
  WorkQueue<int, int> queue;
  auto workers = startWorkers(queue, 4, [](int question) { return question; });
  for (int i = 0; i < 200; ++i)
    CHECK(queue.write(i) == Status::kOpen);
  std::set<int> answers;
  for (int i = 0; i < 200; ++i) {
    auto answer = queue.read();
    REQUIRE(answer.item);
    answers.insert(answer.item->get());
  }
  CHECK(answers.size() == 200);
  CHECK(*answers.begin() == 0);
  CHECK(*answers.rbegin() == 199);
  queue.close();
  joinAll(workers);
  // Closed and fully answered: the owner's reads end instead of waiting.
  CHECK(queue.read().status == Status::kDrained);
}

TEST_CASE("workqueue: echo of tensors shares their storage") {
  WorkQueue<Tensor, Tensor> queue;
  auto workers = startWorkers(queue, 2, [](Tensor t) { return t; });
  std::map<std::uint64_t, Tensor> originals;
  std::vector<Tensor> sent;
  for (int i = 0; i < 20; ++i)
    sent.push_back(Tensor::full<float>({256, 256}, float(i)));
  for (auto& t : sent)
    queue.write(t);
  std::size_t shared = 0;
  for (int i = 0; i < 20; ++i) {
    auto answer = queue.read();
    REQUIRE(answer.item);
    auto& echoed = answer.item->get();
    auto value = int(echoed.data<float>()[0]);
    REQUIRE(value >= 0);
    REQUIRE(value < 20);
    if (echoed.sharesStorageWith(sent[value]) && echoed.rawData() == sent[value].rawData())
      ++shared;
  }
  CHECK(shared == 20);
  queue.close();
  joinAll(workers);
}

TEST_CASE("workqueue: drain waits for every answer") {
  WorkQueue<int, int> queue;
  std::atomic<int> handled{0};
  auto workers = startWorkers(queue, 3, [&](int question) {
    std::this_thread::sleep_for(1ms);
    ++handled;
    return question * 2;
  });
  for (int i = 0; i < 60; ++i)
    queue.write(i);
  queue.drain();
  CHECK(handled.load() == 60);
  CHECK(queue.unanswered() == 0);
  CHECK(queue.drainFor(1ms));
  queue.close();
  joinAll(workers);
  int answers = 0;
  for (auto answer = queue.read(); answer.item; answer = queue.read())
    ++answers;
  CHECK(answers == 60);
}

TEST_CASE("workqueue: a named queue is shared, and reopened fresh after close") {
  auto owner = WorkQueue<int, int>::named("dataflow-test-queue");
  auto same = WorkQueue<int, int>::named("dataflow-test-queue");
  CHECK(owner.sameQueue(same));
  CHECK_THROWS_AS((WorkQueue<int, double>::named("dataflow-test-queue")), std::invalid_argument);

  std::thread workerThread([] {
    auto queue = WorkQueue<int, int>::named("dataflow-test-queue");
    auto worker = queue.worker();
    worker.serve([](int question) { return question + 100; });
  });
  owner.write(1);
  CHECK(owner.read().item->get() == 101);
  owner.close();
  workerThread.join();
  CHECK(owner.write(2) == Status::kDrained);

  auto reopened = WorkQueue<int, int>::named("dataflow-test-queue");
  CHECK(!reopened.sameQueue(owner));
  CHECK(reopened.write(3) == Status::kOpen);
  auto worker = reopened.worker();
  auto job = worker.read();
  REQUIRE(job.item);
  CHECK(job.item->question == 3);
  worker.answer(4);
  CHECK(reopened.read().item->get() == 4);
  reopened.close();
}

TEST_CASE("workqueue: matched mode routes each answer to its question") {
  WorkQueue<int, int> queue;
  auto workers = startWorkers(queue, 3, [](int question) {
    if (question < 0)
      throw std::runtime_error("negative question");
    return question * question;
  });
  std::vector<std::future<int>> futures;
  for (int i = 0; i < 50; ++i)
    futures.push_back(queue.ask(i));
  auto failing = queue.ask(-1);
  queue.write(7); // unmatched: arrives through read()
  for (int i = 0; i < 50; ++i)
    CHECK(futures[i].get() == i * i);
  // Hold the worker's exception until the workers are joined, so its last
  // reference goes here, after the join: libstdc++ counts exception_ptr
  // references with atomics TSan cannot see, and it reports a free in the
  // worker racing with our read of what() otherwise.
  std::exception_ptr kept;
  try {
    failing.get();
    FAIL("the failing question did not throw");
  } catch (const std::runtime_error& e) {
    kept = std::current_exception();
    CHECK(std::string(e.what()) == "negative question");
  }
  CHECK(queue.read().item->get() == 49);
  queue.drain();
  queue.close();
  joinAll(workers);
  kept = nullptr;
  CHECK_THROWS(queue.ask(1).get());
}

TEST_CASE("workqueue: an error answer rethrows at the owner") {
  WorkQueue<int, int> queue;
  auto workers = startWorkers(queue, 1, [](int) -> int { throw std::runtime_error("boom"); });
  queue.write(1);
  auto answer = queue.read();
  REQUIRE(answer.item);
  CHECK(!answer.item->ok());
  CHECK_THROWS_WITH(answer.item->get(), "boom");
  queue.close();
  joinAll(workers);
}

TEST_CASE("workqueue: closing releases waiting workers") {
  WorkQueue<int, int> queue;
  std::atomic<int> released{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 5; ++i)
    workers.emplace_back([&, worker = queue.worker()]() mutable {
      worker.serve([](int q) { return q; });
      ++released;
    });
  // Time for the workers to wait. A slower machine cannot fail this: the
  // check is that nothing was released, and a worker that starts after
  // close() is released all the same.
  std::this_thread::sleep_for(30ms);
  CHECK(released.load() == 0);
  queue.close();
  joinAll(workers);
  CHECK(released.load() == 5);
}

TEST_CASE("workqueue: a crashed worker never leaves the owner waiting") {
  WorkQueue<int, int> queue;
  std::thread crashing([&queue] {
    try {
      auto worker = queue.worker();
      auto job = worker.read();
      CHECK(job.item.has_value());
      // Dies holding the job: the Worker is destroyed while unwinding.
      throw std::runtime_error("worker crashed");
    } catch (const std::runtime_error&) {
    }
  });
  queue.write(5);
  crashing.join();
  auto answer = queue.readFor(5s);
  REQUIRE(answer.item);
  CHECK_THROWS_AS(answer.item->get(), WorkerLost);
  CHECK(queue.drainFor(5s));
  queue.close();
}
