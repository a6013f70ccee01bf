#include <actorpipe/channels/cuda_ipc/factory.h>

#include <actorpipe/channels/detail/cuda_context.h>
#include <actorpipe/channels/detail/host_identity.h>
#ifdef ACTORPIPE_HAS_CUDA
#include <actorpipe/channels/detail/cuda_endpoint.h>
#endif

namespace actorpipe::channel::cuda_ipc {
namespace {

class CudaIpcContext final : public detail::CudaContextBase {
 public:
  CudaIpcContext() : CudaContextBase(detail::sameHostDomain("cuda_ipc"), "cuda_ipc") {}
  // The acknowledgement page is opened in the peer process the kernel names.
  bool needsPeerProcess() const override { return true; }

#ifdef ACTORPIPE_HAS_CUDA
  std::shared_ptr<Endpoint> acceptEndpoint(std::string&, Error& error) override { return make(error); }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string&, Error& error) override { return make(error); }

 private:
  static std::shared_ptr<Endpoint> make(Error& error) {
    return detail::CudaEndpoint::make(detail::CudaEndpoint::Mode::kCrossProcess, error);
  }
#endif
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CudaIpcContext>(); }

} // namespace actorpipe::channel::cuda_ipc
