#include <actorpipe/actors/remote/detail/buffer_pool.h>

#include <cstdlib>
#include <new>

namespace actorpipe::remote::detail {
namespace {
constexpr size_t kAlignment = 64;
}

BufferPool::~BufferPool() {
  for (auto& entry : free_) std::free(entry.second);
}

std::shared_ptr<Storage> BufferPool::take(size_t nbytes) {
  if (nbytes < minimum_) return Storage::allocateCpu(nbytes);
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto it = free_.find(nbytes);
    if (it != free_.end()) {
      block = it->second;
      cached_ -= nbytes;
      free_.erase(it);
    }
  }
  if (block == nullptr) {
    block = std::aligned_alloc(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
    if (block == nullptr) throw std::bad_alloc();
  }
  std::weak_ptr<BufferPool> pool = shared_from_this();
  return Storage::adopt(block, nbytes, Device::cpu(), [pool, nbytes](void* p) {
    if (auto self = pool.lock()) {
      self->give(p, nbytes);
    } else {
      std::free(p);
    }
  });
}

void BufferPool::give(void* block, size_t nbytes) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (cached_ + nbytes <= capacity_) {
      free_.emplace(nbytes, block);
      cached_ += nbytes;
      return;
    }
  }
  std::free(block);
}

size_t BufferPool::cachedBytes() {
  std::lock_guard<std::mutex> guard(mutex_);
  return cached_;
}

} // namespace actorpipe::remote::detail
