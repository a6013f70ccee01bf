// Workqueues across nodes (actors/remote/workqueue.h) and a workqueue
// worker as a dataflow stage (readThen on a Worker, actors/dataflow/
// actor_io.h): questions answered by workers on other nodes, a worker that
// goes away (destroyed, or its process killed) answers with WorkerLost,
// answers to jobs a worker does not hold are refused; an exported workqueue
// as a Dag stage whose workers are on other nodes.
#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "../support/harness.h"
#include "attacker.h"
#include "remote_support.h"

#include <actorpipe/actors/dataflow/actor_io.h>
#include <actorpipe/actors/dataflow/dag.h>
#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/actors/remote/workqueue.h>

using namespace remote_test;
using actorpipe::dataflow::Status;
using actorpipe::dataflow::WorkQueue;
using actorpipe::dataflow::Worker;
using actorpipe::dataflow::WorkerLost;
using actorpipe::remote::RemoteWorker;
using actorpipe::remote::RemoteWorkFailed;
using testing::Child;

namespace {

Tensor filled(int64_t n, float value) {
  auto t = Tensor::zeros({n}, DType::kFloat32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value;
  return t;
}

// A worker in a child process that reads one job of the workqueue "q" at
// the URL it is sent, says "holding <question>", and waits to be killed.
struct HoldingWorker {
  UrlPipe url;
  Child child = Child::spawn(
      [this](Child& self) {
        TestNode node;
        auto worker = RemoteWorker<int32_t, int32_t>::open(node.node(), url.receive(), "q");
        CHILD_CHECK(worker);
        auto job = worker->read();
        CHILD_CHECK(job);
        self.send("holding " + std::to_string(job.item->question));
        std::this_thread::sleep_for(60s);  // killed before it answers
        return 0;
      },
      std::chrono::seconds(60));

  HoldingWorker() { url.forked(); }
  void sendUrl(const std::string& ownerUrl) { REQUIRE(url.send(ownerUrl)); }
};


using park_atom = caf::atom_constant<caf::atom("park")>;

// The questions of the jobs one worker actor's reads were answered with.
struct WorkAnswers {
  std::mutex mutex;
  std::vector<int32_t> questions;
  std::vector<uint64_t> ids;  // their jobs' ids
  std::vector<caf::error> errors;  // anything but "one too many"
};

// A read of `owner` for `self`, then a try-read, which the owner answers
// after it (it takes one sender's messages in order): if the read was not
// refused as one too many by then, it waits there and `promise` gets
// true; if it was, it is asked again. (The queue holds no job meanwhile.)
void parkRead(caf::event_based_actor* self, caf::actor owner, std::shared_ptr<WorkAnswers> answers,
              caf::response_promise promise) {
  auto refused = std::make_shared<bool>(false);
  self->request(owner, caf::infinite, actorpipe::remote::work_read_atom::value)
      .then(
          [answers](uint8_t, uint64_t id, int32_t question) {
            std::lock_guard<std::mutex> guard(answers->mutex);
            answers->questions.push_back(question);
            answers->ids.push_back(id);
          },
          [answers, refused](caf::error& error) {
            std::lock_guard<std::mutex> guard(answers->mutex);
            if (actorpipe::remote::isError(error, RemoteError::kTooManyRequests)) *refused = true;
            else answers->errors.push_back(error);
          });
  self->request(owner, caf::infinite, actorpipe::remote::work_try_read_atom::value)
      .then(
          [=](uint8_t, uint64_t, int32_t) mutable {
            if (!*refused) promise.deliver(true);
            else parkRead(self, owner, answers, promise);
          },
          [promise](caf::error&) mutable { promise.deliver(false); });
}

caf::behavior readParker(caf::event_based_actor* self, caf::actor owner,
                         std::shared_ptr<WorkAnswers> answers) {
  return {[=](park_atom) {
    auto promise = self->make_response_promise();
    parkRead(self, owner, answers, promise);
    return promise;
  }};
}

// An owner node that exports `queue` as "q", and a node with its owner's
// handle (over shm).
struct ServedQueue {
  explicit ServedQueue(size_t capacity) : queue(capacity) {
    REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
    auto opened = actorpipe::remote::openWorkQueue<int32_t, int32_t>(node.node(), owner.node().url("shm"), "q");
    REQUIRE(opened);
    handle = *opened;
  }
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  actorpipe::remote::WorkQueueActor<int32_t, int32_t> handle;
};

bool parked(TestNode& node, const caf::actor& parker) {
  caf::scoped_actor self{node.system()};
  bool yes = false;
  self->request(parker, 20s, park_atom::value).receive([&](bool b) { yes = b; }, [](caf::error&) {});
  return yes;
}

}  // namespace

TEST_CASE("workers on two other nodes answer an owner's questions; close releases them") {
  TestNode owner, first, second;
  WorkQueue<Tensor, double> queue(8);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "sums"));
  std::atomic<size_t> handled{0};
  auto serveOn = [&](TestNode& node) {
    return std::thread([&] {
      auto worker = RemoteWorker<Tensor, double>::open(node.node(), owner.node().url("tcp"), "sums");
      REQUIRE(worker);
      handled += worker->serve([](Tensor t) { return sumOf(t); });
      CHECK(!worker->error());
    });
  };
  std::thread a = serveOn(first), b = serveOn(second);
  std::vector<std::future<double>> answers;
  constexpr int kQuestions = 200;
  for (int i = 0; i < kQuestions; ++i) answers.push_back(queue.ask(filled(64, float(i))));
  for (int i = 0; i < kQuestions; ++i) CHECK(answers[size_t(i)].get() == 64.0 * i);
  queue.close();  // the workers read DRAINED and return
  a.join();
  b.join();
  CHECK(handled == size_t(kQuestions));
}

