#pragma once
// How a pipe that moves to a better transport is found again: the accepting
// pipe registers here under a random token, which travels in its welcome;
// the connection that arrives on the better transport presents it in a JOIN
// frame. One registry per Listener, shared by its transport listeners.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <actorpipe/runtime/detail/secure_random.h>

namespace actorpipe::detail {

class PipeCore;

class JoinRegistry {
 public:
  explicit JoinRegistry(std::map<std::string, std::string> addresses)
      : addresses_(std::move(addresses)) {}

  // Transport name -> address this listener listens on.
  const std::map<std::string, std::string>& addresses() const { return addresses_; }

  uint64_t expect(std::weak_ptr<PipeCore> pipe) {
    std::lock_guard<std::mutex> guard(mutex_);
    uint64_t token;
    do {
      token = secureRandom64();  // unguessable: it lets a connection take over a pipe
    } while (token == 0 || pending_.count(token));
    pending_[token] = std::move(pipe);
    return token;
  }
  std::shared_ptr<PipeCore> claim(uint64_t token) {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = pending_.find(token);
    if (it == pending_.end()) return nullptr;
    auto pipe = it->second.lock();
    pending_.erase(it);
    return pipe;
  }
  void forget(uint64_t token) {
    std::lock_guard<std::mutex> guard(mutex_);
    pending_.erase(token);
  }

 private:
  std::map<std::string, std::string> addresses_;
  std::mutex mutex_;
  std::map<uint64_t, std::weak_ptr<PipeCore>> pending_;
};

} // namespace actorpipe::detail
