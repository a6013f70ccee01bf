#pragma once
// The state behind a Tree: its Context, one link per tree neighbour, and the
// collective in progress, driven by pipe callbacks.
//
// Threads: a TreeCore is an actor on its Context's loop, the thread every
// pipe of the group already runs on. Its state is the loop's alone: pipe
// callbacks arrive there, and the caller's thread hands work to it
// (dispatch()) and then waits for what it asked (a Signal), never on a lock
// that a network event needs. One event runs at a time; a pipe that calls
// back at once, inside a call of ours, nests an event in the one that
// called it (Event counts them: what ends a wait is looked at only when the
// outermost one ends). The host arena's calls run on the caller's thread;
// what they share with the loop (the collective's number, whether the group
// broke) is atomic, and a failure they find is handed to the loop.
//
// Each link keeps one readDescriptor outstanding at all times, so a
// neighbour's death or abort notice is seen even between collectives. A
// descriptor that belongs to the next collective (a fast neighbour) waits on
// its link, its data still on the wire, until that collective starts.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <mutex>
#include <string>
#include <vector>

#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/group/algorithm.h>
#include <actorpipe/actors/group/chunks.h>
#include <actorpipe/actors/group/frames.h>
#include <actorpipe/actors/group/host_arena.h>
#include <actorpipe/actors/group/plan.h>
#include <actorpipe/actors/group/rendezvous.h>
#include <actorpipe/actors/group/tree.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe::group {

// Small helpers shared by the algorithms' files.
inline TensorView slice(const TensorView& tensor, const Segment& segment, void* base) {
  const size_t element = dtypeSize(tensor.dtype);
  return TensorView{base, segment.length / element, tensor.dtype, tensor.device};
}

inline uint8_t* bytesOf(const TensorView& tensor) { return static_cast<uint8_t*>(tensor.data); }

inline Message::Tensor outgoing(void* data, size_t length) {
  Message::Tensor tensor;
  tensor.buffer = CpuBuffer{data};
  tensor.length = length;
  return tensor;
}

// Whether this host runs more of the group's ranks than it has CPUs (then
// nothing should poll or spin without yielding).
bool hostOversubscribed(const RankInfo& info);

// What a caller waits for: raised on the loop, waited for on the caller's
// thread. Levels only grow.
class Signal {
 public:
  void raise(int level);
  int level() const { return level_.load(std::memory_order_acquire); }
  void waitFor(int level);
  // Whether `level` was reached by `deadline`.
  bool waitFor(int level, std::chrono::steady_clock::time_point deadline);

 private:
  std::atomic<int> level_{0};
  std::mutex mutex_;
  std::condition_variable raised_;
};

struct Link {
  int peer{-1};
  bool toParent{false};
  int childIndex{-1};  // position in TreeNode::children; -1 when not a child
  bool ringNext{false};  // the ring all-reduce sends to this peer
  bool ringPrev{false};  // ... and receives from this one (both when 2 ranks)
  int cubeStep{-1};      // recursive doubling: the step at which this peer is our partner
  std::shared_ptr<Pipe> pipe;
  bool readingDescriptor{false};
  bool holdsDescriptor{false};
  Descriptor descriptor;
  LinkFrame frame;  // the held descriptor's, decoded: always data
  bool readingData{false};
  bool departed{false};  // the peer said goodbye (closed its Tree after its last collective)
  size_t consumed{0};  // messages of the current collective read from this link
  // A child's contributions land here (allReduce) or a subtree's share (scatter).
  std::unique_ptr<uint8_t[]> scratch;
  size_t scratchBytes{0};
};

