#pragma once
// Pairs the two endpoints of an in-process channel (xth, cuda_xth): the
// accepting side offers its endpoint under a fresh token, which travels to
// the pipe's own peer in the welcome; the connecting side claims it. A token
// is 128 random bits and used once; a peer outside this process can learn it
// but holds no endpoint here to claim it with. Process-wide (the two sides
// of such a pipe are usually in two Contexts), one table per endpoint type.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <actorpipe/runtime/detail/secure_random.h>

namespace actorpipe::channel::detail {

// The domain of such a channel: unique to this process (a pid can be
// reused, a random nonce is not; a forked child, same nonce, has another
// pid). Not a secret: any peer may learn and replay it (it is in our
// hello). It only keeps honest peers in other processes from choosing the
// channel; the tokens below are what stop dishonest ones.
inline std::string processIdentity(const std::string& channel) {
  static const std::string nonce = actorpipe::detail::secureRandomHex(8);
  return channel + "/pid:" + std::to_string(::getpid()) + "/" + nonce;
}

template <typename TEndpoint>
class Pairing {
 public:
  static Pairing& instance() {
    static auto* pairing = new Pairing();  // outlives every Context
    return *pairing;
  }
  std::string offer(const std::shared_ptr<TEndpoint>& endpoint) {
    std::string token = actorpipe::detail::secureRandomHex(16);
    std::lock_guard<std::mutex> guard(mutex_);
    purge();
    waiting_.emplace_back(token, endpoint);
    return token;
  }
  std::shared_ptr<TEndpoint> claim(const std::string& token) {
    std::lock_guard<std::mutex> guard(mutex_);
    std::shared_ptr<TEndpoint> found;
    size_t at = waiting_.size();
    for (size_t i = 0; i < waiting_.size(); ++i) {  // all of them: no early exit to time
      if (actorpipe::detail::constantTimeEqual(waiting_[i].first, token)) at = i;
    }
    if (at < waiting_.size()) {
      found = waiting_[at].second.lock();
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(at));
    }
    purge();
    return found;
  }

 private:
  // Endpoints whose pipe died unclaimed (a remote peer that negotiated the
  // channel from a forged domain).
  void purge() {
    std::vector<std::pair<std::string, std::weak_ptr<TEndpoint>>> live;
    for (auto& w : waiting_) {
      if (!w.second.expired()) live.push_back(std::move(w));
    }
    waiting_.swap(live);
  }
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::weak_ptr<TEndpoint>>> waiting_;
};

} // namespace actorpipe::channel::detail