// A workqueue's owner serves every node: a peer's actor that links to it
// and fails must not end it (CAF's default exit handler would).
TEST_CASE("a peer's actor linked to a workqueue's owner fails: the queue serves on") {
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  auto handle = actorpipe::remote::openWorkQueue<int32_t, int32_t>(node.node(), owner.node().url("shm"), "q");
  REQUIRE(handle);
  linkThenFail(node, *handle);
  CHECK(outlives(node, *handle, 1000ms));
  std::thread serving([&] {
    auto worker = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("shm"), "q");
    CHECK(worker);
    if (worker) worker->serve([](int32_t x) { return x + 1; });
  });
  auto answer = queue.ask(41);
  const bool answered = answer.wait_for(10s) == std::future_status::ready;
  CHECK(answered);
  if (answered) CHECK(answer.get() == 42);
  queue.close();
  serving.join();
}

TEST_CASE("a remote worker's failure reaches the owner as RemoteWorkFailed") {
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "picky"));
  std::thread serving([&] {
    auto worker = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("shm"), "picky");
    REQUIRE(worker);
    worker->serve([](int32_t x) -> int32_t {
      if (x < 0) throw std::invalid_argument("negative: " + std::to_string(x));
      return 2 * x;
    });
  });
  auto good = queue.ask(21);
  auto bad = queue.ask(-1);
  CHECK(good.get() == 42);
  try {
    bad.get();
    FAIL("no exception");
  } catch (const RemoteWorkFailed& e) {
    CHECK(std::string(e.what()) == "negative: -1");
  }
  queue.close();
  serving.join();
}

TEST_CASE("answers are taken only for jobs the answering worker holds") {
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  auto holder = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("tcp"), "q");
  auto other = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("tcp"), "q");
  REQUIRE(holder);
  REQUIRE(other);
  CHECK(holder->tryRead().status == Status::kEmpty);
  auto answer = queue.ask(5);
  auto job = holder->read();
  REQUIRE(job);
  CHECK(job.item->question == 5);
  CHECK(!other->answer(job.item->id, 666));        // not its job
  CHECK(!other->answer(job.item->id + 1000, 666)); // nobody's job
  CHECK(!holder->fail(job.item->id + 1, "made up"));
  CHECK(holder->answer(job.item->id, 50));
  CHECK(!holder->answer(job.item->id, 51));        // answered already
  CHECK(answer.get() == 50);
  CHECK(queue.unanswered() == 0);
}

