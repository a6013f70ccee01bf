#include <actorpipe/channels/basic/factory.h>

#include <actorpipe/runtime/device.h>

namespace actorpipe::channel::basic {
namespace {

class BasicContext final : public Context {
 public:
  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  // Nothing of its own to release: its bytes live on the pipes' connections.
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return true; }

 private:
  std::vector<std::string> deviceTypes_{kCpuDeviceType};
  std::string domain_{"any"};
  std::string id_{"basic"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<BasicContext>(); }

} // namespace actorpipe::channel::basic
