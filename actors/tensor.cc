#include <actorpipe/actors/tensor.h>

#include <actorpipe/runtime/cuda.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace actorpipe {

std::size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUint8: return 1;
  }
  throw std::invalid_argument("unknown dtype");
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUint8: return "uint8";
  }
  return "unknown";
}

bool dtypeFromName(const std::string& name, DType& dtype) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUint8}) {
    if (name == dtypeName(d)) {
      dtype = d;
      return true;
    }
  }
  return false;
}

// -- Storage ------------------------------------------------------------------

namespace {
constexpr std::size_t kHostAlignment = 64;
} // namespace

Storage::Storage(void* data, std::size_t nbytes, Device device,
                 Deleter deleter)
  : data_(data), nbytes_(nbytes), device_(device),
    deleter_(std::move(deleter)) {
}

Storage::~Storage() {
  if (deleter_)
    deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocateCpu(std::size_t nbytes) {
  // aligned_alloc wants a size that is a multiple of the alignment, and a
  // zero-byte tensor still needs a distinct, non-null block.
  auto rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (rounded == 0)
    rounded = kHostAlignment;
  void* block = std::aligned_alloc(kHostAlignment, rounded);
  if (block == nullptr)
    throw std::bad_alloc();
  return std::shared_ptr<Storage>(
    new Storage(block, nbytes, Device::cpu(), [](void* p) { std::free(p); }));
}

std::shared_ptr<Storage> Storage::adopt(void* data, std::size_t nbytes,
                                        Device device, Deleter deleter) {
  return std::shared_ptr<Storage>(
    new Storage(data, nbytes, device, std::move(deleter)));
}

// -- shape helpers ------------------------------------------------------------

std::int64_t elementCount(const Shape& shape) {
  std::int64_t count = 1;
  bool empty = false;
  for (auto extent : shape) {
    if (extent < 0)
      throw std::invalid_argument("negative tensor extent");
    if (extent == 0) {
      empty = true;  // zero elements, however large the other extents
      continue;
    }
    if (__builtin_mul_overflow(count, extent, &count))
      throw std::invalid_argument("tensor shape " + shapeToString(shape) + " has too many elements");
  }
  return empty ? 0 : count;
}

std::string shapeToString(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i)
    out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

// -- Tensor -------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype,
               std::size_t byteOffset)
  : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype),
    byteOffset_(byteOffset) {
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  auto bytes = static_cast<std::size_t>(elementCount(shape)) * dtypeSize(dtype);
  return Tensor(Storage::allocateCpu(bytes), std::move(shape), dtype, 0);
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  if (device.isCpu()) return empty(std::move(shape), dtype);
  if (device.type != kCudaDeviceType) {
    throw std::invalid_argument("Tensor::empty: no memory for tensors on " + device.toString());
  }
  const auto bytes = static_cast<std::size_t>(elementCount(shape)) * dtypeSize(dtype);
  Error error;
  void* memory = cuda::allocate(bytes, device.index, error);
  if (error) throw std::runtime_error("Tensor::empty on " + device.toString() + ": " + error.what());
  auto storage = Storage::adopt(memory, bytes, device, [](void* p) { (void)cuda::release(p); });
  return Tensor(std::move(storage), std::move(shape), dtype, 0);
}

Tensor Tensor::to(Device device) const {
  if (!storage_) throw std::logic_error("Tensor::to: an undefined tensor");
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  if (Error error = cuda::copy(out.rawData(), rawData(), nbytes())) {
    throw std::runtime_error("Tensor::to(" + device.toString() + ") from " + this->device().toString() + ": " +
                             error.what());
  }
  return out;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  auto result = empty(std::move(shape), dtype);
  std::memset(result.rawData(), 0, result.nbytes());
  return result;
}

Tensor Tensor::fromStorage(std::shared_ptr<Storage> storage, Shape shape,
                            DType dtype, std::size_t byteOffset) {
  if (!storage)
    throw std::invalid_argument("Tensor::fromStorage: null storage");
  auto bytes = static_cast<std::size_t>(elementCount(shape)) * dtypeSize(dtype);
  if (byteOffset + bytes > storage->nbytes())
    throw std::out_of_range("Tensor::fromStorage: view exceeds storage");
  return Tensor(std::move(storage), std::move(shape), dtype, byteOffset);
}

std::size_t Tensor::nbytes() const {
  return static_cast<std::size_t>(numel()) * dtypeSize(dtype_);
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : Device::cpu();
}

void* Tensor::rawData() const {
  if (!storage_)
    return nullptr;
  return static_cast<char*>(storage_->data()) + byteOffset_;
}

void Tensor::checkHostAccess(DType requested) const {
  if (!storage_)
    throw std::logic_error("Tensor::data on an undefined tensor");
  if (requested != dtype_)
    throw std::invalid_argument(std::string("Tensor::data: tensor holds ")
                                + dtypeName(dtype_) + ", asked for "
                                + dtypeName(requested));
  if (!device().isCpu())
    throw std::logic_error("Tensor::data: storage is on " + device().toString()
                           + ", not host memory");
}

Tensor Tensor::reshape(Shape shape) const {
  if (elementCount(shape) != numel())
    throw std::invalid_argument("Tensor::reshape: " + shapeToString(shape_)
                                + " cannot become " + shapeToString(shape));
  return Tensor(storage_, std::move(shape), dtype_, byteOffset_);
}

Tensor Tensor::clone() const {
  if (!storage_)
    return {};
  auto copy = empty(shape_, dtype_, device());
  if (device().isCpu()) {
    std::memcpy(copy.rawData(), rawData(), nbytes());
  } else if (Error error = cuda::copy(copy.rawData(), rawData(), nbytes())) {
    throw std::runtime_error("Tensor::clone on " + device().toString() + ": " + error.what());
  }
  return copy;
}

std::string Tensor::toString() const {
  if (!storage_)
    return "Tensor(undefined)";
  return "Tensor(" + std::string(dtypeName(dtype_)) + ", "
         + shapeToString(shape_) + ", " + device().toString() + ")";
}

} // namespace actorpipe
