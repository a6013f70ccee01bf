#pragma once
// Workqueues across nodes (torch-ipc's owner/worker queue across
// processes): one node owns a dataflow::WorkQueue and asks questions;
// workers on other nodes read them and answer.
//
//   // the owner's node
//   dataflow::WorkQueue<Tensor, double> queue(64);
//   remote::exportWorkQueue(node, queue, "sums");
//   auto answer = queue.ask(tensor);            // std::future<double>
//   // a worker's node, one RemoteWorker per worker thread
//   auto worker = remote::RemoteWorker<Tensor, double>::open(node, url, "sums");
//   worker->serve([](Tensor t) { return sum(t); });   // until the queue drains
//
// A RemoteWorker is a Worker on the owner's node: the jobs it reads are
// held for it there, and when it goes away with jobs unanswered (destroyed,
// or its node lost or gone) those jobs are answered with WorkerLost, so an
// owner never waits for a worker that is gone. The owner accepts an answer
// only for a job that worker holds (ids are peer bytes).
//
// Each RemoteWorker asks through one scoped actor of its own, so the owner
// sees one sender per worker and watches it: that actor's end (the
// RemoteWorker destroyed) or its node's loss ends the worker there. Each
// call is one round trip; read() waits, without holding a thread on the
// owner's node, until a question comes or the queue is closed and empty
// (DRAINED).
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include <caf/atom.hpp>
#include <caf/attachable.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <actorpipe/actors/dataflow/actor_io.h>
#include <actorpipe/actors/dataflow/workqueue.h>
#include <actorpipe/actors/remote/detail/handoff.h>
#include <actorpipe/actors/remote/detail/parked.h>
#include <actorpipe/actors/remote/detail/peer_exits.h>
#include <actorpipe/actors/remote/node.h>

namespace actorpipe::remote {

using work_read_atom = caf::atom_constant<caf::atom("wqread")>;
using work_try_read_atom = caf::atom_constant<caf::atom("wqtryread")>;
using work_answer_atom = caf::atom_constant<caf::atom("wqanswer")>;
using work_fail_atom = caf::atom_constant<caf::atom("wqfail")>;

// What a workqueue's owner answers: reads give (Status byte, job id,
// question); answers and failures give whether the job was this worker's.
template <class Q, class A>
using WorkQueueActor = caf::typed_actor<
    typename caf::replies_to<work_read_atom>::template with<uint8_t, uint64_t, Q>,
    typename caf::replies_to<work_try_read_atom>::template with<uint8_t, uint64_t, Q>,
    typename caf::replies_to<work_answer_atom, uint64_t, A>::template with<bool>,
    typename caf::replies_to<work_fail_atom, uint64_t, std::string>::template with<bool>>;

// A remote worker's failure, as the owner's answer carries it.
class RemoteWorkFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// serveFrom's cycle, ended by its actor's end; detached (by its token)
// when serving ends first. Counted, for tests.
class ServingEnd final : public caf::attachable {
 public:
  struct Token {
    static constexpr size_t token_type = 0x61707366;  // "apsf": none of CAF's
    const void* cycle;
  };
  explicit ServingEnd(std::shared_ptr<std::function<void()>> next) : next_(std::move(next)) {
    live().fetch_add(1, std::memory_order_relaxed);
  }
  ~ServingEnd() override { live().fetch_sub(1, std::memory_order_relaxed); }
  void actor_exited(const caf::error&, caf::execution_unit*) override { *next_ = nullptr; }
  bool matches(const token& what) override {
    return what.subtype == Token::token_type &&
           static_cast<const Token*>(what.ptr)->cycle == next_.get();
  }
  static std::atomic<size_t>& live() {
    static std::atomic<size_t> count{0};
    return count;
  }