TEST_CASE("an owner answering a status that is no Status: the worker is done, with the reason") {
  TestNode owner, node;
  using namespace actorpipe::remote;
  auto liar = owner.system().spawn([]() -> WorkQueueActor<int32_t, int32_t>::behavior_type {
    return {
        [](work_read_atom) { return std::make_tuple(uint8_t(200), uint64_t(1), int32_t(7)); },
        [](work_try_read_atom) { return std::make_tuple(uint8_t(4), uint64_t(1), int32_t(7)); },
        [](work_answer_atom, uint64_t, int32_t) { return true; },
        [](work_fail_atom, uint64_t, std::string) { return true; },
    };
  });
  REQUIRE(!owner.node().publish(liar, "workqueue:liar"));
  auto worker = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("tcp"), "liar");
  REQUIRE(worker);
  auto job = worker->read();
  CHECK(!job);
  CHECK(job.status == Status::kDrained);
  CHECK(node.system().render(worker->error()).find("status 200") != std::string::npos);
  // Gone for good: nothing more is asked or answered.
  CHECK(worker->tryRead().status == Status::kDrained);
  CHECK(!worker->answer(1, 2));
}

TEST_CASE("a remote worker destroyed with a job unanswered: the owner gets WorkerLost") {
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  auto answer = queue.ask(1);
  {
    auto worker = RemoteWorker<int32_t, int32_t>::open(node.node(), owner.node().url("tcp"), "q");
    REQUIRE(worker);
    REQUIRE(worker->read());
  }
  REQUIRE(answer.wait_for(10s) == std::future_status::ready);
  CHECK_THROWS_AS(answer.get(), WorkerLost);
}

TEST_CASE("a worker's process killed while holding a job: WorkerLost, the rest served elsewhere") {
  HoldingWorker holder;
  Child& child = holder.child;
  TestNode owner;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  holder.sendUrl(owner.node().url("tcp"));
  auto first = queue.ask(1);
  REQUIRE(child.receive() == "holding 1");
  auto second = queue.ask(2);  // stays queued: the child reads no more
  auto killed = std::chrono::steady_clock::now();
  child.kill(SIGKILL);
  REQUIRE(first.wait_for(10s) == std::future_status::ready);
  auto noticed = std::chrono::steady_clock::now() - killed;
  CHECK_THROWS_AS(first.get(), WorkerLost);
  MESSAGE("the killed worker's job answered with WorkerLost after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(noticed).count() << " ms");
  auto worker = queue.worker();  // a local worker takes what is left
  auto job = worker.read();
  REQUIRE(job);
  CHECK(job.item->question == 2);
  worker.answer(job.item->id, 20);
  CHECK(second.get() == 20);
  child.wait();
}

TEST_CASE("a Dag stage whose workers are on two other nodes: closing its input ends them all") {
  TestNode owner, first, second;
  WorkQueue<Tensor, double> queue(4);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "sums"));
  actorpipe::dataflow::Dag dag(owner.system());
  actorpipe::dataflow::Channel<Tensor> input(8);
  auto sums = dag.stage(input, queue, 8);
  // An actor on one node (serveFrom), a thread on the other (RemoteWorker).
  auto handle = actorpipe::remote::openWorkQueue<Tensor, double>(first.node(),
                                                                 owner.node().url("shm"), "sums");
  REQUIRE(handle);
  auto served = std::make_shared<std::promise<std::pair<caf::error, int>>>();
  auto server = first.system().spawn([=, to = *handle](caf::stateful_actor<int>* self) -> caf::behavior {
    actorpipe::remote::serveFrom<Tensor, double>(
        self, to,
        [self](Tensor t) {
          ++self->state;
          return sumOf(t);
        },
        [self, served](caf::error error) {
          served->set_value({std::move(error), self->state});
          self->quit();
        });
    return {[](int32_t) {}};
  });
  std::atomic<size_t> byThread{0};
  std::thread worker([&] {
    auto remote = RemoteWorker<Tensor, double>::open(second.node(), owner.node().url("tcp"), "sums");
    REQUIRE(remote);
    byThread += remote->serve([](Tensor t) { return sumOf(t); });
    CHECK(!remote->error());
  });
  constexpr int kItems = 200;
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) CHECK(input.write(filled(32, float(i))) == Status::kOpen);
    input.close();  // the only shutdown: it travels to both nodes' workers
  });
  double total = 0;
  int count = 0;
  for (auto read = sums.read(); read.item; read = sums.read()) {
    total += *read.item;
    ++count;
  }
  producer.join();
  worker.join();
  REQUIRE(dag.waitFor(30s));
  auto done = served->get_future();
  REQUIRE(done.wait_for(10s) == std::future_status::ready);
  auto [error, byActor] = done.get();
  CHECK(!error);
  CHECK(count == kItems);
  CHECK(total == 32.0 * kItems * (kItems - 1) / 2);
  CHECK(size_t(byActor) + byThread.load() == size_t(kItems));
  MESSAGE("served by the actor on one node: " << byActor << ", by the thread on the other: "
                                              << byThread.load());
}

