#include "test_system.h"

#include <actorpipe/actors/dataflow/dag.h>
#include <actorpipe/actors/tensor.h>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

using namespace actorpipe::dataflow;
using actorpipe::DType;
using actorpipe::Tensor;
using namespace std::chrono_literals;

TEST_CASE("dag: three stages, closing the input shuts everything down") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(8);
  std::atomic<long> sum{0};
  std::atomic<int> items{0};
  auto plus_one = dag.stage(input, [](int x) { return x + 1; }, {1, 8});
  auto doubled = dag.stage(plus_one, [](int x) { return 2L * x; }, {3, 4});
  dag.sink(doubled, [&](long x) {
    sum += x;
    ++items;
  });
  CHECK(dag.running() == 5);
  for (int i = 1; i <= 2000; ++i)
    input.write(i);
  input.close();
  REQUIRE(dag.waitFor(30s));
  CHECK(dag.running() == 0);
  CHECK(items.load() == 2000);
  CHECK(sum.load() == 2L * (2001L * 2002L / 2 - 1));
  CHECK(plus_one.status() == Status::kDrained);
  CHECK(doubled.status() == Status::kDrained);
}

TEST_CASE("dag: a thread reads the last stage until DRAINED") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input;
  auto output = dag.stage(input, [](int x) { return x * x; });
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i)
      input.write(i);
    input.close();
  });
  int expected = 0;
  for (auto read = output.read(); read.item; read = output.read()) {
    CHECK(*read.item == expected * expected);
    ++expected;
  }
  producer.join();
  CHECK(expected == 100);
  dag.wait();
}

TEST_CASE("dag: a stage error closes the pipeline and is rethrown by wait") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  auto output = dag.stage(input, [](int x) {
    if (x == 5)
      throw std::runtime_error("bad item");
    return x;
  });
  Status status = Status::kOpen;
  for (int i = 0; i < 100000 && status == Status::kOpen; ++i)
    status = input.write(i);
  CHECK(status != Status::kOpen);
  CHECK_THROWS_WITH(dag.wait(), "bad item");
  int passed = 0;
  for (auto read = output.read(); read.item; read = output.read())
    ++passed;
  CHECK(passed == 5);
}

TEST_CASE("dag: closing the output early stops the stages upstream") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<int> input(4);
  auto middle = dag.stage(input, [](int x) { return x; }, {1, 4});
  auto output = dag.stage(middle, [](int x) { return x; }, {1, 4});
  input.write(0);
  CHECK(*output.read().item == 0);
  output.close();
  Status status = Status::kOpen;
  for (int i = 0; i < 100000 && status == Status::kOpen; ++i)
    status = input.write(i);
  CHECK(status != Status::kOpen);
  REQUIRE(dag.waitFor(30s));
}

TEST_CASE("dag: merge joins several inputs and closes after all drain") {
  TestSystem system(2);
  Dag dag(system.get());
  std::vector<Channel<int>> inputs{Channel<int>(), Channel<int>(), Channel<int>()};
  auto merged = dag.merge(inputs, 4);
  std::atomic<int> total{0};
  dag.sink(merged, [&](int x) { total += x; });
  for (int i = 0; i < 3; ++i) {
    for (int k = 1; k <= 100; ++k)
      inputs[i].write(k);
    inputs[i].close();
  }
  REQUIRE(dag.waitFor(30s));
  CHECK(total.load() == 3 * 5050);
}

TEST_CASE("dag: tensors flow through stages by reference") {
  TestSystem system(2);
  Dag dag(system.get());
  Channel<Tensor> input(2);
  auto scaled = dag.stage(input, [](Tensor t) {
    auto* values = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      values[i] *= 2;
    return t;
  });
  std::vector<Tensor> sent;
  for (int i = 0; i < 10; ++i)
    sent.push_back(Tensor::full<float>({128}, float(i)));
  std::thread producer([&] {
    for (auto& t : sent)
      input.write(t);
    input.close();
  });
  int index = 0;
  bool shared = true;
  for (auto read = scaled.read(); read.item; read = scaled.read(), ++index) {
    shared = shared && read.item->sharesStorageWith(sent[index]);
    CHECK(read.item->data<float>()[0] == 2.0f * index);
  }
  producer.join();
  CHECK(index == 10);
  CHECK(shared);
  dag.wait();
}

TEST_CASE("dag: a stage on an already drained input ends at once") {
  TestSystem system(1);
  Dag dag(system.get());
  Channel<int> input;
  input.close();
  auto output = dag.stage(input, [](int x) { return x; }, {2, 0});
  REQUIRE(dag.waitFor(10s));
  CHECK(output.status() == Status::kDrained);
}

TEST_CASE("dag: an unfinished pipeline does not hold up shutdown") {
  Channel<int> input; // never closed, outlives everything
  {
    TestSystem system(2);
    Dag dag(system.get());
    auto output = dag.stage(input, [](int x) { return x; });
    dag.sink(output, [](int) {});
    input.write(1);
    // Time for both stages to park. A slower machine cannot fail this: the
    // check is that no stage ended, and shutdown must not hang either way.
    std::this_thread::sleep_for(10ms);
    CHECK(dag.running() == 2);
  } // the Dag, then the system, go away with both stages parked
  CHECK(input.status() == Status::kOpen);
}