 private:
  std::shared_ptr<std::function<void()>> next_;
};

inline std::string workQueueName(const std::string& name) { return "workqueue:" + name; }

// The most text of a remote worker's failure kept.
constexpr size_t kMaxFailureText = 4096;
// The most workers one peer (link, peerLinkOf) may have at one owner: each
// is a Worker, a proxy and a monitor here, and a peer names its senders as
// it likes.
constexpr size_t kMaxWorkersPerNode = 1024;

template <class Q, class A>
struct WorkQueueOwnerState {
  dataflow::WorkQueue<Q, A> queue;
  // One Worker per remote worker (the actor it asks with); destroying it
  // answers its unanswered jobs with WorkerLost. That actor's proxy is held
  // here: a proxy nobody holds is gone, and its monitor with it. Keyed by
  // that handle, not by address: CAF compares addresses by id and node, and
  // a peer with the secret may claim another node's id (its actors would
  // pass for that node's workers, answering their jobs).
  struct Remote {
    caf::strong_actor_ptr sender;
    std::unique_ptr<dataflow::Worker<Q, A>> worker;
    // Cleared when it goes: its reads still parked are dropped unserved.
    std::shared_ptr<std::atomic<bool>> wanted = std::make_shared<std::atomic<bool>>(true);
  };
  std::map<const caf::actor_control_block*, Remote> workers;
  std::map<uint64_t, size_t> perPeer;  // workers of each peer (peerLinkOf)
  ParkedBook parked;  // reads of each peer waiting for a job
};

template <class Q, class A>
using WorkQueueOwner = typename WorkQueueActor<Q, A>::template stateful_pointer<WorkQueueOwnerState<Q, A>>;

// The current sender's Worker, made on its first read; null past
// kMaxWorkersPerNode workers of its peer.
template <class Q, class A>
dataflow::Worker<Q, A>* workerFor(WorkQueueOwner<Q, A> self) {
  auto sender = self->current_sender();
  auto found = self->state.workers.find(sender.get());
  if (found != self->state.workers.end()) return found->second.worker.get();
  size_t& count = self->state.perPeer[peerLinkOf(sender)];
  if (count >= kMaxWorkersPerNode) return nullptr;
  ++count;
  auto& slot = self->state.workers[sender.get()];
  slot.worker = std::make_unique<dataflow::Worker<Q, A>>(self->state.queue.worker());
  slot.sender = sender;
  if (sender) self->monitor(sender);
  return slot.worker.get();
}

// The current sender's Worker if it has one (answers make none).
template <class Q, class A>
dataflow::Worker<Q, A>* workerOf(WorkQueueOwner<Q, A> self) {
  auto it = self->state.workers.find(self->current_sender().get());
  return it == self->state.workers.end() ? nullptr : it->second.worker.get();
}

template <class Q, class A>
void forgetWorker(WorkQueueOwner<Q, A> self, const caf::actor_control_block* who) {
  auto it = self->state.workers.find(who);
  if (it == self->state.workers.end()) return;
  uint64_t peer = peerLinkOf(it->second.sender);
  it->second.wanted->store(false, std::memory_order_release);
  self->state.parked.departed();
  self->state.workers.erase(it);
  auto count = self->state.perPeer.find(peer);
  if (count != self->state.perPeer.end() && --count->second == 0) self->state.perPeer.erase(count);
}

template <class Q, class A>
typename WorkQueueActor<Q, A>::behavior_type workQueueOwner(WorkQueueOwner<Q, A> self,
                                                            dataflow::WorkQueue<Q, A> queue,
                                                            const NodeOptions& options) {
  using dataflow::Job;
  using dataflow::ReadResult;
  self->state.queue = std::move(queue);
  self->state.parked = ParkedBook(options.maxParkedPerPeer, options.maxParkedBytesPerPeer);
  serveEveryNode(self);
  // A worker gone (its actor ended, or its node was lost or left): its
  // Worker goes, answering what it held with WorkerLost.
  self->set_down_handler([self](caf::down_msg& down) { forgetWorker<Q, A>(self, down.source.get()); });
  auto deliver = [](auto& promise, ReadResult<Job<Q>> job) {
    if (job.item) {
      promise.deliver(static_cast<uint8_t>(job.status), job.item->id, std::move(job.item->question));
    } else {
      promise.deliver(static_cast<uint8_t>(job.status), uint64_t(0), Q());
    }
  };
  // A job read anonymously would be held for nobody: refused.
  auto refuseWith = [self](caf::error error) {
    auto promise = self->template make_response_promise<uint8_t, uint64_t, Q>();
    promise.deliver(std::move(error));
    return promise;
  };
  auto refuse = [refuseWith](const char* why) {
    return refuseWith(caf::make_error(caf::sec::invalid_argument, why));
  };
  auto anonymous = [refuse] { return refuse("an anonymous workqueue read"); };
  auto tooMany = [refuse] {
    return refuse("too many workers of one node at this workqueue (kMaxWorkersPerNode)");
  };
  return {
      [=](work_read_atom) {
        if (!self->current_sender()) return anonymous();
        // Before the promise, which takes the sender out of the message.
        const caf::actor_control_block* who = self->current_sender().get();
        auto* worker = workerFor<Q, A>(self);
        if (!worker) return tooMany();
        auto& remote = self->state.workers[who];
        auto questions = worker->questions();
        auto token = self->state.parked.take(peerLinkOf(remote.sender), 0, [&] {
          questions.state()->forgetDepartedWaiters();
        });
        if (!token) {
          // Its node has maxParkedPerPeer reads waiting here (an honest
          // worker has one): served only if a job waits.
          auto now = worker->tryRead();
          if (now.status != dataflow::Status::kEmpty) {
            auto promise = self->template make_response_promise<uint8_t, uint64_t, Q>();
            deliver(promise, std::move(now));
            return promise;
          }
          return refuseWith(makeError(RemoteError::kTooManyRequests,
                                      "this node has " + std::to_string(self->state.parked.perNode()) +
                                          " reads waiting at the workqueue's owner already (maxParkedPerPeer)"));
        }
        // Weak: the parked read lives in that channel; a strong handle in
        // its callback would keep the channel, and so the read, for ever
        // (a node left with a read parked and the queue never closed).
        std::weak_ptr questionsState = questions.state();
        auto promise = self->template make_response_promise<uint8_t, uint64_t, Q>();
        dataflow::readThen(
            self, questions,
            [=, token = std::move(token), wanted = remote.wanted](ReadResult<Job<Q>> job) mutable {
              auto it = self->state.workers.find(who);
              if (!wanted->load(std::memory_order_acquire) || it == self->state.workers.end()) {
                // The worker went while this was on its way (a new one
                // whose handle took the freed memory is another worker):
                // the job is someone else's.
                auto state = questionsState.lock();
                if (job.item && state) state->unread(std::move(*job.item));
                return;
              }
              deliver(promise, it->second.worker->adopt(std::move(job)));
            },
            remote.wanted);
        return promise;
      },
      [=](work_try_read_atom) {
        if (!self->current_sender()) return anonymous();
        auto* worker = workerFor<Q, A>(self);
        if (!worker) return tooMany();
        auto promise = self->template make_response_promise<uint8_t, uint64_t, Q>();
        deliver(promise, worker->tryRead());
        return promise;
      },
      [=](work_answer_atom, uint64_t id, A& value) {
        auto* worker = workerOf<Q, A>(self);
        if (!worker) return false;  // it has read nothing
        try {
          worker->answer(id, std::move(value));
          return true;
        } catch (const std::logic_error&) {
          return false;  // not a job this worker holds
        }
      },
      [=](work_fail_atom, uint64_t id, std::string& what) {
        if (what.size() > kMaxFailureText) what.resize(kMaxFailureText);
        auto* worker = workerOf<Q, A>(self);
        if (!worker) return false;
        try {
          worker->fail(id, std::make_exception_ptr(RemoteWorkFailed(what)));
          return true;
        } catch (const std::logic_error&) {
          return false;
        }
      },
  };
}

} // namespace detail

