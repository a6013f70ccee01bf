// Element-wise reductions on Thrust. The host backend is chosen explicitly
// (thrust::host), so this compiles with g++ alone; a device tensor would take
// thrust::device under nvcc, which is why each entry point looks at the
// tensor's device before touching its memory.
// Without nvcc, Thrust's "device" must be the host too (this build has no
// CUDA); set before any Thrust header.
#ifndef THRUST_DEVICE_SYSTEM
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP
#endif

#include <actorpipe/actors/group/tensor.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#if ACTORPIPE_HAVE_THRUST
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/functional.h>
#include <thrust/transform.h>
#endif

namespace actorpipe::group {

namespace {

// The element-wise kernels: Thrust's host backend, or the standard library
// when Thrust is not installed (same operations, same order, same results).
#if ACTORPIPE_HAVE_THRUST
template <typename T> using Plus = thrust::plus<T>;
template <typename T> using Times = thrust::multiplies<T>;
template <typename... Args>
void transformElements(Args&&... args) {
  thrust::transform(thrust::host, std::forward<Args>(args)...);
}
template <typename T>
void fillElements(T* begin, T* end, T value) {
  thrust::fill(thrust::host, begin, end, value);
}
#else
template <typename T> using Plus = std::plus<T>;
template <typename T> using Times = std::multiplies<T>;
template <typename... Args>
void transformElements(Args&&... args) {
  std::transform(std::forward<Args>(args)...);
}
template <typename T>
void fillElements(T* begin, T* end, T value) {
  std::fill(begin, end, value);
}
#endif

template <typename T>
struct MinOf {
  T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
template <typename T>
struct MaxOf {
  T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
template <typename T>
struct DividedBy {
  T divisor;
  T operator()(const T& a) const { return a / divisor; }
};

void requireHost(const TensorView& t) {
  if (t.device.type != kCpuDeviceType) {
    throw std::invalid_argument("reductions on " + t.device.type +
                                " tensors need a build with that device's backend");
  }
}

// out = a op b, element by element (out may alias a or b: each element is
// read before it is written).
template <typename T>
void combineTyped(Reduction::Kind kind, const TensorView& out, const TensorView& first, const TensorView& second) {
  const T* a = static_cast<const T*>(first.data);
  const T* b = static_cast<const T*>(second.data);
  T* o = static_cast<T*>(out.data);
  const size_t n = out.count;
  switch (kind) {
    case Reduction::Kind::kSum:
    case Reduction::Kind::kAverage:
      transformElements(a, a + n, b, o, Plus<T>());
      break;
    case Reduction::Kind::kProduct:
      transformElements(a, a + n, b, o, Times<T>());
      break;
    case Reduction::Kind::kMin:
      transformElements(a, a + n, b, o, MinOf<T>());
      break;
    case Reduction::Kind::kMax:
      transformElements(a, a + n, b, o, MaxOf<T>());
      break;
    case Reduction::Kind::kCustom:
      break;
  }
}

template <typename F>
void byDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); break;
    case DType::kFloat64: f(double{}); break;
    case DType::kInt32: f(int32_t{}); break;
    case DType::kInt64: f(int64_t{}); break;
    case DType::kUint8: f(uint8_t{}); break;
  }
}

} // namespace

void Reduction::apply(const TensorView& accumulator, const TensorView& incoming) const {
  requireHost(accumulator);
  requireHost(incoming);
  if (kind_ == Kind::kCustom) {
    combine_(accumulator, incoming);
    return;
  }
  byDType(accumulator.dtype, [&](auto zero) {
    combineTyped<decltype(zero)>(kind_, accumulator, accumulator, incoming);
  });
}

void Reduction::applyInto(const TensorView& result, const TensorView& first, const TensorView& second) const {
  requireHost(result);
  requireHost(first);
  requireHost(second);
  if (kind_ == Kind::kCustom) {
    if (result.data == second.data && second.data != first.data) {
      throw std::invalid_argument("a custom reduction cannot write over its second operand");
    }
    if (result.data != first.data) std::memcpy(result.data, first.data, result.bytes());
    combine_(result, second);
    return;
  }
  byDType(result.dtype, [&](auto zero) {
    combineTyped<decltype(zero)>(kind_, result, first, second);
  });
}

void Reduction::finish(const TensorView& result, int contributors) const {
  if (kind_ != Kind::kAverage || contributors <= 1) return;
  requireHost(result);
  byDType(result.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* a = static_cast<T*>(result.data);
    transformElements(a, a + result.count, a, DividedBy<T>{static_cast<T>(contributors)});
  });
}

void Reduction::fillIdentity(const TensorView& tensor) const {
  requireHost(tensor);
  byDType(tensor.dtype, [&](auto zero) {
    using T = decltype(zero);
    T value{};
    switch (kind_) {
      case Kind::kProduct: value = T(1); break;
      case Kind::kMin: value = std::numeric_limits<T>::max(); break;
      case Kind::kMax: value = std::numeric_limits<T>::lowest(); break;
      default: value = T(0); break;
    }
    T* a = static_cast<T*>(tensor.data);
    fillElements(a, a + tensor.count, value);
  });
}

} // namespace actorpipe::group
