#pragma once
// What a transport context keeps of its connections and listeners (weakly,
// on its loop thread) so that shutdown() can close them all, and the
// blocking step of listen(): bind on the loop, then return.
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {

template <typename ConnectionT, typename ListenerT>
class Registry {
 public:
  // Loop thread. Set once shutdown began: what is made later fails with it.
  const Error& closed() const { return closed_; }

  void track(const std::shared_ptr<ConnectionT>& c) {
    // Drop the dead now and then, so a long-lived context does not grow.
    if (connections_.size() >= 64 && connections_.size() >= 2 * liveAfterPrune_) {
      std::vector<std::weak_ptr<ConnectionT>> live;
      for (auto& w : connections_) {
        if (!w.expired()) live.push_back(w);
      }
      connections_.swap(live);
      liveAfterPrune_ = connections_.size();
    }
    connections_.push_back(c);
  }
  void track(const std::shared_ptr<ListenerT>& l) { listeners_.push_back(l); }

  // Loop thread: closes everything with `reason`.
  void closeAll(const Error& reason) {
    if (!closed_) closed_ = reason;
    auto connections = std::move(connections_);
    auto listeners = std::move(listeners_);
    connections_.clear();
    listeners_.clear();
    for (auto& weak : connections) {
      if (auto c = weak.lock()) c->close(reason);
    }
    for (auto& weak : listeners) {
      if (auto l = weak.lock()) l->failInLoop(reason);
    }
  }

 private:
  Error closed_;
  std::vector<std::weak_ptr<ConnectionT>> connections_;
  size_t liveAfterPrune_{32};
  std::vector<std::weak_ptr<ListenerT>> listeners_;
};

// Runs `fn` on the loop and waits until it ran: listen() binds at once so
// that addr() is known when it returns. False if the loop has stopped.
inline bool runAndWait(Loop& loop, std::function<void()> fn) {
  std::promise<void> ran;
  if (!loop.post([&] {
        fn();
        ran.set_value();
      })) {
    return false;
  }
  ran.get_future().wait();
  return true;
}

} // namespace actorpipe::detail
