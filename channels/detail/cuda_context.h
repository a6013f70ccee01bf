#pragma once
// What the CUDA channels' contexts (cuda_xth, cuda_ipc) share: they carry
// "cuda" tensors out of band, and are viable where the NVIDIA driver shows a
// GPU, asked without starting CUDA: a process starts CUDA only once it moves
// a CUDA tensor (one that forks CUDA children must not start it early; one
// that moves none should not pay for it: ~6 files and a thread, measured on
// the H100). Where the runtime then fails, that transfer fails with a
// CudaError. Each channel adds its endpoints.
#include <string>
#include <utility>
#include <vector>

#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/cuda.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe::channel::detail {

class CudaContextBase : public Context {
 public:
  CudaContextBase(std::string domain, std::string id) : domain_(std::move(domain)), id_(std::move(id)) {}
  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  bool isViable() const override { return cuda::driverShowsDevice(); }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }

 private:
  std::vector<std::string> deviceTypes_{kCudaDeviceType};
  std::string domain_;
  std::string id_;
};

} // namespace actorpipe::channel::detail