TEST_CASE("a Dag stage whose worker's process is killed holding a job: wait() throws WorkerLost") {
  HoldingWorker holder;
  Child& child = holder.child;
  TestNode owner;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  actorpipe::dataflow::Dag dag(owner.system());
  actorpipe::dataflow::Channel<int32_t> input(4);
  auto answers = dag.stage(input, queue);
  holder.sendUrl(owner.node().url("tcp"));
  REQUIRE(input.write(7) == Status::kOpen);
  REQUIRE(child.receive() == "holding 7");
  child.kill(SIGKILL);
  // The lost job ends the stage and is its error (a timeout returns false
  // instead of throwing).
  CHECK_THROWS_AS(dag.waitFor(10s), WorkerLost);
  CHECK(answers.read().status == Status::kDrained);
  CHECK(input.write(8) != Status::kOpen);  // closed upstream
  child.wait();
}

TEST_CASE("a workqueue worker as a dataflow stage: an actor reads jobs without blocking") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system system{cfg};
  WorkQueue<int32_t, int32_t> queue(4);
  auto done = std::make_shared<std::promise<size_t>>();
  struct State {
    std::unique_ptr<Worker<int32_t, int32_t>> worker;
    size_t handled = 0;
  };
  auto stage = system.spawn([queue, done](caf::stateful_actor<State>* self) -> caf::behavior {
    self->state.worker = std::make_unique<Worker<int32_t, int32_t>>(queue.worker());
    auto next = std::make_shared<std::function<void()>>();
    *next = [self, done, next] {
      actorpipe::dataflow::readThen(self, *self->state.worker, [self, done, next](auto job) {
        if (!job.item) {
          done->set_value(self->state.handled);
          *next = nullptr;  // the cycle through the closure ends here
          self->quit();
          return;
        }
        ++self->state.handled;
        self->state.worker->answer(job.item->id, job.item->question * 3);
        (*next)();
      });
    };
    (*next)();
    return {[](int32_t) {}};
  });
  std::vector<std::future<int32_t>> answers;
  for (int32_t i = 0; i < 100; ++i) answers.push_back(queue.ask(i));
  for (int32_t i = 0; i < 100; ++i) CHECK(answers[size_t(i)].get() == 3 * i);
  queue.close();
  auto handled = done->get_future();
  REQUIRE(handled.wait_for(10s) == std::future_status::ready);
  CHECK(handled.get() == 100);
}

TEST_CASE("an actor on another node serves a remote workqueue without blocking (serveFrom)") {
  ServedQueue setup(4);
  auto& queue = setup.queue;
  TestNode& node = setup.node;
  auto done = std::make_shared<std::promise<std::pair<caf::error, int>>>();
  auto pings = std::make_shared<std::atomic<int>>(0);
  auto server = node.system().spawn([=, to = setup.handle](caf::stateful_actor<int>* self) -> caf::behavior {
    actorpipe::remote::serveFrom<int32_t, int32_t>(
        self, to,
        [self](int32_t q) -> int32_t {
          if (q == 13) throw std::invalid_argument("unlucky");
          ++self->state;
          return 3 * q;
        },
        [self, done](caf::error error) {
          done->set_value({std::move(error), self->state});
          self->quit();
        });
    // It goes on handling its own messages while it serves.
    return {[pings](int32_t) { ++*pings; }};
  });
  for (int i = 0; i < 10; ++i) caf::anon_send(server, int32_t(i));
  std::vector<std::future<int32_t>> answers;
  for (int32_t i = 0; i < 100; ++i) answers.push_back(queue.ask(i));
  for (int32_t i = 0; i < 100; ++i) {
    if (i == 13) {
      CHECK_THROWS_AS(answers[size_t(i)].get(), RemoteWorkFailed);
    } else {
      CHECK(answers[size_t(i)].get() == 3 * i);
    }
  }
  queue.close();
  auto result = done->get_future();
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  auto [error, served] = result.get();
  CHECK(!error);
  CHECK(served == 99);
  CHECK(*pings == 10);
}