// Lets workers on nodes that reach `node` serve `queue` as `name`.
template <class Q, class A>
Error exportWorkQueue(Node& node, const dataflow::WorkQueue<Q, A>& queue, const std::string& name) {
  auto owner = node.system().spawn(detail::workQueueOwner<Q, A>, queue, node.options());
  // Its handlers never block (a full or empty channel parks the request):
  // it runs where its peers' requests are read (Node::runOnLoop).
  node.runOnLoop(owner);
  node.endOnLeave(owner);
  Error error = node.publish(owner, detail::workQueueName(name));
  if (error) caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  return error;
}

inline void unexportWorkQueue(Node& node, const std::string& name) {
  node.unpublish(detail::workQueueName(name));
}

// The owner of the workqueue exported as `name` at `url`, for actors: an
// actor that requests it is a worker of its own there (its jobs held for
// it, answered with WorkerLost when it ends or its node goes). serveFrom
// does the asking.
template <class Q, class A>
caf::expected<WorkQueueActor<Q, A>> openWorkQueue(Node& node, const std::string& url,
                                                  const std::string& name) {
  return node.remoteActor<WorkQueueActor<Q, A>>(url, detail::workQueueName(name));
}

// An actor serves a remote workqueue without blocking: it reads a job,
// answers it with `fn(question)` (an exception becomes the job's failure,
// RemoteWorkFailed at the owner), and reads the next, one job at a time,
// while it goes on handling its other messages. `done(error)` runs once:
// no error when the queue is drained, else why the owner cannot be served
// (its node lost or gone, a status that is no Status); never if the actor
// ends first (what `fn` and `done` hold is freed then). Q and A are named:
// serveFrom<Q, A>(self, owner, fn, done).
template <class Q, class A, class Self, class Fn, class Done>
void serveFrom(Self* self, WorkQueueActor<Q, A> owner, Fn fn, Done done) {
  using dataflow::Status;
  auto next = std::make_shared<std::function<void()>>();
  // Ends the cycle through the closure (it holds itself) before `done`
  // runs: `done` runs in the caller's actor, and one that throws is that
  // actor's own exception (CAF's rules), but leaks nothing. The actor's
  // end has nothing left to end then: its attachable goes too (an actor
  // that serves again and again would otherwise gather one per call).
  auto finish = [self, next, done](caf::error error) mutable {
    *next = nullptr;
    self->detach(detail::ServingEnd::Token{next.get()});
    done(std::move(error));
  };
  *next = [self, owner, fn, next, finish]() mutable {
    self->request(owner, caf::infinite, work_read_atom::value)
        .then(
            [self, owner, fn, next, finish](uint8_t status, uint64_t id, Q& question) mutable {
              auto s = static_cast<Status>(status);
              if (s == Status::kDrained) return finish(caf::error());
              if (s != Status::kOpen && s != Status::kClosed) {
                return finish(caf::make_error(caf::sec::unexpected_response,
                                              "a remote workqueue answered status " +
                                                  std::to_string(status)));
              }
              auto again = [next](bool) { (*next)(); };
              auto lost = [finish](caf::error& error) mutable { finish(std::move(error)); };
              std::string failure;
              try {
                A answer = fn(std::move(question));
                self->request(owner, caf::infinite, work_answer_atom::value, id, std::move(answer))
                    .then(again, lost);
                return;
              } catch (const std::exception& e) {
                failure = e.what();
              } catch (...) {
                failure = "unknown exception";
              }
              self->request(owner, caf::infinite, work_fail_atom::value, id, std::move(failure))
                  .then(again, lost);
            },
            [self, next, finish](caf::error& error) mutable {
              // Its node has its share of reads waiting at the owner
              // (maxParkedPerPeer; a worker that went may not be let go
              // yet): ask again in a while, as RemoteWorker does.
              if (isError(error, RemoteError::kTooManyRequests)) {
                dataflow::detail::runInActorAfter(
                    self, std::chrono::milliseconds(20),
                    std::make_shared<dataflow::detail::FunctionContinuation>([next] {
                      if (*next) (*next)();
                    }));
                return;
              }
              finish(std::move(error));
            });
  };
  // An actor that ends while serving drops the pending handler or the
  // delayed retry, so `finish` never runs: its end ends the cycle instead.
  self->attach(caf::attachable_ptr(new detail::ServingEnd(next)));
  if (*next) (*next)();  // (an actor already cleaned up ran that at once)
}

