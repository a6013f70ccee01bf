#include <actorpipe/channels/xth/factory.h>

#include <utility>
#include <vector>

#include <actorpipe/channels/detail/pairing.h>
#include <actorpipe/channels/detail/pull_endpoint.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe::channel::xth {
namespace {

using detail::Pairing;
using detail::PullEndpoint;

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
    setup = Pairing<PullEndpoint>::instance().offer(endpoint);
    return endpoint;
  }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string& setup, Error& error) override {
    auto accepted = Pairing<PullEndpoint>::instance().claim(setup);
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
  std::string domain_{detail::processIdentity("xth")};
  std::string id_{"xth"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<XthContext>(); }

} // namespace actorpipe::channel::xth
