#include <actorpipe/channels/xth/factory.h>

#include <unistd.h>

#include <mutex>
#include <utility>
#include <vector>

#include <actorpipe/channels/detail/pull_endpoint.h>
#include <actorpipe/runtime/detail/secure_random.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe::channel::xth {
namespace {

using actorpipe::detail::constantTimeEqual;
using actorpipe::detail::secureRandomHex;
using detail::PullEndpoint;

// Unique to this process: a pid can be reused, a random nonce is not; and a
// forked child (same nonce) has another pid. Not a secret: any peer may
// learn and replay it (it is in our hello). It only keeps honest peers in
// other processes from choosing xth; the endpoint tokens below are what
// stop dishonest ones.
std::string processIdentity() {
  static const std::string nonce = secureRandomHex(8);
  return "xth/pid:" + std::to_string(::getpid()) + "/" + nonce;
}

// The accepting side's endpoints that wait for their connecting side, by
// token. Process-wide: the two sides of an xth pipe are usually in two
// Contexts. A token is 128 random bits, travels only to the pipe's own peer
// (in the welcome) and is used once; a peer outside this process can learn
// it but holds no endpoint here to claim it with.
class Pairing {
 public:
  static Pairing& instance() {
    static auto* pairing = new Pairing();  // outlives every Context
    return *pairing;
  }
  std::string offer(const std::shared_ptr<PullEndpoint>& endpoint) {
    std::string token = secureRandomHex(16);
    std::lock_guard<std::mutex> guard(mutex_);
    purge();
    waiting_.emplace_back(token, endpoint);
    return token;
  }
  std::shared_ptr<PullEndpoint> claim(const std::string& token) {
    std::lock_guard<std::mutex> guard(mutex_);
    std::shared_ptr<PullEndpoint> found;
    size_t at = waiting_.size();
    for (size_t i = 0; i < waiting_.size(); ++i) {  // all of them: no early exit to time
      if (constantTimeEqual(waiting_[i].first, token)) at = i;
    }
    if (at < waiting_.size()) {
      found = waiting_[at].second.lock();
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(at));
    }
    purge();
    return found;
  }

 private:
  // Endpoints whose pipe died unclaimed (a remote peer that negotiated xth).
  void purge() {
    std::vector<std::pair<std::string, std::weak_ptr<PullEndpoint>>> live;
    for (auto& w : waiting_) {
      if (!w.second.expired()) live.push_back(std::move(w));
    }
    waiting_.swap(live);
  }
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::weak_ptr<PullEndpoint>>> waiting_;
};

class XthContext final : public Context {
 public:
  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }

  std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error&) override {
    auto endpoint = make();
    setup = Pairing::instance().offer(endpoint);
    return endpoint;
  }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string& setup, Error& error) override {
    auto accepted = Pairing::instance().claim(setup);
    if (!accepted) {
      error = ACTORPIPE_ERROR(NegotiationError,
                              "xth: the peer's setup names no endpoint of this process (the peer is not in this process)");
      return nullptr;
    }
    auto endpoint = make();
    PullEndpoint::link(accepted, endpoint);
    return endpoint;
  }

 private:
  static std::shared_ptr<PullEndpoint> make() {
    // Small tensors are cheaper inline than described, pulled and acknowledged.
    return std::make_shared<PullEndpoint>(detail::PullFormat::kInProcess, "xth", 16 * 1024);
  }
  std::vector<std::string> deviceTypes_{kCpuDeviceType};
  std::string domain_{processIdentity()};
  std::string id_{"xth"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<XthContext>(); }

} // namespace actorpipe::channel::xth
