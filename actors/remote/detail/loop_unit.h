#pragma once
// Running an actor where its peers' messages are read (Node::runOnLoop).
//
// Why. A peer's message is read on a pipe's loop thread. Handed to CAF's
// scheduler, its actor then runs on a worker thread the loop has to wake,
// and its reply goes back to the loop: a thread hand-off on each side of
// every round trip, most of a remote request/reply's time on these machines
// (docs/benchmarks.md, "Remote actors"). For the actors a user hosts here,
// the loop runs them itself.
//
// How. A link enqueues a peer's message with this execution unit. CAF gives
// an actor whose mailbox was idle back to the unit (exec_later); inside a
// Batch (a link's read callback) a hosted actor is queued there and resumed
// on this thread once the batch's frames are delivered; anything else goes
// to CAF's scheduler, as CAF's own execution units do. CAF's mailbox makes
// one thread at a time run an actor: a hosted actor that local actors also
// message runs on a worker for those, on the loop for its peers' messages.
//
// Bounds. At most kThroughput messages per resume (an actor with more goes
// to the scheduler, which has it until its mailbox is idle again), and a
// hosted actor whose handlers run longer than its budget at once is
// hosted no more (warned): the loop it would hold also reads, writes and
// beats for its links.
//
// Thread model. exec_later may be called from any thread (CAF hands a
// response promise delivered from a foreign thread the actor's last
// execution unit); it queues only on a thread inside a Batch of this unit.
// Units are never freed: an actor keeps a pointer to the last unit that
// ran it.
#include <array>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/execution_unit.hpp>
#include <caf/resumable.hpp>

namespace actorpipe::remote::detail {

class LoopUnit final : public caf::execution_unit {
 public:
  static constexpr size_t kThroughput = 1024;

  // The unit of `system` (made on first use, never freed).
  static LoopUnit& of(caf::actor_system& system);

  // Whether hosting works in this build: not under ThreadSanitizer, which
  // cannot see CAF's (uninstrumented) mailbox hand an actor from a worker
  // to a loop and back, and would report each actor racing with itself.
  static bool supported();

  // Runs `actor` (a scheduled actor) on loops from now on, until it ends or
  // a resume takes longer than `budget`.
  void host(const caf::strong_actor_ptr& actor, std::chrono::microseconds budget);
  bool hosted(caf::actor_id aid);

  void exec_later(caf::resumable* ptr) override;

  // While one lives on a thread, hosted actors given to exec_later on it
  // are queued, and run() (or the destructor) resumes them there.
  class Batch {
   public:
    explicit Batch(LoopUnit& unit);
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    void run();

   private:
    friend class LoopUnit;
    void push(caf::resumable* ptr) {
      if (count_ < first_.size()) first_[count_] = ptr;
      else more_.push_back(ptr);
      ++count_;
    }
    caf::resumable* at(size_t i) const { return i < first_.size() ? first_[i] : more_[i - first_.size()]; }

    LoopUnit& unit_;
    Batch* outer_;
    // The actors to resume: the first few in place (a batch of one message
    // allocates nothing), the rest after them.
    std::array<caf::resumable*, 8> first_;
    size_t count_{0};
    std::vector<caf::resumable*> more_;
  };

 private:
  explicit LoopUnit(caf::actor_system* system);
  void forget(caf::actor_id aid);
  void resumeHere(caf::resumable* ptr);

  std::mutex mutex_;
  std::unordered_map<caf::actor_id, std::chrono::microseconds> hosted_;  // budgets
};

} // namespace actorpipe::remote::detail
