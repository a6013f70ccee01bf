#include <actorpipe/channels/cuda_xth/factory.h>

#include <actorpipe/channels/detail/cuda_context.h>
#include <actorpipe/channels/detail/pairing.h>
#ifdef ACTORPIPE_HAS_CUDA
#include <actorpipe/channels/detail/cuda_endpoint.h>
#endif

namespace actorpipe::channel::cuda_xth {
namespace {

class CudaXthContext final : public detail::CudaContextBase {
 public:
  CudaXthContext() : CudaContextBase(detail::processIdentity("cuda_xth"), "cuda_xth") {}

#ifdef ACTORPIPE_HAS_CUDA
  std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error& error) override {
    auto endpoint = detail::CudaEndpoint::make(detail::CudaEndpoint::Mode::kInProcess, error);
    if (endpoint) setup = detail::Pairing<detail::CudaEndpoint>::instance().offer(endpoint);
    return endpoint;
  }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string& setup, Error& error) override {
    auto accepted = detail::Pairing<detail::CudaEndpoint>::instance().claim(setup);
    if (!accepted) {
      error = ACTORPIPE_ERROR(NegotiationError,
                              "cuda_xth: the peer's setup names no endpoint of this process (the peer is not in this process)");
      return nullptr;
    }
    auto endpoint = detail::CudaEndpoint::make(detail::CudaEndpoint::Mode::kInProcess, error);
    if (endpoint) detail::CudaEndpoint::link(accepted, endpoint);
    return endpoint;
  }
#endif
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CudaXthContext>(); }

} // namespace actorpipe::channel::cuda_xth
