#pragma once
// The endpoint of channels where the receiver pulls: xth (same process,
// memcpy) and cma (same host, process_vm_readv). The sender only describes
// where its bytes are; the receiver copies them straight into its
// allocation, then stores the transfer's sequence number into the sender's
// acknowledgement word, and only then reports its read done. So a receiver
// that exits right after its read never makes the sender's write fail.
//
// The sender learns of acknowledgements by polling the word: every turn of
// its loop while busy, and every millisecond while transfers are pending and
// the loop sleeps. No extra socket, no extra round trip.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::channel::detail {

// How the receiver reaches the sender's memory.
class MemoryAccess {
 public:
  virtual ~MemoryAccess() = default;
  virtual Error read(pid_t pid, void* local, uintptr_t remote, size_t length) = 0;
  // Stores `value` into the std::atomic<uint64_t> at `remote`.
  virtual Error store(pid_t pid, uintptr_t remote, uint64_t value) = 0;
};

std::shared_ptr<MemoryAccess> inProcessAccess();
std::shared_ptr<MemoryAccess> crossProcessAccess();

class PullEndpoint final : public Endpoint,
                           public actorpipe::detail::Loop::Poller,
                           public std::enable_shared_from_this<PullEndpoint> {
 public:
  PullEndpoint(std::shared_ptr<MemoryAccess> access, std::string channel, size_t inlineBelow);
  ~PullEndpoint() override;

  std::string send(const void* ptr, size_t length, done_fn done) override;
  void recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) override;
  void close(const Error& reason) override;
  void attach(actorpipe::detail::Loop& loop) override;
  void flush() override { poll(); }
  size_t inlineBelow() const override { return inlineBelow_; }

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override;

 private:
  void closeInLoop(const Error& reason);

  std::shared_ptr<MemoryAccess> access_;
  std::string channel_;
  size_t inlineBelow_;
  actorpipe::detail::Loop* loop_{nullptr};
  // Written by the peer (another thread, or another process). Never freed:
  // a peer that acknowledges late must not write into reused memory.
  std::atomic<uint64_t>* acked_;
  uint64_t nextSeq_{1};
  struct Pending {
    uint64_t seq;
    done_fn done;
  };
  std::mutex mutex_;  // send() and close() may come from other threads
  std::deque<Pending> pending_;
  Error error_;
  bool polled_{false};
  uint64_t wakeTimer_{0};
};

} // namespace actorpipe::channel::detail
