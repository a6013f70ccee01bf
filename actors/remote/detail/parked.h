#pragma once
// What a remote node may park at one of the library's owners (a channel's,
// a workqueue's): reads of an empty channel, writes to a full one, a
// worker's reads while no job waits. Each holds its answer's promise
// there, a write its item, and a peer's message is done with (its window
// credit returned) once parked, so the window does not bound them:
// NodeOptions::maxParkedPerPeer and maxParkedBytesPerPeer per peer do (a
// peer: one link, peerLinkOf).
//
// A token per parked request, kept in its callback: the counts drop when
// the callback goes, run or dropped, on whatever thread the channel lets
// go of it (so they are atomic). The book itself is the owner actor's.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <thread>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/actor_control_block.hpp>

#include <actorpipe/actors/remote/node.h>

namespace actorpipe::remote::detail {

// The link a peer's actor speaks on (its proxy's, a number unique in the
// process), or 0 for this node's own actors. Shares are counted by link,
// not by the CAF node id a peer's HELLO states: a peer with the secret
// that claims an honest node's id gets a share of its own. A null sender
// is 0 too: callers refuse anonymous requests first.
uint64_t peerLinkOf(const caf::strong_actor_ptr& sender);

// The bytes a peer's message took on the wire (tensors included), for the
// message an actor is handling now; 0 for one of this node's.
size_t peerMessageBytes(const caf::mailbox_element* element);

class ParkedBook {
 public:
  using Token = std::shared_ptr<void>;

  explicit ParkedBook(size_t perNode = 0, size_t bytesPerNode = 0)
      : perNode_(perNode), bytesPerNode_(bytesPerNode) {}

  // A token for one more of `peer`'s requests, holding `bytes`, or null:
  // the peer has perNode parked, or its parked bytes and these would pass
  // bytesPerNode (one request alone may pass it, as one message larger
  // than the window goes alone). `forgetDeparted()` lets go of parked
  // requests whose requesters went; it walks every parked request, so it
  // is called only when the peer is at its bound, departed() was said
  // since, and not within 10 ms of the last walk (a peer that ends an
  // actor and asks again, over and over, gets one walk per 10 ms).
  template <class Forget>
  Token take(uint64_t peer, size_t bytes, Forget&& forgetDeparted) {
    // Entries of peers with nothing parked go before the map outgrows the
    // links to this node: once it holds 256, or twice what the last such
    // walk kept (so many peers with something parked cost a walk per
    // doubling, not one per request).
    if (counts_.size() >= pruneAt_) {
      for (auto it = counts_.begin(); it != counts_.end();) {
        it = it->second->requests.load(std::memory_order_relaxed) == 0 ? counts_.erase(it) : std::next(it);
      }
      pruneAt_ = std::max<size_t>(kPruneAt, 2 * counts_.size());
    }
    auto& counts = counts_[peer];
    if (!counts) counts = std::make_shared<Counts>();
    if (!fits(*counts, bytes) && departed_) {
      auto now = std::chrono::steady_clock::now();
      if (now - lastWalk_ >= std::chrono::milliseconds(10)) {
        departed_ = false;
        lastWalk_ = now;
        forgetDeparted();
      }
    }
    if (!fits(*counts, bytes)) return nullptr;
    counts->requests.fetch_add(1, std::memory_order_relaxed);
    counts->bytes.fetch_add(bytes, std::memory_order_relaxed);
    // Not null (a null one would read as none): it points at the counts.
    auto held = counts;
    return Token(held.get(), [held, bytes](void*) {
      held->requests.fetch_sub(1, std::memory_order_relaxed);
      held->bytes.fetch_sub(bytes, std::memory_order_relaxed);
    });
  }

  // A requester went: what it parked may be let go.
  void departed() { departed_ = true; }
  size_t perNode() const { return perNode_; }
  // Peers with an entry (those with nothing parked go, see take()).
  size_t peersKept() const { return counts_.size(); }

 private:
  struct Counts {
    std::atomic<size_t> requests{0};
    std::atomic<size_t> bytes{0};
  };

  bool fits(const Counts& counts, size_t bytes) const {
    if (counts.requests.load(std::memory_order_relaxed) >= perNode_) return false;
    size_t held = counts.bytes.load(std::memory_order_relaxed);
    return held == 0 || (bytes <= bytesPerNode_ && held <= bytesPerNode_ - bytes);
  }

  static constexpr size_t kPruneAt = 256;
  size_t perNode_;
  size_t bytesPerNode_;
  std::map<uint64_t, std::shared_ptr<Counts>> counts_;
  size_t pruneAt_ = kPruneAt;
  bool departed_ = false;
  std::chrono::steady_clock::time_point lastWalk_{};
};

// For a blocking caller (RemoteChannel, RemoteWorker) refused as one too
// many: others of its node wait at the owner already. The call still
// blocks, as a local one would; this waits `backoff` (1 ms doubling to
// 100 ms) and says to ask again. False for any other error.
inline bool waitIfBusy(const caf::error& error, std::chrono::milliseconds& backoff) {
  if (!isError(error, RemoteError::kTooManyRequests)) return false;
  std::this_thread::sleep_for(backoff);
  backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  return true;
}

} // namespace actorpipe::remote::detail
