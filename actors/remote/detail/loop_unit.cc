#include <actorpipe/actors/remote/detail/loop_unit.h>

#include <map>

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::remote::detail {
namespace {

thread_local LoopUnit::Batch* tBatch = nullptr;

} // namespace

bool LoopUnit::supported() {
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  return true;
#endif
}

LoopUnit::LoopUnit(caf::actor_system* system) : caf::execution_unit(system) {}

LoopUnit& LoopUnit::of(caf::actor_system& system) {
  // Reachable for ever (an actor may hold its last unit after its node is
  // gone); a system made later at the same address gets the same unit,
  // which then points at that system.
  static std::mutex mutex;
  static auto* units = new std::map<caf::actor_system*, LoopUnit*>();
  std::lock_guard<std::mutex> guard(mutex);
  LoopUnit*& unit = (*units)[&system];
  if (unit == nullptr) unit = new LoopUnit(&system);
  return *unit;
}

void LoopUnit::host(const caf::strong_actor_ptr& actor, std::chrono::microseconds budget) {
  if (!actor || !supported()) return;
  auto* self = caf::actor_cast<caf::abstract_actor*>(actor);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    hosted_[actor->id()] = budget;
  }
  caf::actor_id aid = actor->id();
  // Forgotten when it ends (ids are never reused within a system).
  self->attach_functor([this, aid] { forget(aid); });
}

bool LoopUnit::hosted(caf::actor_id aid) {
  std::lock_guard<std::mutex> guard(mutex_);
  return hosted_.count(aid) != 0;
}

void LoopUnit::forget(caf::actor_id aid) {
  std::lock_guard<std::mutex> guard(mutex_);
  hosted_.erase(aid);
}

void LoopUnit::exec_later(caf::resumable* ptr) {
  if (tBatch != nullptr && &tBatch->unit_ == this &&
      ptr->subtype() == caf::resumable::scheduled_actor &&
      hosted(static_cast<caf::scheduled_actor*>(ptr)->id())) {
    tBatch->push(ptr);
    return;
  }
  system().scheduler().enqueue(ptr);
}

void LoopUnit::resumeHere(caf::resumable* ptr) {
  auto* actor = static_cast<caf::scheduled_actor*>(ptr);
  caf::actor_id aid = actor->id();
  auto start = std::chrono::steady_clock::now();
  auto result = ptr->resume(this, kThroughput);
  auto took = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = hosted_.find(aid);
    if (it != hosted_.end() && took > it->second) {
      ACTORPIPE_LOG(kWarn, "actor " << aid << " ran " << took.count()
                                    << " us at once on a node's loop (budget "
                                    << it->second.count()
                                    << " us): it runs on CAF's scheduler from now on");
      hosted_.erase(it);
    }
  }
  switch (result) {
    case caf::resumable::resume_later:
      // More than kThroughput waiting: the scheduler has it (and our
      // reference) until its mailbox is idle again.
      system().scheduler().enqueue(ptr);
      break;
    case caf::resumable::done:
    case caf::resumable::awaiting_message:
    case caf::resumable::shutdown_execution_unit:
      // The reference CAF took when it handed the actor to exec_later.
      caf::intrusive_ptr_release(ptr);
      break;
  }
}

LoopUnit::Batch::Batch(LoopUnit& unit) : unit_(unit), outer_(tBatch) { tBatch = this; }

LoopUnit::Batch::~Batch() {
  run();
  tBatch = outer_;
}

void LoopUnit::Batch::run() {
  // By index: a resumed actor may wake another hosted one (queued here).
  for (size_t i = 0; i < count_; ++i) unit_.resumeHere(at(i));
  count_ = 0;
  more_.clear();
}

} // namespace actorpipe::remote::detail
