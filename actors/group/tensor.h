#pragma once
// What collectives work on: a view of typed memory the caller owns, and the
// reductions that combine two such views element by element.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <actorpipe/runtime/device.h>

namespace actorpipe::group {

enum class DType { kF32, kF64, kI32, kI64, kU8 };

size_t dtypeSize(DType dtype);
const char* dtypeName(DType dtype);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };

// Caller-owned memory; collectives read it and write their results into it.
// `device` is where `data` lives: only CPU memory is reduced today, and a
// device tensor fails its collective with a LogicError instead of being
// touched as host memory.
struct Tensor {
  void* data{nullptr};
  size_t count{0};
  DType dtype{DType::kF32};
  Device device{kCpuDeviceType, 0};

  size_t bytes() const { return count * dtypeSize(dtype); }
};

template <typename T>
Tensor tensorOf(std::vector<T>& values) {
  return Tensor{values.data(), values.size(), DTypeOf<T>::value};
}
template <typename T>
Tensor tensorOf(T* values, size_t count) {
  return Tensor{values, count, DTypeOf<T>::value};
}

// How two contributions combine: `accumulator = accumulator op incoming`.
// Built-in reductions run on Thrust (host backend here; the dispatch on the
// tensor's device is where a CUDA backend plugs in). A custom reduction
// gets both views and must combine them in place into the first; it must
// be the same function on every rank, or results differ.
class Reduction {
 public:
  enum class Kind { kSum, kProduct, kMin, kMax, kAverage, kCustom };
  using Combine = std::function<void(const Tensor& accumulator, const Tensor& incoming)>;

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
  void apply(const Tensor& accumulator, const Tensor& incoming) const;
  // result = first op second, in one pass. `result` may be `first`, or (not
  // for custom reductions, which combine in place) `second`.
  void applyInto(const Tensor& result, const Tensor& first, const Tensor& second) const;
  bool isCustom() const { return kind_ == Kind::kCustom; }
  // After every contribution is in: the average's division.
  void finish(const Tensor& result, int contributors) const;
  // The value a rank that contributes nothing stands for, when nobody does.
  void fillIdentity(const Tensor& tensor) const;

 private:
  explicit Reduction(Kind kind) : kind_(kind) {}
  Kind kind_;
  Combine combine_;
};

} // namespace actorpipe::group