TEST_CASE("an actor that serves again and again keeps nothing of the servings that ended") {
  // Each serveFrom attaches its end to the actor; a serving that ends
  // first detaches it (before, each stayed until the actor ended).
  using actorpipe::remote::detail::ServingEnd;
  ServedQueue setup(4);
  setup.queue.close();  // each serving ends at once: drained
  size_t before = ServingEnd::live().load();
  constexpr int kServings = 200;
  auto done = std::make_shared<std::promise<size_t>>();
  auto server = setup.node.system().spawn([=, to = setup.handle](caf::event_based_actor* self) -> caf::behavior {
    auto ended = std::make_shared<int>(0);
    auto serve = std::make_shared<std::function<void()>>();
    *serve = [=] {
      actorpipe::remote::serveFrom<int32_t, int32_t>(
          self, to, [](int32_t q) { return q; },
          [=](caf::error error) {
            CHECK(!error);
            if (++*ended < kServings) return (*serve)();
            done->set_value(ServingEnd::live().load());
            *serve = nullptr;
          });
    };
    (*serve)();
    return {[](int32_t) {}};
  });
  auto result = done->get_future();
  REQUIRE(result.wait_for(20s) == std::future_status::ready);
  // Each serving's end was detached before its done ran.
  CHECK(result.get() == before);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("serveFrom: the owner's node gone ends the serving with the reason") {
  TestNode node;
  auto owner = std::make_unique<TestNode>();
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner->node(), queue, "q"));
  auto handle = actorpipe::remote::openWorkQueue<int32_t, int32_t>(node.node(),
                                                                   owner->node().url("tcp"), "q");
  REQUIRE(handle);
  auto done = std::make_shared<std::promise<caf::error>>();
  node.system().spawn([=, to = *handle](caf::event_based_actor* self) -> caf::behavior {
    actorpipe::remote::serveFrom<int32_t, int32_t>(self, to, [](int32_t q) { return q; },
                                 [self, done](caf::error error) {
                                   done->set_value(std::move(error));
                                   self->quit();
                                 });
    return {[](int32_t) {}};
  });
  std::this_thread::sleep_for(100ms);  // its read is parked at the owner
  owner->leave();
  auto ended = done->get_future();
  REQUIRE(ended.wait_for(10s) == std::future_status::ready);
  // The node's reason: it left (it closes only once its BYE is read here).
  auto error = ended.get();
  CAPTURE(node.system().render(error));
  CHECK(actorpipe::remote::isError(error, RemoteError::kNodeLeft));
}

