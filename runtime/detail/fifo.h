#pragma once
// detail::Fifo<T>: a first-in first-out queue in one ring of slots that
// grows (doubling) and never shrinks.
//
// Why not std::deque: libstdc++'s deque frees a block when its last element
// is popped and allocates one when a push reaches the end, so a queue that
// holds one or two operations at a time (a pipe's pending writes, a
// connection's reads) allocates every few messages forever. A Fifo allocates
// only while it grows to the most it ever held. Loop thread only, like the
// state it holds.
#include <cstddef>
#include <utility>
#include <vector>

namespace actorpipe::detail {

template <typename T>
class Fifo {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  T& front() { return slots_[head_]; }
  T& back() { return slots_[(head_ + size_ - 1) & mask()]; }
  // The i-th element from the front.
  T& operator[](size_t i) { return slots_[(head_ + i) & mask()]; }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & mask()] = std::move(value);
    ++size_;
  }
  // The front element, moved out; its slot is left moved-from until reused.
  T takeFront() {
    T value = std::move(slots_[head_]);
    head_ = (head_ + 1) & mask();
    --size_;
    return value;
  }
  void popFront() { (void)takeFront(); }
  // Every element, moved out in order; the ring keeps its capacity.
  template <typename Fn>
  void drain(Fn&& fn) {
    while (size_ > 0) fn(takeFront());
  }
  void clear() {
    while (size_ > 0) popFront();
  }

  template <typename Fn>
  void forEach(Fn&& fn) {
    for (size_t i = 0; i < size_; ++i) fn((*this)[i]);
  }

 private:
  size_t mask() const { return slots_.size() - 1; }
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 4 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two in size
  size_t head_{0};
  size_t size_{0};
};

}  // namespace actorpipe::detail
