#pragma once
// What collectives work on: a view of typed memory the caller owns, and the
// reductions that combine two such views element by element.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <actorpipe/actors/tensor.h>  // the one DType, and the Tensor collectives also take
#include <actorpipe/runtime/device.h>

namespace actorpipe::group {

using ::actorpipe::DType;
using ::actorpipe::dtypeName;
using ::actorpipe::dtypeOf;
using ::actorpipe::dtypeSize;

// Caller-owned memory; collectives read it and write their results into it.
// `device` is where `data` lives: only CPU memory is reduced today, and a
// device tensor fails its collective with a LogicError instead of being
// touched as host memory.
//
// Not a second Tensor: a view, named so. An actorpipe::Tensor converts to
// one (its elements, in place), so every collective takes the library's
// Tensor as it is; the Tensor must outlive the collective, as the memory of
// any view must.
struct TensorView {
  void* data{nullptr};
  size_t count{0};
  DType dtype{DType::kFloat32};
  Device device{kCpuDeviceType, 0};

  TensorView() = default;
  TensorView(void* data, size_t count, DType dtype, Device device = Device::cpu())
      : data(data), count(count), dtype(dtype), device(std::move(device)) {}
  /* implicit */ TensorView(const ::actorpipe::Tensor& tensor)
      : data(tensor.rawData()),
        count(static_cast<size_t>(tensor.numel())),
        dtype(tensor.dtype()),
        device(tensor.device()) {}

  size_t bytes() const { return count * dtypeSize(dtype); }
};

template <typename T>
TensorView tensorOf(std::vector<T>& values) {
  return TensorView{values.data(), values.size(), dtypeOf<T>()};
}
template <typename T>
TensorView tensorOf(T* values, size_t count) {
  return TensorView{values, count, dtypeOf<T>()};
}

// How two contributions combine: `accumulator = accumulator op incoming`.
// Built-in reductions run on Thrust (host backend here; the dispatch on the
// tensor's device is where a CUDA backend plugs in). A custom reduction
// gets both views and must combine them in place into the first; it must
// be the same function on every rank, or results differ.
class Reduction {
 public:
  enum class Kind { kSum, kProduct, kMin, kMax, kAverage, kCustom };
  using Combine = std::function<void(const TensorView& accumulator, const TensorView& incoming)>;

  static Reduction sum() { return Reduction(Kind::kSum); }
  static Reduction product() { return Reduction(Kind::kProduct); }
  static Reduction min() { return Reduction(Kind::kMin); }
  static Reduction max() { return Reduction(Kind::kMax); }
  // Sum, then divided by the number of contributing ranks (integer division
  // for integer tensors).
  static Reduction average() { return Reduction(Kind::kAverage); }
  static Reduction custom(Combine combine) {
    Reduction r(Kind::kCustom);
    r.combine_ = std::move(combine);
    return r;
  }

  Kind kind() const { return kind_; }
  // accumulator = accumulator op incoming (same dtype, same count).
  void apply(const TensorView& accumulator, const TensorView& incoming) const;
  // result = first op second, in one pass. `result` may be `first`, or (not
  // for custom reductions, which combine in place) `second`.
  void applyInto(const TensorView& result, const TensorView& first, const TensorView& second) const;
  bool isCustom() const { return kind_ == Kind::kCustom; }
  // After every contribution is in: the average's division.
  void finish(const TensorView& result, int contributors) const;
  // The value a rank that contributes nothing stands for, when nobody does.
  void fillIdentity(const TensorView& tensor) const;

 private:
  explicit Reduction(Kind kind) : kind_(kind) {}
  Kind kind_;
  Combine combine_;
};

} // namespace actorpipe::group