struct Operation {
  enum class Kind { kAllReduce, kBroadcast, kScatter };
  // Which algorithm carries it (algorithm.h): chosen by the plan, the same
  // on every rank. Broadcast and scatter always take the tree.
  enum class Route { kTree, kRing, kHalving, kExchange, kDoubling };
  Kind kind{Kind::kAllReduce};
  Route route{Route::kTree};
  uint64_t sequence{0};
  const char* name{"allReduce"};
  std::vector<TensorView> tensors;
  const Reduction* reduction{nullptr};
  bool contributes{true};
  std::vector<Chunk> chunks;
  size_t totalBytes{0};
  size_t scratchBytes{0};  // what scratch buffers need (aligned segments); 0: totalBytes
  // Scatter: the root's per-rank tensors.
  std::vector<TensorView> perRank;
  // How long the caller waits; 0: TreeOptions::operationTimeout. The
  // collectives that form the group (Tree::create) take rendezvousTimeout:
  // a short operationTimeout must not fail the join while a slow rank is
  // still starting up.
  std::chrono::milliseconds timeout{0};

  int contributors{0};  // the result's: how many ranks contributed
  std::unique_ptr<Algorithm> algorithm;  // set when the call starts, on the loop
  int pendingWrites{0};
  bool finished{false};
  Error error;

  // Where the caller's wait stands: the loop raises kFailed once `error` is
  // set, kOver once nothing of the call is in flight any more (finished, or
  // failed and every read and write into the caller's tensors ended).
  enum Stage : int { kRunning = 0, kFailed = 1, kOver = 2 };
  Signal stage;
};

class TreeCore : public std::enable_shared_from_this<TreeCore> {
 public:
  // One event of the actor (see the top). When the outermost one ends, it
  // settles what waits on the loop's state (afterEvent); if it finished
  // the collective, it then yields the CPU: the caller it woke usually
  // shares this CPU (ranks are bound to one), and the loop would otherwise
  // keep polling there for its whole window before the caller runs.
  struct Event {
    explicit Event(TreeCore& core) : core(core) { ++core.depth_; }
    ~Event();
    TreeCore& core;
  };

  TreeCore(RankInfo info, TreeOptions options);
  ~TreeCore();

  Error start();
  // Caller's thread: one collective, from start to the end of what it has
  // in flight.
  Error run(std::shared_ptr<Operation> operation);
  // Whether an allReduce of `bytes` goes round the ring (same on every rank).
  bool useRing(size_t bytes) const;
  bool useExchange(size_t bytes) const;
  bool useDoubling(size_t bytes, size_t chunks) const;
  bool useHalving(size_t bytes) const;
  size_t ringChunkBytes(size_t bytes) const;
  void close();
  // close(), then waits for every callback and removes rank 0's rendezvous file.
  void shutdown();
  std::vector<std::string> describeLinks() const;

  // The host arena (tree_arena.cc): whether this group should try one, with
  // which options, the one it set up (null: none, and why), and allReduce on it.
  bool arenaPossible() const;  // the same on every rank: all on one host
  bool arenaWanted() const;    // this rank's own settings allow it
  ArenaOptions arenaOptions() const;
  // Caller's thread, once, before any collective runs on the arena.
  void adoptArena(std::unique_ptr<HostArena> arena, std::string note);
  bool onArena() const { return arena_ != nullptr; }
  Error allReduceOnArena(const std::vector<TensorView>& tensors, const Reduction& op,
                         bool contributes, int* contributors);

  RankInfo info;
  TreeOptions options;
  CollectivePlan plan;  // set by start(), the same on every rank (Tree::create checks)
  std::vector<TreeNode> tree;

 private:
  // Runs `handler` as an event of this actor: at once when called on the
  // loop (or once the loop has finished: then nothing else runs events),
  // else posted to the loop. Caller's thread or loop; `this` must be owned
  // by a shared_ptr.
  template <typename Handler>
  void dispatch(Handler&& handler) {
    detail::Loop& loop = *loop_;
    if (loop.inLoop()) {
      Event event(*this);
      handler();
      return;
    }
    std::shared_ptr<TreeCore> self = shared_from_this();
    if (loop.postMade([&] {
          return [self, handler = std::forward<Handler>(handler)]() mutable {
            Event event(*self);
            handler();
          };
        })) {
      return;
    }
    Event event(*this);
    handler();
  }
  // Caller's thread: runs `handler` on the loop and waits until it has.
  void call(std::function<void()> handler);
  // Caller's thread: a Signal raised to 1 once `ready()` holds on the loop
  // (looked at after every event).
  std::shared_ptr<Signal> when(std::function<bool()> ready);
  // Loop: what the end of an event settles.
  void afterEvent();
  bool quiet(const Operation& op) const { return op.pendingWrites == 0 && !readsInFlight(); }
  void startOperation(const std::shared_ptr<Operation>& operation);
  void timeOut(const std::shared_ptr<Operation>& operation);
  std::chrono::milliseconds timeoutOf(const Operation& operation) const;
  void setBroken(Error error);
  bool onLoop() const { return loop_->ownsState(); }