TEST_CASE("a peer that makes up workers gets at most kMaxWorkersPerNode of them at an owner") {
  using namespace actorpipe::remote::detail;
  using actorpipe::remote::detail::kMaxWorkersPerNode;
  TestNode owner;
  WorkQueue<int32_t, int32_t> queue(64);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "jobs"));
  caf::actor_system_config cfg;
  actorpipe::remote::configure(cfg);
  caf::actor_system system{cfg};
  auto context = testing::makeContext("attacker");
  auto pipe = context->connect(owner.node().url("tcp"));
  uint64_t target = attackerHello(*pipe, workQueueName("jobs"));
  // First an answer from a sender that never read (it must not make a
  // worker: one that did would leave room for one reader fewer), then a
  // try-read from each of kMaxWorkersPerNode + 8 other made-up senders.
  EncodedMessage read, answer;
  REQUIRE(!encodeMessage(system, caf::make_message(actorpipe::remote::work_try_read_atom::value), read));
  REQUIRE(!encodeMessage(system, caf::make_message(actorpipe::remote::work_answer_atom::value,
                                                   uint64_t(1), int32_t(2)),
                         answer));
  const size_t senders = kMaxWorkersPerNode + 8;
  for (size_t first = 1; first <= senders + 1; first += 256) {
    std::vector<Frame> frames;
    std::vector<const EncodedMessage*> bodies;
    for (size_t source = first; source < first + 256 && source <= senders + 1; ++source) {
      Frame f;
      f.kind = Frame::Kind::kMessage;
      f.source = source;
      f.aid = target;
      f.messageId = caf::make_message_id(uint64_t{1}).integer_value();
      frames.push_back(f);
      bodies.push_back(source == 1 ? &answer : &read);
    }
    actorpipe::Message m = frameMessage(frames);
    for (auto* body : bodies) m.payloads.push_back({const_cast<char*>(body->bytes.data()), body->bytes.size(), ""});
    REQUIRE(!testing::writeSync(*pipe, std::move(m), 10s));
  }
  // Every request is answered: a job status for the first
  // kMaxWorkersPerNode senders, an error for the rest, false for the answer.
  size_t jobs = 0, refused = 0, falses = 0, inlined = 0;
  while (jobs + refused + falses < senders + 1) {
    auto got = testing::readSync(*pipe, 10s);
    REQUIRE(!got.error);
    std::vector<BatchEntry> entries;
    REQUIRE(!decodeBatch(got.descriptor.metadata, entries));
    size_t payloads = 0, messages = 0;
    for (auto& entry : entries) {
      // Small answers come INLINE (their bytes in the frame), others as a
      // MESSAGE and its payload.
      std::string bytes;
      if (entry.frame.kind == Frame::Kind::kInline) {
        bytes = entry.frame.body;
        ++inlined;
      } else if (entry.frame.kind == Frame::Kind::kMessage) {
        const auto& payload = got.storage.payloads.at(payloads++);
        bytes.assign(reinterpret_cast<const char*>(payload.data()), payload.size());
      } else {
        continue;
      }
      ++messages;
      caf::message content;
      REQUIRE(!decodeMessage(system, bytes.data(), bytes.size(), {}, content));
      if (content.match_elements<caf::error>()) ++refused;
      else if (content.match_elements<bool>()) falses += content.get_as<bool>(0) ? 0 : 1;
      else ++jobs;
    }
    // The owner's answers count against its window to this peer: credit them.
    Frame credit;
    credit.kind = Frame::Kind::kCredit;
    credit.messages = messages;
    credit.bytes = uint64_t{1} << 30;
    REQUIRE(!testing::writeSync(*pipe, frameMessage({credit}), 10s));
  }
  CHECK(jobs == kMaxWorkersPerNode);
  CHECK(refused == 8);
  CHECK(falses == 1);
  CHECK(inlined > 0);  // an actor's small answers ride in their frames
  pipe->close();
  context->join();
}

