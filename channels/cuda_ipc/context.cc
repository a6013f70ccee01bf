#include <actorpipe/channels/cuda_ipc/factory.h>

#include <utility>
#include <vector>

#include <actorpipe/channels/detail/host_identity.h>
#include <actorpipe/runtime/cuda.h>
#include <actorpipe/runtime/device.h>
#ifdef ACTORPIPE_HAS_CUDA
#include <actorpipe/channels/detail/cuda_endpoint.h>
#endif

namespace actorpipe::channel::cuda_ipc {
namespace {

class CudaIpcContext final : public Context {
 public:
  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  // Asked without starting CUDA (see cuda_xth).
  bool isViable() const override { return cuda::driverShowsDevice(); }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }
  // The acknowledgement page is opened in the peer process the kernel names.
  bool needsPeerProcess() const override { return true; }

#ifdef ACTORPIPE_HAS_CUDA
  std::shared_ptr<Endpoint> acceptEndpoint(std::string&, Error& error) override { return make(error); }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string&, Error& error) override { return make(error); }
#endif

 private:
#ifdef ACTORPIPE_HAS_CUDA
  static std::shared_ptr<Endpoint> make(Error& error) {
    return detail::CudaEndpoint::make(detail::CudaEndpoint::Mode::kCrossProcess, error);
  }
#endif
  std::vector<std::string> deviceTypes_{kCudaDeviceType};
  std::string domain_{detail::sameHostDomain("cuda_ipc")};
  std::string id_{"cuda_ipc"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CudaIpcContext>(); }

} // namespace actorpipe::channel::cuda_ipc
