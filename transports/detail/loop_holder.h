#pragma once
// A transport context's loop: the one its Context lends it at registration
// (so every transport and pipe of a Context shares one thread, and a pipe can
// move between transports without changing threads), or, for a transport
// used on its own (an mpt lane, say), one of its own made on first use.
#include <memory>
#include <mutex>
#include <string>

#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::detail {

class LoopHolder {
 public:
  explicit LoopHolder(std::string name) : name_(std::move(name)) {}

  Loop& get() {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!loop_) {
      loop_ = std::make_shared<Loop>(name_);
      owned_ = true;
    }
    return *loop_;
  }
  // False when the transport already runs on a loop of its own.
  bool adopt(std::shared_ptr<Loop> loop) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (loop_) return loop_ == loop;
    loop_ = std::move(loop);
    return true;
  }
  // The loop if there is one yet (lent or made), without making one.
  std::shared_ptr<Loop> existing() {
    std::lock_guard<std::mutex> guard(mutex_);
    return loop_;
  }
  // A lent loop is stopped by its Context, not by us.
  void stopIfOwned() {
    std::shared_ptr<Loop> loop;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!owned_) return;
      loop = loop_;
    }
    loop->stop();
  }

 private:
  std::string name_;
  std::mutex mutex_;
  std::shared_ptr<Loop> loop_;
  bool owned_{false};
};

} // namespace actorpipe::detail