TEST_CASE("a node's reads waiting at a workqueue's owner are bounded (maxParkedPerPeer); a gone worker's are let go") {
  auto options = TestNode::quick();
  options.maxParkedPerPeer = 4;
  TestNode owner(options), client;
  WorkQueue<int32_t, int32_t> queue(64);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "jobs"));
  auto opened = actorpipe::remote::openWorkQueue<int32_t, int32_t>(client.node(), owner.node().url("shm"), "jobs");
  REQUIRE(opened);
  auto target = caf::actor_cast<caf::actor>(*opened);
  auto gone = std::make_shared<WorkAnswers>();
  auto after = std::make_shared<WorkAnswers>();
  auto first = client.system().spawn(readParker, target, gone);
  for (int i = 0; i < 4; ++i) REQUIRE(parked(client, first));
  // A fifth read of the node's, from another of its actors: refused at
  // once (without the bound, a timeout after 5 s).
  {
    caf::scoped_actor self{client.system()};
    bool tooMany = false;
    self->request(target, 5s, actorpipe::remote::work_read_atom::value)
        .receive([](uint8_t, uint64_t, int32_t) {},
                 [&](caf::error& error) { tooMany = actorpipe::remote::isError(error, RemoteError::kTooManyRequests); });
    CHECK(tooMany);
  }
  // The first worker ends: its reads are let go, and another of the node's
  // actors parks as many (refused for ever if they were held until a job
  // walked past them).
  caf::scoped_actor self{client.system()};
  self->monitor(first);
  self->send_exit(first, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  auto second = client.system().spawn(readParker, target, after);
  for (int i = 0; i < 4; ++i) REQUIRE(parked(client, second));
  for (int32_t q = 1; q <= 4; ++q) REQUIRE(queue.write(q) == Status::kOpen);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  auto count = [&] {
    std::lock_guard<std::mutex> guard(after->mutex);
    return after->questions.size();
  };
  while (count() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  std::lock_guard<std::mutex> guard(after->mutex);
  CHECK(after->questions == std::vector<int32_t>{1, 2, 3, 4});
  CHECK(gone->questions.empty());
  CHECK(gone->errors.empty());
  CHECK(after->errors.empty());
  self->send_exit(second, caf::exit_reason::user_shutdown);
}

TEST_CASE("serveFrom refused as one too many asks again in a while; it serves once there is room") {
  auto options = TestNode::quick();
  options.maxParkedPerPeer = 1;
  TestNode owner(options), client;
  WorkQueue<int32_t, int32_t> queue(4);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "jobs"));
  auto opened = actorpipe::remote::openWorkQueue<int32_t, int32_t>(client.node(), owner.node().url("shm"), "jobs");
  REQUIRE(opened);
  // Another worker of the node holds its share: serveFrom's reads are
  // refused until that one goes. (Before, the first refusal was its done.)
  auto holder = client.system().spawn(readParker, caf::actor_cast<caf::actor>(*opened),
                                      std::make_shared<WorkAnswers>());
  REQUIRE(parked(client, holder));
  auto done = std::make_shared<std::promise<caf::error>>();
  auto doneFuture = done->get_future();
  auto server = client.system().spawn([done, to = *opened](caf::event_based_actor* self) -> caf::behavior {
    actorpipe::remote::serveFrom<int32_t, int32_t>(
        self, to, [](int32_t q) { return 2 * q; },
        [self, done](caf::error error) {
          done->set_value(std::move(error));
          self->quit();
        });
    return {[](int32_t) {}};
  });
  // Refused at least once by now (it asks within a millisecond; a slower
  // start only means it is refused later, or not at all, with the same
  // outcome).
  std::this_thread::sleep_for(100ms);
  CHECK(doneFuture.wait_for(0s) == std::future_status::timeout);
  caf::scoped_actor self{client.system()};
  self->monitor(holder);
  self->send_exit(holder, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  // A job asked before the owner has handled the holder's DOWN can still
  // go to the holder's parked read and fail as WorkerLost (the holder's
  // one read: at most once); the next is serveFrom's.
  int32_t answered = 0;
  for (int tries = 0; tries < 2 && answered == 0; ++tries) {
    auto answer = queue.ask(21);
    REQUIRE(answer.wait_for(10s) == std::future_status::ready);
    try {
      answered = answer.get();
    } catch (const WorkerLost&) {
      CHECK(tries == 0);
    }
  }
  CHECK(answered == 42);
  queue.close();
  REQUIRE(doneFuture.wait_for(10s) == std::future_status::ready);
  CHECK(!doneFuture.get());
}

TEST_CASE("a peer with the secret that claims an honest node's id neither answers that node's workers' jobs nor takes its share") {
  // Shares and workers are the link's (peerLinkOf) and the sender's handle,
  // not the node id a HELLO states or an address (id and node): before,
  // the attacker's actor of the honest worker's id was that worker here.
  using actorpipe::remote::work_answer_atom;
  using actorpipe::remote::work_read_atom;
  using actorpipe::remote::work_try_read_atom;
  auto options = TestNode::quick();
  options.maxParkedPerPeer = 2;
  // The hand-made peer sends no BEATs: its link must outlive the test (its
  // end would let its share go, and the honest node's with it before).
  options.heartbeatTimeout = 120s;
  TestNode owner(options), client;
  WorkQueue<int32_t, int32_t> queue(8);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "jobs"));
  auto opened = actorpipe::remote::openWorkQueue<int32_t, int32_t>(client.node(), owner.node().url("tcp"), "jobs");
  REQUIRE(opened);
  auto target = caf::actor_cast<caf::actor>(*opened);
  auto answers = std::make_shared<WorkAnswers>();
  auto honest = client.system().spawn(readParker, target, answers);
  REQUIRE(parked(client, honest));
  auto asked = queue.ask(7);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  auto held = [&] {
    std::lock_guard<std::mutex> guard(answers->mutex);
    return answers->ids;
  };
  while (held().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  REQUIRE(held().size() == 1);
  uint64_t job = held()[0];

  auto context = testing::makeContext("attacker");
  auto pipe = context->connect(owner.node().url("tcp"));
  uint64_t jobs = attackerHello(*pipe, actorpipe::remote::detail::workQueueName("jobs"), client.system().node());
  // The honest worker's job, answered by "it".
  attackerAsk(*pipe, owner.system(), jobs, honest.id(), 1, caf::make_message(work_answer_atom::value, job, int32_t(666)));
  REQUIRE(attackerAnswered(*pipe, honest.id(), 1));
  CHECK(asked.wait_for(0s) == std::future_status::timeout);
  // The attacker parks two reads, its share, ...
  constexpr uint64_t kAttacker = 5;
  attackerAsk(*pipe, owner.system(), jobs, kAttacker, 2, caf::make_message(work_read_atom::value));
  attackerAsk(*pipe, owner.system(), jobs, kAttacker, 3, caf::make_message(work_read_atom::value));
  attackerAsk(*pipe, owner.system(), jobs, kAttacker, 4, caf::make_message(work_try_read_atom::value));
  REQUIRE(attackerAnswered(*pipe, kAttacker, 1));  // the try-read; the reads wait
  // ... and the honest node still parks its own two (refused for ever
  // when they shared a bucket).
  for (int i = 0; i < 2; ++i) CHECK(parked(client, honest));
  {
    std::lock_guard<std::mutex> guard(answers->mutex);
    CHECK(answers->errors.empty());
  }
  caf::scoped_actor self{client.system()};
  self->send_exit(honest, caf::exit_reason::user_shutdown);
  CHECK_THROWS_AS(asked.get(), WorkerLost);
  pipe->close();
  context->join();
}

