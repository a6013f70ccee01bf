// The Tree's side of the host arena (host_arena.h): when to use one, and how
// an allReduce on it becomes the group's errors.
#include <actorpipe/actors/group/tree_core.h>

#include <cstdlib>
#include <string>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;
using Lock = std::unique_lock<std::recursive_mutex>;

size_t fromEnvironment(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  return text && *text ? static_cast<size_t>(std::atoll(text)) : fallback;
}

} // namespace

bool TreeCore::arenaPossible() const { return oneHost_ && info.worldSize >= 2; }

bool TreeCore::arenaWanted() const {
  if (const char* text = std::getenv("ACTORPIPE_GROUP_ARENA")) {
    if (std::string(text) == "0") return false;
  }
  return arenaPossible() && options.arenaSlotBytes > 0;
}

ArenaOptions TreeCore::arenaOptions() const {
  ArenaOptions arena;
  arena.slotBytes = fromEnvironment("ACTORPIPE_ARENA_SLOT_BYTES", options.arenaSlotBytes);
  arena.wholeBytes = fromEnvironment("ACTORPIPE_ARENA_WHOLE_BYTES", arena.wholeBytes);
  arena.spin = std::chrono::microseconds(
      fromEnvironment("ACTORPIPE_ARENA_SPIN_US", static_cast<size_t>(arena.spin.count())));
  arena.oversubscribed = hostOversubscribed(info);
  return arena;
}

void TreeCore::adoptArena(std::unique_ptr<HostArena> arena, std::string note) {
  Lock lock(mutex_);
  arena_ = std::move(arena);
  arenaNote_ = std::move(note);
  if (arena_ && broken_) arena_->interrupt();
}

Error TreeCore::allReduceOnArena(const std::vector<TensorView>& tensors, const Reduction& op,
                                 bool contributes, int* contributors) {
  std::lock_guard<std::mutex> oneAtATime(callers_);
  if (Error error = checkTensors("allReduce", tensors)) return error;
  uint64_t call = 0;
  {
    Lock lock(mutex_);
    for (auto& link : links_) {
      if (link->departed && !broken_) {
        fail(ACTORPIPE_ERROR(RankFailedError, link->peer, "it left the group (closed its Tree)"));
      }
    }
    if (broken_) return broken_;
    call = ++sequence_;
    inCollective_ = call;
  }
  ArenaOutcome outcome;
  std::string thrown;
  try {
    outcome = arena_->allReduce(tensors, op, contributes, call,
                                Clock::now() + options.operationTimeout);
  } catch (const std::exception& e) {  // a custom reduction that threw
    thrown = e.what();
  }
  Lock lock(mutex_);
  if (thrown.empty() && outcome.status == ArenaOutcome::Status::kDone) {
    endCollective();
    if (contributors) *contributors = outcome.contributors;
    return Error::kSuccess;
  }
  inCollective_ = 0;
  const std::string at = "allReduce #" + std::to_string(call) + " at rank " +
                         std::to_string(info.rank);
  if (!thrown.empty()) {
    fail(ACTORPIPE_ERROR(LogicError, at + ": the reduction threw: " + thrown));
  } else if (outcome.status == ArenaOutcome::Status::kTimedOut) {
    fail(ACTORPIPE_ERROR(TimeoutError, at + " waited " +
                                           std::to_string(options.operationTimeout.count()) +
                                           " ms for rank(s) " + std::to_string(outcome.rank)));
  } else if (outcome.status == ArenaOutcome::Status::kMismatch) {
    fail(ACTORPIPE_ERROR(LogicError,
                         "rank " + std::to_string(outcome.rank) + " called allReduce #" +
                             std::to_string(call) + " with tensors of other sizes, dtypes or " +
                             "another reduction than rank " + std::to_string(info.rank) +
                             ": ranks called different collectives"));
  }
  return broken_ ? broken_ : ACTORPIPE_ERROR(ContextClosedError);
}

} // namespace actorpipe::group
