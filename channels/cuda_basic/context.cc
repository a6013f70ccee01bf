#include <actorpipe/channels/cuda_basic/factory.h>

#include <actorpipe/channels/detail/cuda_context.h>
#ifdef ACTORPIPE_HAS_CUDA
#include <actorpipe/channels/detail/cuda_stager.h>
#endif

namespace actorpipe::channel::cuda_basic {
namespace {

class CudaBasicContext final : public detail::CudaContextBase {
 public:
  explicit CudaBasicContext(std::shared_ptr<Context> cpu)
      : CudaContextBase("any", "cuda_basic"), cpu_(std::move(cpu)) {}

  // Its bytes ride the connection, through the endpoint's host memory.
  bool sendsInline() const override { return true; }
  bool makesEndpoints() const override { return true; }

#ifdef ACTORPIPE_HAS_CUDA
  std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error& error) override {
    setup.clear();
    return detail::CudaStager::make(error);
  }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string&, Error& error) override {
    return detail::CudaStager::make(error);
  }
#endif

 private:
  std::shared_ptr<Context> cpu_;
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CudaBasicContext>(nullptr); }
std::shared_ptr<Context> create(std::shared_ptr<Context> cpuContext) {
  return std::make_shared<CudaBasicContext>(std::move(cpuContext));
}

} // namespace actorpipe::channel::cuda_basic
