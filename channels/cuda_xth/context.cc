#include <actorpipe/channels/cuda_xth/factory.h>

#include <utility>
#include <vector>

#include <actorpipe/channels/detail/pairing.h>
#include <actorpipe/runtime/cuda.h>
#include <actorpipe/runtime/device.h>
#ifdef ACTORPIPE_HAS_CUDA
#include <actorpipe/channels/detail/cuda_endpoint.h>
#endif

namespace actorpipe::channel::cuda_xth {
namespace {

class CudaXthContext final : public Context {
 public:
  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  // Whether the driver shows a GPU, asked without starting CUDA: a
  // process starts CUDA only once it moves a CUDA tensor (a process that
  // forks CUDA children must not start it early; one that moves none should
  // not pay for it). Where the runtime then fails, that transfer fails with
  // a CudaError.
  bool isViable() const override { return cuda::driverShowsDevice(); }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }

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

 private:
  std::vector<std::string> deviceTypes_{kCudaDeviceType};
  std::string domain_{detail::processIdentity("cuda_xth")};
  std::string id_{"cuda_xth"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CudaXthContext>(); }

} // namespace actorpipe::channel::cuda_xth
