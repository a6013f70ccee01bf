#pragma once
// Messages with CUDA tensors for the CUDA channel tests: tensors laid out in
// device allocations at chosen (odd) offsets, several per allocation, mixed
// with CPU tensors and payloads; each filled with a pattern and compared
// byte for byte after the trip. Only actorpipe's CUDA helpers
// (runtime/cuda.h) touch the device.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cuda_basic/factory.h>
#include <actorpipe/runtime/cuda.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

#include "../support/harness.h"

namespace testing {

// A context whose one channel for CUDA tensors is cuda_basic (basic for CPU
// ones), on one transport ("tcp" or "shm").
inline std::shared_ptr<actorpipe::Context> makeCudaBasicContext(const std::string& name,
                                                                const std::string& transport) {
  auto context = std::make_shared<actorpipe::Context>(actorpipe::ContextOptions().name(name));
  if (transport == "tcp") context->registerTransport(0, "tcp", actorpipe::transport::uv::create());
  if (transport == "shm") context->registerTransport(0, "shm", actorpipe::transport::shm::create());
  context->registerChannel(0, "basic", actorpipe::channel::basic::create());
  context->registerChannel(0, "cuda_basic", actorpipe::channel::cuda_basic::create());
  return context;
}

// Whether there is no CUDA device (then says why, for CTest's skip),
// asked in a child so that this process stays free of CUDA: CUDA does not
// survive fork, and the tests that ask this fork their peers.
inline bool noCudaDeviceAskedInChild() {
  Child probe = Child::spawn([](Child& self) {
    std::string why;
    int n = actorpipe::cuda::deviceCount(&why);
    self.send(n > 0 ? "ok" : why);
    return 0;
  });
  std::string said = probe.receive(std::chrono::seconds(60));
  probe.wait();
  if (said == "ok") return false;
  MESSAGE(said);
  std::printf("%s\n", said.c_str());
  return true;
}

// One tensor of a message: on the GPU (in allocation `block`, at `offset`),
// or on the CPU.
struct TensorSpec {
  bool cuda;
  size_t length;
  int block{0};
  size_t offset{0};
};

class CudaMessage {
 public:
  // Device allocations are sized to hold every tensor placed in them.
  CudaMessage(std::vector<TensorSpec> specs, int seed, cudaStream_t stream)
      : specs_(std::move(specs)), stream_(stream) {
    std::vector<size_t> sizes;
    for (const auto& s : specs_) {
      if (!s.cuda) continue;
      if (sizes.size() <= static_cast<size_t>(s.block)) sizes.resize(s.block + 1, 0);
      sizes[s.block] = std::max(sizes[s.block], s.offset + s.length + 1);
    }
    for (size_t size : sizes) {
      actorpipe::Error e;
      blocks_.push_back(actorpipe::cuda::allocate(size, 0, e));
      REQUIRE_MESSAGE(!e, e.what());
    }
    for (size_t i = 0; i < specs_.size(); ++i) {
      expected_.push_back(pattern(specs_[i].length, seed + static_cast<int>(i)));
      cpu_.emplace_back(specs_[i].cuda ? 0 : specs_[i].length);
    }
  }
  ~CudaMessage() {
    for (void* b : blocks_) (void)actorpipe::cuda::release(b);
  }
  CudaMessage(const CudaMessage&) = delete;
  CudaMessage& operator=(const CudaMessage&) = delete;

  void* ptr(size_t i) const { return static_cast<char*>(blocks_[specs_[i].block]) + specs_[i].offset; }
  const std::vector<TensorSpec>& specs() const { return specs_; }

  // Writes the patterns into the tensors (blocking).
  void fill() {
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].cuda) {
        REQUIRE(!actorpipe::cuda::copy(ptr(i), expected_[i].data(), specs_[i].length));
      } else {
        cpu_[i] = expected_[i];
      }
    }
  }
  // Overwrites every tensor (a sender reusing its memory).
  void scribble() {
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].cuda) {
        REQUIRE(!actorpipe::cuda::memsetAsync(ptr(i), 0xA5, specs_[i].length, stream_));
      } else {
        std::memset(cpu_[i].data(), 0xA5, cpu_[i].size());
      }
    }
    REQUIRE(!actorpipe::cuda::synchronize(stream_));
  }
  actorpipe::Message message(const std::string& metadata) {
    actorpipe::Message m;
    m.metadata = metadata;
    for (size_t i = 0; i < specs_.size(); ++i) {
      actorpipe::Message::Tensor t;
      t.length = specs_[i].length;
      if (specs_[i].cuda) {
        t.buffer = actorpipe::CudaBuffer{ptr(i), stream_, 0};
      } else {
        t.buffer = actorpipe::CpuBuffer{cpu_[i].data()};
      }
      m.tensors.push_back(std::move(t));
    }
    return m;
  }
  actorpipe::Allocation allocation() {
    actorpipe::Allocation a;
    for (size_t i = 0; i < specs_.size(); ++i) {
      actorpipe::Allocation::Tensor t;
      if (specs_[i].cuda) {
        t.buffer = actorpipe::CudaBuffer{ptr(i), stream_, 0};
      } else {
        t.buffer = actorpipe::CpuBuffer{cpu_[i].data()};
      }
      a.tensors.push_back(std::move(t));
    }
    return a;
  }
  // Whether every tensor holds `other`'s patterns (after a read). The
  // bytes around each CUDA tensor stay untouched too (checked by the
  // caller's layout: neighbours are tensors of their own).
  std::string compare(const CudaMessage& other) const {
    for (size_t i = 0; i < specs_.size(); ++i) {
      std::vector<uint8_t> got(specs_[i].length);
      if (specs_[i].cuda) {
        if (auto e = actorpipe::cuda::copy(got.data(), ptr(i), got.size())) return e.what();
      } else {
        got = cpu_[i];
      }
      if (got != other.expected_[i]) return "tensor " + std::to_string(i) + " of " + std::to_string(specs_[i].length) +
                                            " bytes differs";
    }
    return std::string();
  }

 private:
  std::vector<TensorSpec> specs_;
  cudaStream_t stream_;
  std::vector<void*> blocks_;
  std::vector<std::vector<uint8_t>> expected_;
  std::vector<std::vector<uint8_t>> cpu_;
};

// The layouts every CUDA channel test moves.
inline std::vector<std::vector<TensorSpec>> cudaLayouts() {
  std::vector<std::vector<TensorSpec>> out;
  for (size_t size : {size_t{1}, size_t{3}, size_t{4097}, (size_t{1} << 20) + 5, size_t{64} << 20,
                      size_t{256} << 20}) {
    out.push_back({{true, size, 0, 13}});  // odd offset inside its allocation
  }
  // Two tensors sharing one allocation, a zero-length one, a CPU one between.
  out.push_back({{true, 1000, 0, 7}, {false, 300}, {true, 0, 1, 0}, {true, 5000, 0, 2048 + 1}});
  return out;
}

}  // namespace testing