// A worker of a workqueue another node owns. Movable, not copyable, like
// dataflow::Worker: it holds the jobs it read. Use each from one thread at
// a time.
template <class Q, class A>
class RemoteWorker {
 public:
  static caf::expected<RemoteWorker> open(Node& node, const std::string& url,
                                          const std::string& name) {
    auto owner = node.remoteActor<WorkQueueActor<Q, A>>(url, detail::workQueueName(name));
    if (!owner) return std::move(owner.error());
    return RemoteWorker(node.system(), std::move(*owner));
  }
  RemoteWorker(RemoteWorker&&) = default;
  RemoteWorker& operator=(RemoteWorker&&) = delete;
  RemoteWorker(const RemoteWorker&) = delete;

  // The next question, held by this worker until answered; DRAINED once the
  // queue is closed and empty (or the owner's node is gone: see error()).
  dataflow::ReadResult<dataflow::Job<Q>> read() { return askJob(work_read_atom::value); }
  // EMPTY instead of waiting.
  dataflow::ReadResult<dataflow::Job<Q>> tryRead() { return askJob(work_try_read_atom::value); }
  // Answers job `id`; false if the owner refused it (not a job this worker
  // holds) or is gone.
  bool answer(uint64_t id, A value) { return askAccepted(work_answer_atom::value, id, std::move(value)); }
  // Answers job `id` with a failure the owner sees as RemoteWorkFailed.
  bool fail(uint64_t id, const std::string& what) { return askAccepted(work_fail_atom::value, id, what); }

