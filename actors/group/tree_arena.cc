// The Tree's side of the host arena (host_arena.h): when to use one, and how
// an allReduce on it becomes the group's errors.
#include <actorpipe/actors/group/tree_core.h>
#include <actorpipe/runtime/detail/log.h>

#include <cstdlib>
#include <string>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

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
  arena_ = std::move(arena);
  arenaNote_ = std::move(note);
  arenaView_.store(arena_.get());
  // A failure on the loop before the store above did not interrupt it.
  if (arena_ && brokenSet_.load()) arena_->interrupt();
}

Error TreeCore::allReduceOnArena(const std::vector<TensorView>& tensors, const Reduction& op,
                                 bool contributes, int* contributors) {
  std::lock_guard<std::mutex> oneAtATime(callers_);
  if (Error error = checkTensors("allReduce", tensors)) return error;
  // The arena runs on this thread; what the loop knows of the group comes
  // through atomics, and failures are handed to it (it tells the others).
  const int departed = departedPeer_.load();
  if (departed >= 0 && !brokenSet_.load()) {
    call([this, departed] {
      fail(ACTORPIPE_ERROR(RankFailedError, departed, "it left the group (closed its Tree)"));
    });
  }
  if (brokenSet_.load()) return broken_;
  const uint64_t number = sequence_.load() + 1;
  inCollective_.store(number);
  sequence_.store(number);
  ArenaOutcome outcome;
  bool threw = false;
  std::string thrown;
  try {
    outcome = arena_->allReduce(tensors, op, contributes, number,
                                Clock::now() + options.operationTimeout);
  } catch (...) {  // a custom reduction that threw (anything: the user's code)
    threw = true;
    thrown = ::actorpipe::detail::describeThrown();
  }
  inCollective_.store(0);
  if (!threw && outcome.status == ArenaOutcome::Status::kDone) {
    // An abort notice about a later collective, deferred while this one
    // ran, fails the group now (onDescriptor covers the other order).
    if (deferred_.load()) {
      dispatch([this] {
        if (deferredAbort_) fail(deferredAbort_, deferredCollective_);
      });
    }
    if (contributors) *contributors = outcome.contributors;
    return Error::kSuccess;
  }
  const std::string at = "allReduce #" + std::to_string(number) + " at rank " +
                         std::to_string(info.rank);
  Error error;
  if (threw) {
    error = ACTORPIPE_ERROR(LogicError, at + ": the reduction threw: " + thrown);
  } else if (outcome.status == ArenaOutcome::Status::kTimedOut) {
    error = ACTORPIPE_ERROR(TimeoutError, at + " waited " +
                                              std::to_string(options.operationTimeout.count()) +
                                              " ms for rank(s) " + std::to_string(outcome.rank));
  } else if (outcome.status == ArenaOutcome::Status::kMismatch) {
    error = ACTORPIPE_ERROR(LogicError,
                            "rank " + std::to_string(outcome.rank) + " called allReduce #" +
                                std::to_string(number) + " with tensors of other sizes, dtypes or " +
                                "another reduction than rank " + std::to_string(info.rank) +
                                ": ranks called different collectives");
  }
  if (error) call([this, &error] { fail(error); });
  return brokenSet_.load() ? broken_ : ACTORPIPE_ERROR(ContextClosedError);
}

} // namespace actorpipe::group
