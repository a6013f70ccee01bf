#include <actorpipe/actors/tensor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace actorpipe {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32: return 4;
    case DType::float64: return 8;
    case DType::int32: return 4;
    case DType::int64: return 8;
    case DType::uint8: return 1;
  }
  throw std::invalid_argument("unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::uint8: return "uint8";
  }
  return "unknown";
}

bool dtype_from_name(const std::string& name, DType& dtype) {
  for (DType d : {DType::float32, DType::float64, DType::int32, DType::int64, DType::uint8}) {
    if (name == dtype_name(d)) {
      dtype = d;
      return true;
    }
  }
  return false;
}

// -- Storage ------------------------------------------------------------------

namespace {
constexpr std::size_t host_alignment = 64;
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

std::shared_ptr<Storage> Storage::allocate_cpu(std::size_t nbytes) {
  // aligned_alloc wants a size that is a multiple of the alignment, and a
  // zero-byte tensor still needs a distinct, non-null block.
  auto rounded = (nbytes + host_alignment - 1) / host_alignment * host_alignment;
  if (rounded == 0)
    rounded = host_alignment;
  void* block = std::aligned_alloc(host_alignment, rounded);
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

std::int64_t element_count(const Shape& shape) {
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
      throw std::invalid_argument("tensor shape " + shape_to_string(shape) + " has too many elements");
  }
  return empty ? 0 : count;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i)
    out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

// -- Tensor -------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype,
               std::size_t byte_offset)
  : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype),
    byte_offset_(byte_offset) {
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  auto bytes = static_cast<std::size_t>(element_count(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate_cpu(bytes), std::move(shape), dtype, 0);
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  auto result = empty(std::move(shape), dtype);
  std::memset(result.raw_data(), 0, result.nbytes());
  return result;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Shape shape,
                            DType dtype, std::size_t byte_offset) {
  if (!storage)
    throw std::invalid_argument("Tensor::from_storage: null storage");
  auto bytes = static_cast<std::size_t>(element_count(shape)) * dtype_size(dtype);
  if (byte_offset + bytes > storage->nbytes())
    throw std::out_of_range("Tensor::from_storage: view exceeds storage");
  return Tensor(std::move(storage), std::move(shape), dtype, byte_offset);
}

std::size_t Tensor::nbytes() const {
  return static_cast<std::size_t>(numel()) * dtype_size(dtype_);
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : Device::cpu();
}

void* Tensor::raw_data() const {
  if (!storage_)
    return nullptr;
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

void Tensor::check_host_access(DType requested) const {
  if (!storage_)
    throw std::logic_error("Tensor::data on an undefined tensor");
  if (requested != dtype_)
    throw std::invalid_argument(std::string("Tensor::data: tensor holds ")
                                + dtype_name(dtype_) + ", asked for "
                                + dtype_name(requested));
  if (!device().isCpu())
    throw std::logic_error("Tensor::data: storage is on " + device().toString()
                           + ", not host memory");
}

Tensor Tensor::reshape(Shape shape) const {
  if (element_count(shape) != numel())
    throw std::invalid_argument("Tensor::reshape: " + shape_to_string(shape_)
                                + " cannot become " + shape_to_string(shape));
  return Tensor(storage_, std::move(shape), dtype_, byte_offset_);
}

Tensor Tensor::clone() const {
  if (!storage_)
    return {};
  if (!device().isCpu())
    throw std::logic_error("Tensor::clone: only host tensors can be cloned here");
  auto copy = empty(shape_, dtype_);
  std::memcpy(copy.raw_data(), raw_data(), nbytes());
  return copy;
}

std::string Tensor::to_string() const {
  if (!storage_)
    return "Tensor(undefined)";
  return "Tensor(" + std::string(dtype_name(dtype_)) + ", "
         + shape_to_string(shape_) + ", " + device().toString() + ")";
}

} // namespace actorpipe
