#pragma once
// The endpoint of cuda_basic: it lends the pipe pinned host memory and
// makes the device copies into and out of it (channels/context.h, Stager;
// the pipe's side, which puts the chunks on its connection, is
// actors/detail/pipe_staging.cc). Built only with CUDA support.
//
// Each copy is ordered on the tensor's own stream (the sender's copy after
// the work that made the tensor, the receiver's after the work already
// queued on its buffer's stream), then an event recorded behind it is
// polled from the pipe's loop, as the other CUDA channels do: a chunk's
// copy ends in microseconds, sooner than a sleeping thread wakes. So a
// read's callback means the bytes are in the receiver's memory, and a
// write's that the sender's memory is no longer read.
//
// Slots: kSlots per direction, kChunkBytes each, pinned on first use and
// kept for the pipe's life (cudaHostAlloc costs far more than a copy).
// What a peer controls here: nothing but the tensor's length, which the
// pipe checked against the receiver's allocation; the receiver's staging
// is these slots whatever the length.
//
// Thread model: everything on the pipe's loop; close() from any thread
// (posted to the loop); it returns, on the loop, once every copy in flight
// has finished, so a failed operation's memory is no longer touched (it
// waits 10 s at most: copies queue behind the user's work on its streams,
// and a stream waiting for this loop would never drain; past that it logs
// and fails the operations anyway).
//
// Pinned slots are allocated on first use with whatever device is current
// on the loop thread (portable memory: any device's copies may use it); a
// process that must not touch device 0 sets its device on that thread.
#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::channel::detail {

class CudaStager final : public Endpoint,
                         public Stager,
                         public actorpipe::detail::Loop::Poller,
                         public std::enable_shared_from_this<CudaStager> {
 public:
  using done_fn = Endpoint::done_fn;
  // 1 MiB: a pinned copy of it takes ~20 µs on an H100 (55 GB/s), so a
  // chunk's copy hides behind the connection moving the one before, and
  // four slots per direction cost 4 MiB of pinned memory per pipe that
  // moves CUDA tensors this way.
  static constexpr size_t kChunkBytes = size_t(1) << 20;

  static std::shared_ptr<CudaStager> make(Error& error);
  ~CudaStager() override;

  std::string send(const void* ptr, size_t length, done_fn done) override;
  void recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) override;
  std::string sendBuffer(const Buffer& buffer, size_t length, done_fn done) override;
  void recvBuffer(const std::string& descriptor, const Buffer& buffer, size_t length, done_fn done) override;
  Error checkBuffer(const Buffer& buffer, size_t length) override;
  void close(const Error& reason) override;
  void attach(actorpipe::detail::Loop& loop) override;
  // Nothing to flush: a finished copy changes nothing the peer has seen
  // (the connection carries the bytes), and its callback would act on a
  // pipe in the middle of failing.
  void flush() override {}
  Stager* stager() override { return this; }

  size_t chunkBytes() const override { return kChunkBytes; }
  void* slot(Side side, size_t slot, Error& error) override;
  void toHost(void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) override;
  void fromHost(const void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) override;

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override;

  CudaStager() = default;  // use make()

 private:
  struct Copy {
    cudaEvent_t event;
    int device;
    done_fn done;
    std::chrono::steady_clock::time_point since;
  };
  void start(void* dst, const void* src, size_t length, bool toHost, const Buffer& buffer, done_fn done);
  void closeInLoop(const Error& reason);

  actorpipe::detail::Loop* loop_{nullptr};
  bool polled_{false};
  uint64_t wakeTimer_{0};
  Error error_;
  void* slots_[2][kSlots]{};
  std::deque<Copy> copies_;                          // in flight, oldest first
  std::vector<std::pair<int, cudaEvent_t>> events_;  // free, with their device
};

} // namespace actorpipe::channel::detail