TEST_CASE("an actor that ends while serveFrom waits at the owner frees what it serves with") {
  // The serving closure holds itself until `done` runs, which an actor
  // that ends first never gets to: before, it and all it held leaked.
  TestNode owner, client;
  WorkQueue<int32_t, int32_t> queue(4);
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "jobs"));
  auto opened = actorpipe::remote::openWorkQueue<int32_t, int32_t>(client.node(), owner.node().url("shm"), "jobs");
  REQUIRE(opened);
  auto held = std::make_shared<int>(0);
  std::weak_ptr<int> watch = held;
  auto server = client.system().spawn([to = *opened, held](caf::event_based_actor* self) -> caf::behavior {
    actorpipe::remote::serveFrom<int32_t, int32_t>(
        self, to, [held](int32_t q) { return q + *held; }, [](caf::error) {});
    return {[](int32_t) {}};
  });
  held.reset();
  std::this_thread::sleep_for(50ms);  // its read waits at the owner (no job)
  caf::scoped_actor self{client.system()};
  self->monitor(server);
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->receive([](caf::down_msg&) {});
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(watch.expired());
}

// `done` runs in the serving actor: one that throws is that actor's own
// exception (its handler sees it), and the serving closure, which holds
// itself while it serves, is freed all the same.
TEST_CASE("serveFrom: a done that throws is the actor's exception and leaks nothing") {
  TestNode owner, node;
  WorkQueue<int32_t, int32_t> queue;
  REQUIRE(!actorpipe::remote::exportWorkQueue(owner.node(), queue, "q"));
  auto handle = actorpipe::remote::openWorkQueue<int32_t, int32_t>(node.node(),
                                                                   owner.node().url("shm"), "q");
  REQUIRE(handle);
  auto token = std::make_shared<int>(0);  // held by `done` alone
  std::weak_ptr<int> watch = token;
  auto caught = std::make_shared<std::promise<std::string>>();
  node.system().spawn([token, caught, to = *handle](caf::event_based_actor* self) -> caf::behavior {
    self->set_exception_handler([caught](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        caught->set_value(x.what());
      }
      return caf::exit_reason::user_shutdown;
    });
    actorpipe::remote::serveFrom<int32_t, int32_t>(
        self, to, [](int32_t q) { return q; },
        [token](caf::error) { throw std::runtime_error("done threw"); });
    return {[](int32_t) {}};
  });
  token.reset();
  auto answer = queue.ask(5);
  REQUIRE(answer.wait_for(10s) == std::future_status::ready);
  CHECK(answer.get() == 5);
  queue.close();
  auto what = caught->get_future();
  REQUIRE(what.wait_for(10s) == std::future_status::ready);
  CHECK(what.get() == "done threw");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(watch.expired());
}