  const TreeNode& me() const { return tree[info.rank]; }
  Error connectLinks(const std::vector<Member>& table);
  void onIntroduced(const std::shared_ptr<Pipe>& pipe, const LinkFrame& hello);
  Error checkTensors(const char* name, const std::vector<TensorView>& tensors) const;
  void endCollective();
  void readNext(Link& link);
  void onDescriptor(Link& link, const Error& error, Descriptor descriptor);
  void pump(Link& link);
  void consume(Link& link);
  // `sent` (if set) runs on the loop once the peer has the message.
  void write(Link& link, Message message, std::function<void()> sent = nullptr);
  void checkFinished();
  // `collective`: the one the failure is about, when another rank told us.
  void fail(Error error, uint64_t collective = 0);
  void failLink(Link& link, const Error& error);
  Link* linkTo(int rank);
  Message chunkMessage(size_t chunk, int contributors, bool withTensors) const;
  bool readsInFlight() const;
  void sendAbort(const Error& error, uint64_t collective);

  friend class Algorithm;  // its helpers reach the links and write()

  std::shared_ptr<Context> context_;
  detail::Loop* loop_{nullptr};  // the Context's: lives as long as context_
  std::shared_ptr<Listener> listener_;
  // Made on the caller's thread before the loop sees them; their roles and
  // pipes never change after start(), the rest is the loop's.
  std::vector<std::unique_ptr<Link>> links_;  // parent first (if any), children in order, ring-only links
  Link* ringNext_{nullptr};
  Link* ringPrev_{nullptr};
  std::vector<Link*> cube_;  // partner per doubling step; empty when not used
  std::mutex callers_;  // one collective at a time (callers only: the loop never takes it)
  int depth_{0};        // loop: events running (nested when a pipe calls back at once)
  std::vector<std::pair<std::function<bool()>, std::shared_ptr<Signal>>> waiters_;  // loop
  std::shared_ptr<Operation> operation_;  // loop
  std::atomic<bool> handOver_{false};
  std::atomic<bool> shutDown_{false};
  std::atomic<bool> closeAsked_{false};
  // The collective's number: the loop counts pipe collectives, the caller
  // arena ones (callers_ and each call's end order them); the loop reads it
  // for abort notices.
  std::atomic<uint64_t> sequence_{0};
  std::atomic<uint64_t> inCollective_{0};  // the collective this rank is in (0: none)
  Error broken_;  // set once, on the loop, before brokenSet_
  std::atomic<bool> brokenSet_{false};
  std::atomic<int> departedPeer_{-1};  // a neighbour that said goodbye (the first)
  bool closing_{false};  // loop
  int abortsInFlight_{0};  // loop
  Error acceptError_;      // loop, while links form
  bool rendezvousFileOwned_{false};
  std::chrono::microseconds pollWindow_{200};
  bool oneHost_{false};
  Error deferredAbort_;       // loop: a later collective's failure, told while ours runs
  uint64_t deferredCollective_{0};
  std::atomic<bool> deferred_{false};  // deferredAbort_ is set
  // Owned by the caller's thread, set once before any collective runs on
  // it; the loop sees it through arenaView_ (to interrupt it on failure).
  std::unique_ptr<HostArena> arena_;
  std::atomic<HostArena*> arenaView_{nullptr};
  std::string arenaNote_;
};

} // namespace actorpipe::group
