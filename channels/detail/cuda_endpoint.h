#pragma once
// The endpoint of the CUDA channels: cuda_xth (both ends in one process)
// and cuda_ipc (two processes of one host). Built only with CUDA support.
//
// Protocol. The sender records an event on its tensor's stream (the tensor
// is ready once the event completes) and describes the tensor; it keeps the
// tensor's memory until the receiver acknowledges. The receiver orders a
// device-to-device copy on *its* buffer's stream after that event, straight
// from the sender's memory into its allocation (one copy, no staging),
// records an event after the copy, and once that event completes it writes
// the transfer's sequence number into the sender's acknowledgement word, and
// only then reports its read done. So:
// - a read's callback means the bytes are in the receiver's memory (already
//   synchronised: stronger than TensorPipe, whose callback means "ordered on
//   the stream"); the copy was ordered after the work already on the
//   receiver buffer's stream;
// - a write's callback means the receiver's copy has finished: the sender
//   may free or reuse its memory at once;
// - a receiver that exits right after its read never fails the sender.
//
// Ordering across processes, chosen by measurement (gpu/README "ipc_split"
// on an H100): making the receiver's stream wait for an IPC event cost
// ~270 µs a call, asking that event whether it has completed almost nothing.
// So the receiver *polls* the sender's IPC event from its loop, then orders
// the copy; nothing here waits for a whole device. Opening a memory handle
// costs 170–280 µs: opened allocations are cached (keyed by handle and the
// sender's buffer id, so an allocation freed and replaced at the same
// address is opened anew; at most kOpenAllocations, least recently used
// closed first). IPC events come from a pool of kEventSlots per endpoint,
// each opened once by the receiver.
//
// Completion is polled: the endpoint is a Poller of its pipe's loop. While
// a copy is in flight the loop does not sleep (for up to 2 ms; then it
// looks every millisecond): a device copy ends in microseconds, and a
// thread woken from sleep would cost more.
//
// What a hostile peer can do (docs/security.md, "CUDA channels"):
// - cuda_xth: as xth, nothing: descriptors name no address; the receiver
//   finds the tensor in its linked sender's table by sequence number.
// - cuda_ipc: name an allocation by handle (it can only name memory it can
//   export itself) and an offset in it: offset + length is checked against
//   the opened allocation's size before any copy. The acknowledgement page is
//   named as a file descriptor *of the peer*, opened only in the process the
//   kernel names, as our user, sealed, one page (ack_page.h).
//   Sequence numbers, lengths, slots and descriptor syntax are checked
//   strictly (cuda_descriptor.h; attacked in cuda_channels_test, fuzzed).
//
// Thread model: sendBuffer() on the pipe's loop, close() from any thread;
// recvBuffer(), poll() and the Poller hooks on the loop thread. A cuda_xth
// receiver looks into its sender's table under the sender's mutex.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <actorpipe/channels/context.h>
#include <actorpipe/channels/detail/cuda_descriptor.h>
#include <actorpipe/runtime/detail/cuda.h>
#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::channel::detail {

