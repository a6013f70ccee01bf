#pragma once
// Host memory for the large tensors a node receives, kept when a tensor is
// let go and handed out again for the next tensor of the same size.
//
// Why: a fresh 64 MiB block comes from mmap and is paid again in page
// faults (zeroing) on first touch, on every message: a 64 MiB echo between
// two nodes ran at 1.7 GB/s against 5.9 for the pipe alone, which reuses its
// buffers. Tensors below `minimum` are not pooled (malloc reuses those).
// What the pool keeps is bounded by `capacity`; a block that would go over
// is freed. A tensor may outlive the pool: its block is then freed.
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include <actorpipe/actors/tensor.h>

namespace actorpipe::remote::detail {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  BufferPool(size_t capacity, size_t minimum) : capacity_(capacity), minimum_(minimum) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Host storage of `nbytes`, 64-byte aligned, contents undefined.
  std::shared_ptr<Storage> take(size_t nbytes);
  size_t cachedBytes();

 private:
  void give(void* block, size_t nbytes);

  const size_t capacity_;
  const size_t minimum_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_{0};
};

} // namespace actorpipe::remote::detail
