#pragma once

// The reference point the channel is measured against: the textbook bounded
// queue, one std::mutex and two std::condition_variables, notifying on every
// push and pop.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

template <class T>
class BaselineQueue {
public:
  explicit BaselineQueue(std::size_t capacity) : capacity_(capacity) {}

  void push(T item) {
    {
      std::unique_lock<std::mutex> guard(mutex_);
      notFull_.wait(guard, [&] { return items_.size() < capacity_; });
      items_.push_back(std::move(item));
    }
    notEmpty_.notify_one();
  }

  T pop() {
    T item;
    {
      std::unique_lock<std::mutex> guard(mutex_);
      notEmpty_.wait(guard, [&] { return !items_.empty(); });
      item = std::move(items_.front());
      items_.pop_front();
    }
    notFull_.notify_one();
    return item;
  }

private:
  std::mutex mutex_;
  std::condition_variable notEmpty_;
  std::condition_variable notFull_;
  std::deque<T> items_;
  std::size_t capacity_;
};