class CudaEndpoint final : public Endpoint,
                           public actorpipe::detail::Loop::Poller,
                           public std::enable_shared_from_this<CudaEndpoint> {
 public:
  enum class Mode { kInProcess, kCrossProcess };
  static constexpr size_t kOpenAllocations = 64;

  static std::shared_ptr<CudaEndpoint> make(Mode mode, Error& error);
  ~CudaEndpoint() override;

  // cuda_xth: `a` and `b` read from each other.
  static void link(const std::shared_ptr<CudaEndpoint>& a, const std::shared_ptr<CudaEndpoint>& b);

  std::string send(const void* ptr, size_t length, done_fn done) override;
  void recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) override;
  std::string sendBuffer(const Buffer& buffer, size_t length, done_fn done) override;
  void recvBuffer(const std::string& descriptor, const Buffer& buffer, size_t length, done_fn done) override;
  Error checkBuffer(const Buffer& buffer, size_t length) override;
  void close(const Error& reason) override;
  void attach(actorpipe::detail::Loop& loop) override;
  void flush() override { poll(); }
  void setPeerProcess(actorpipe::detail::PeerProcessLookup lookup) override { lookup_ = std::move(lookup); }

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override;

  explicit CudaEndpoint(Mode mode);  // use make()

 private:
  // Sender's side: a tensor described to the peer, not yet acknowledged.
  struct Export {
    uint64_t seq;
    const void* ptr;
    size_t length;
    int device;
    cudaEvent_t ready;  // cuda_xth: recorded on the sender's stream
    int slot;           // cuda_ipc: the IPC event slot, or -1
    bool read;          // cuda_xth: a receiver ordered its copy
    done_fn done;
  };
  // Receiver's side: a copy to order, or ordered and not yet complete.
  struct Import {
    uint64_t seq;
    void* dst;
    const void* src;
    size_t length;
    cudaStream_t stream;
    int device;
    int srcDevice;
    cudaEvent_t senderReady;  // cuda_ipc: the opened IPC event to poll, or null
    cudaEvent_t copied;       // recorded after the copy once ordered
    bool ordered;
    std::shared_ptr<CudaEndpoint> sender;  // cuda_xth: keeps the sender's table alive
    std::atomic<uint64_t>* ack;
    size_t opened;  // cuda_ipc: index of the allocation in opened_ (pinned while copying)
    done_fn done;
    std::chrono::steady_clock::time_point since;
    std::chrono::steady_clock::time_point orderedAt;
  };
  struct Slot {
    cudaEvent_t event{nullptr};
    cudaIpcEventHandle_t handle{};
    bool busy{false};
  };
  struct OpenedEvent {
    cudaEvent_t event{nullptr};
    std::array<uint8_t, kIpcHandleBytes> handle{};
  };
  struct OpenedAllocation {
    std::array<uint8_t, kIpcHandleBytes> handle{};
    uint64_t bufferId{0};
    int device{0};
    char* base{nullptr};
    size_t size{0};
    size_t users{0};  // imports copying from it
    uint64_t lastUse{0};
  };
  struct ExportedAllocation {
    uintptr_t base;
    size_t size;
    uint64_t bufferId;
    cudaIpcMemHandle_t handle;
  };

  // What inspect() learned about the tensor about to be sent.
  struct Inspected {
    const void* ptr{nullptr};
    size_t length{0};
    int device{0};
    actorpipe::detail::AllocationRange range;
  };
  Error inspect(const CudaBuffer& cuda, size_t length);
  Error describe(const actorpipe::detail::AllocationRange& range, cudaStream_t stream, Export& e,
                 std::string& descriptor);
  Error importLinked(const std::string& descriptor, Import& in);
  Error importIpc(const std::string& descriptor, Import& in);
  Error bindPeer(uint64_t fd);
  Error openAllocation(const CudaIpcDescriptor& d, int device, size_t& index);
  Error orderCopy(Import& in);
  cudaEvent_t takeEvent(Error& error);
  void closeInLoop(const Error& reason);
  void failImports(const Error& reason);
  void closeFiles();
  Error ackPage();

  const Mode mode_;
  actorpipe::detail::Loop* loop_{nullptr};
  actorpipe::detail::PeerProcessLookup lookup_;

  // Where the peer acknowledges our transfers: cuda_xth a word here,
  // cuda_ipc the first word of a sealed memfd page the peer maps.
  std::atomic<uint64_t> localAck_{0};
  std::atomic<std::atomic<uint64_t>*> ack_{&localAck_};  // cuda_ipc: the page, once made
  int ackFd_{-1};
  void* ackPage_{nullptr};

  std::mutex mutex_;  // the sender's state below: a cuda_xth receiver reads it from its own loop
  uint64_t nextSeq_{1};
  std::deque<Export> exports_;
  Error error_;
  std::vector<cudaEvent_t> freeEvents_;  // plain events, for cuda_xth's readiness and every copy
  Slot slots_[kEventSlots];
  std::vector<ExportedAllocation> exported_;  // cuda_ipc: memory handles made, by allocation

  Inspected inspected_;  // loop thread

  // Receiver's state, loop thread only.
  uint64_t expectedSeq_{1};
  std::deque<Import> imports_;
  std::mutex peerMutex_;  // link() may run on another pipe's loop
  std::weak_ptr<CudaEndpoint> peer_;
  bool linked_{false};
  bool bound_{false};
  Error bindError_;
  uint64_t peerAckFd_{0};
  int pidfd_{-1};
  std::atomic<uint64_t>* peerAck_{nullptr};
  void* peerAckPage_{nullptr};
  OpenedEvent openedEvents_[kEventSlots];
  std::vector<OpenedAllocation> opened_;
  uint64_t useClock_{0};

  bool polled_{false};
  uint64_t wakeTimer_{0};

  // ACTORPIPE_CUDA_TRACE=1: where a transfer's time goes, printed (medians)
  // when the endpoint is destroyed. For the benchmarks' analysis only.
  std::vector<double> traceDescribe_, traceWait_, traceCopy_;
};

} // namespace actorpipe::channel::detail