  // Answers questions with `fn(question)` until the queue is drained; an
  // exception from fn becomes that question's failure. Returns the number
  // of questions handled.
  template <class Fn>
  size_t serve(Fn&& fn) {
    size_t handled = 0;
    for (auto job = read(); job; job = read(), ++handled) {
      try {
        answer(job.item->id, fn(std::move(job.item->question)));
      } catch (const std::exception& e) {
        fail(job.item->id, e.what());
      } catch (...) {
        fail(job.item->id, "unknown exception");
      }
    }
    return handled;
  }

  // Why the worker behaves as if the queue were drained (the owner's node
  // was lost or left, or answered what no owner answers).
  caf::error error() const { return error_; }

 private:
  using Owner = WorkQueueActor<Q, A>;

  // The scoped actor asks the owner directly, the same sender for this
  // worker's whole life: the owner holds its jobs for that sender and
  // watches it, so its end (this worker destroyed) or its node's loss
  // ends the worker there.
  RemoteWorker(caf::actor_system& system, Owner owner)
      : owner_(std::move(owner)), self_(std::make_unique<caf::scoped_actor>(system)) {}

  template <class Atom>
  dataflow::ReadResult<dataflow::Job<Q>> askJob(Atom atom) {
    for (auto backoff = std::chrono::milliseconds(1);;) {
      auto result = askJobOnce(atom);
      if (!error_ || !detail::waitIfBusy(error_, backoff)) return result;
      error_ = caf::error();
    }
  }

  template <class Atom>
  dataflow::ReadResult<dataflow::Job<Q>> askJobOnce(Atom atom) {
    using dataflow::Status;
    dataflow::ReadResult<dataflow::Job<Q>> result(Status::kDrained);
    if (error_) return result;
    (*self_)->request(owner_, caf::infinite, atom)
        .receive(
            [&](uint8_t status, uint64_t id, Q& question) {
              detail::acquireHandoff();
              auto s = static_cast<Status>(status);
              if (s == Status::kOpen || s == Status::kClosed) {
                result = dataflow::ReadResult<dataflow::Job<Q>>(s, dataflow::Job<Q>{id, std::move(question)});
              } else if (s == Status::kDrained || s == Status::kEmpty) {
                result = dataflow::ReadResult<dataflow::Job<Q>>(s);
              } else {
                error_ = caf::make_error(caf::sec::unexpected_response,
                                         "a remote workqueue answered status " + std::to_string(status));
              }
            },
            [&](caf::error& error) { error_ = std::move(error); });
    return result;
  }

  template <class... Ts>
  bool askAccepted(Ts&&... xs) {
    if (error_) return false;
    bool accepted = false;
    (*self_)->request(owner_, caf::infinite, std::forward<Ts>(xs)...)
        .receive([&](bool ok) { accepted = ok; }, [&](caf::error& error) { error_ = std::move(error); });
    return accepted;
  }

  Owner owner_;
  std::unique_ptr<caf::scoped_actor> self_;
  caf::error error_;
};

} // namespace actorpipe::remote
