#include <actorpipe/channels/detail/cuda_endpoint.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include <actorpipe/channels/detail/ack_page.h>
#include <actorpipe/channels/detail/pull_descriptor.h>
#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/cuda.h>

namespace actorpipe::channel::detail {
namespace {

using actorpipe::detail::cudaFailure;
// A copy still in flight after this long lets the loop sleep (and look
// again every millisecond) instead of spinning on it.
constexpr auto kSpinAtMost = std::chrono::milliseconds(2);

const char* name(CudaEndpoint::Mode mode) {
  return mode == CudaEndpoint::Mode::kInProcess ? "cuda_xth" : "cuda_ipc";
}

bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("ACTORPIPE_CUDA_TRACE");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double usSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}


Error bufferDevice(const CudaBuffer& buffer, int& device) {
  if (buffer.deviceIndex >= 0) {
    device = buffer.deviceIndex;
    return Error();
  }
  return actorpipe::detail::deviceOfPointer(buffer.ptr, device);
}

}  // namespace

CudaEndpoint::CudaEndpoint(Mode mode) : mode_(mode) {}

std::shared_ptr<CudaEndpoint> CudaEndpoint::make(Mode mode, Error&) { return std::make_shared<CudaEndpoint>(mode); }

// cuda_ipc's acknowledgement page, made at the first send (a pipe that
// never sends a CUDA tensor holds no file for it). Under mutex_.
Error CudaEndpoint::ackPage() {
  if (ackFd_ >= 0) return Error();
  if (auto e = makeAckPage(ackFd_, ackPage_)) return e;
  ack_.store(new (ackPage_) std::atomic<uint64_t>(0), std::memory_order_release);
  return Error();
}

Error CudaEndpoint::checkBuffer(const Buffer& buffer, size_t length) {
  if (buffer.device().type != kCudaDeviceType) {
    return ACTORPIPE_ERROR(LogicError, std::string(name(mode_)) + " moves CUDA tensors, not tensors on " +
                                           buffer.device().toString());
  }
  inspected_ = Inspected();  // always asked afresh here: memory may have been freed and reused since
  return inspect(buffer.unwrap<CudaBuffer>(), length);
}

// Where the tensor lives, asked once per write: the pipe checks each CUDA
// tensor (checkBuffer) right before it sends it (sendBuffer), which takes
// what was learned then, once. Loop thread.
Error CudaEndpoint::inspect(const CudaBuffer& cuda, size_t length) {
  if (inspected_.ptr == cuda.ptr && inspected_.length == length) return Error();
  inspected_ = Inspected();
  int device = 0;
  if (auto e = actorpipe::detail::deviceOfPointer(cuda.ptr, device)) return e;
  // The driver API needs the device's context current on this thread.
  ACTORPIPE_CUDA_TRY(cudaSetDevice(device));
  actorpipe::detail::AllocationRange range;
  if (auto e = actorpipe::detail::allocationOf(cuda.ptr, range)) return e;
  if (reinterpret_cast<uintptr_t>(cuda.ptr) + length > range.base + range.size) {
    return ACTORPIPE_ERROR(LogicError, "the tensor runs past the end of its CUDA allocation");
  }
  inspected_ = Inspected{cuda.ptr, length, device, range};
  return Error();
}

CudaEndpoint::~CudaEndpoint() {
  if (tracing() && (!traceDescribe_.empty() || !traceCopy_.empty())) {
    std::fprintf(stderr, "%s trace: describe p50 %.1f us (%zu), wait for sender p50 %.1f us, copy seen done p50 %.1f us (%zu)\n",
                 name(mode_), median(traceDescribe_), traceDescribe_.size(), median(traceWait_), median(traceCopy_),
                 traceCopy_.size());
  }
  // Nothing to give back where nothing was made (and no CUDA call then:
  // it would start CUDA); nothing after main (the runtime may be gone).
  bool made = !freeEvents_.empty() || !opened_.empty();
  for (auto& s : slots_) made = made || s.event != nullptr;
  for (auto& o : openedEvents_) made = made || o.event != nullptr;
  if (!made || actorpipe::detail::cudaExiting().load()) {
    closeFiles();
    return;
  }
  for (auto& s : slots_) {
    if (s.event != nullptr) cudaEventDestroy(s.event);
  }
  for (auto& o : openedEvents_) {
    if (o.event != nullptr) cudaEventDestroy(o.event);
  }
  for (auto& a : opened_) cudaIpcCloseMemHandle(a.base);
  for (cudaEvent_t e : freeEvents_) cudaEventDestroy(e);
  (void)cudaGetLastError();
  closeFiles();
}

void CudaEndpoint::closeFiles() {
  if (ackPage_ != nullptr) ::munmap(ackPage_, kAckPageSize);
  if (ackFd_ >= 0) ::close(ackFd_);
  if (peerAckPage_ != nullptr) ::munmap(peerAckPage_, kAckPageSize);
  if (pidfd_ >= 0) ::close(pidfd_);
  ackPage_ = peerAckPage_ = nullptr;
  ackFd_ = pidfd_ = -1;
}

void CudaEndpoint::link(const std::shared_ptr<CudaEndpoint>& a, const std::shared_ptr<CudaEndpoint>& b) {
  for (auto [self, other] : {std::pair{a, b}, std::pair{b, a}}) {
    std::lock_guard<std::mutex> guard(self->peerMutex_);
    self->peer_ = other;
    self->linked_ = true;
  }
}

void CudaEndpoint::attach(actorpipe::detail::Loop& loop) {
  loop_ = &loop;
  loop_->addPoller(this);
  polled_ = true;
}

std::string CudaEndpoint::send(const void*, size_t, done_fn done) {
  done(ACTORPIPE_ERROR(LogicError, std::string(name(mode_)) + " moves CUDA tensors, not CPU memory"));
  return std::string();
}

void CudaEndpoint::recv(const std::string&, void*, size_t, done_fn done) {
  done(ACTORPIPE_ERROR(LogicError, std::string(name(mode_)) + " moves CUDA tensors into CUDA memory, not CPU memory"));
}

cudaEvent_t CudaEndpoint::takeEvent(Error& error) {
  if (!freeEvents_.empty()) {
    cudaEvent_t e = freeEvents_.back();
    freeEvents_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (status != cudaSuccess) error = cudaFailure("cudaEventCreateWithFlags", status);
  return e;
}

// --- sending ------------------------------------------------------------------

std::string CudaEndpoint::sendBuffer(const Buffer& buffer, size_t length, done_fn done) {
  if (buffer.device().type != kCudaDeviceType) {
    done(ACTORPIPE_ERROR(LogicError, std::string(name(mode_)) + " moves CUDA tensors, not tensors on " +
                                         buffer.device().toString()));
    return std::string();
  }
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  Export e{0, cuda.ptr, length, 0, nullptr, -1, false, std::move(done)};
  std::string descriptor;
  const auto started = std::chrono::steady_clock::now();
  Error error = inspect(cuda, length);
  const Inspected where = inspected_;
  inspected_ = Inspected();  // used once: the next write asks again
  if (!error) {
    std::lock_guard<std::mutex> guard(mutex_);
    error = error_;
    e.device = where.device;
    if (!error) error = describe(where.range, cuda.stream, e, descriptor);
    if (!error) exports_.push_back(std::move(e));
  }
  if (error) {
    e.done(error);  // outside the lock: it fails the pipe, which closes us
    return std::string();
  }
  if (tracing()) traceDescribe_.push_back(usSince(started));
  return descriptor;
}

// Under mutex_.
Error CudaEndpoint::describe(const actorpipe::detail::AllocationRange& range, cudaStream_t stream, Export& e,
                              std::string& descriptor) {
  ACTORPIPE_CUDA_TRY(cudaSetDevice(e.device));
  e.seq = nextSeq_;
  if (mode_ == Mode::kInProcess) {
    Error error;
    e.ready = takeEvent(error);
    if (error) return error;
    if (cudaError_t status = cudaEventRecord(e.ready, stream); status != cudaSuccess) {
      freeEvents_.push_back(e.ready);
      return cudaFailure("cudaEventRecord", status);
    }
    ++nextSeq_;
    descriptor = formatPullDescriptor(PullDescriptor{e.seq, e.length, 0, 0}, PullFormat::kInProcess);
    return Error();
  }

  if (auto error = ackPage()) return error;
  CudaIpcDescriptor d;
  d.seq = e.seq;
  d.length = e.length;
  d.ackFd = static_cast<uint64_t>(ackFd_);
  const auto at = reinterpret_cast<uintptr_t>(e.ptr);  // inside `range`: inspect() checked
  // One memory handle per allocation, made once: a new allocation at the
  // same address has another buffer id, and gets its own.
  const ExportedAllocation* exported = nullptr;
  for (auto& a : exported_) {
    if (a.base == range.base) {
      if (a.bufferId != range.bufferId) {
        a = exported_.back();
        exported_.pop_back();
      }
      break;
    }
  }
  for (const auto& a : exported_) {
    if (a.base == range.base && a.bufferId == range.bufferId) exported = &a;
  }
  if (exported == nullptr) {
    ExportedAllocation a{range.base, range.size, range.bufferId, {}};
    ACTORPIPE_CUDA_TRY(cudaIpcGetMemHandle(&a.handle, reinterpret_cast<void*>(range.base)));
    if (exported_.size() >= 4 * kOpenAllocations) exported_.erase(exported_.begin());
    exported_.push_back(a);
    exported = &exported_.back();
  }
  std::memcpy(d.memory.data(), &exported->handle, kIpcHandleBytes);
  d.offset = at - range.base;
  d.bufferId = range.bufferId;

  // Readiness: an IPC event from the pool, which the receiver polls; with
  // every slot in flight, wait here for the stream instead.
  int slot = -1;
  for (int i = 0; i < static_cast<int>(kEventSlots); ++i) {
    if (!slots_[i].busy) {
      slot = i;
      break;
    }
  }
  if (slot >= 0 && slots_[slot].event == nullptr) {
    ACTORPIPE_CUDA_TRY(cudaEventCreateWithFlags(&slots_[slot].event, cudaEventDisableTiming | cudaEventInterprocess));
    ACTORPIPE_CUDA_TRY(cudaIpcGetEventHandle(&slots_[slot].handle, slots_[slot].event));
  }
  if (slot >= 0) {
    ACTORPIPE_CUDA_TRY(cudaEventRecord(slots_[slot].event, stream));
    slots_[slot].busy = true;
    d.slot = static_cast<uint64_t>(slot);
    std::memcpy(d.event.data(), &slots_[slot].handle, kIpcHandleBytes);
  } else {
    ACTORPIPE_CUDA_TRY(cudaStreamSynchronize(stream));
    d.slot = kNoEvent;
  }
  e.slot = slot;
  ++nextSeq_;
  descriptor = formatCudaIpcDescriptor(d);
  return Error();
}

// --- receiving ----------------------------------------------------------------

void CudaEndpoint::recvBuffer(const std::string& descriptor, const Buffer& buffer, size_t length, done_fn done) {
  ACTORPIPE_DCHECK(loop_ == nullptr || loop_->ownsState());
  if (buffer.device().type != kCudaDeviceType) {
    return done(ACTORPIPE_ERROR(LogicError, std::string(name(mode_)) + " moves CUDA tensors into CUDA memory, not " +
                                                buffer.device().toString()));
  }
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  Import in{};
  in.dst = cuda.ptr;
  in.stream = cuda.stream;
  in.length = length;
  in.done = std::move(done);
  in.opened = SIZE_MAX;
  in.since = std::chrono::steady_clock::now();
  Error error;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    error = error_;
  }
  if (!error) error = bufferDevice(cuda, in.device);
  in.seq = expectedSeq_;
  if (!error) error = mode_ == Mode::kInProcess ? importLinked(descriptor, in) : importIpc(descriptor, in);
  if (!error && in.senderReady == nullptr) error = orderCopy(in);
  if (error) {
    if (in.opened != SIZE_MAX) --opened_[in.opened].users;
    return in.done(error);
  }
  ++expectedSeq_;
  imports_.push_back(std::move(in));  // the loop polls it from its next turn on
}

Error CudaEndpoint::importLinked(const std::string& descriptor, Import& in) {
  PullDescriptor d;
  if (auto e = parsePullDescriptor(descriptor, PullFormat::kInProcess, "cuda_xth", d)) return e;
  if (d.length != in.length) {
    return ACTORPIPE_ERROR(ProtocolError, "cuda_xth descriptor announces " + std::to_string(d.length) +
                                              " bytes for a tensor of " + std::to_string(in.length));
  }
  if (d.seq != expectedSeq_) {
    return ACTORPIPE_ERROR(ProtocolError, "cuda_xth descriptor names transfer " + std::to_string(d.seq) + " where " +
                                              std::to_string(expectedSeq_) + " comes next");
  }
  bool linked;
  {
    std::lock_guard<std::mutex> guard(peerMutex_);
    in.sender = peer_.lock();
    linked = linked_;
  }
  if (!in.sender) {
    return linked ? ACTORPIPE_ERROR(PipeClosedError)
                  : ACTORPIPE_ERROR(ProtocolError, "cuda_xth: the peer is not an endpoint of this process");
  }
  CudaEndpoint& sender = *in.sender;
  std::lock_guard<std::mutex> guard(sender.mutex_);
  if (sender.error_) return sender.error_;
  for (auto& e : sender.exports_) {
    if (e.seq != d.seq) continue;
    if (e.read || e.length != in.length) break;
    e.read = true;
    in.src = e.ptr;
    in.srcDevice = e.device;
    in.ack = sender.ack_.load(std::memory_order_acquire);
    // The sender's readiness event is in this process: the stream waits
    // for it on the device (no polling), and the copy is ordered at once.
    ACTORPIPE_CUDA_TRY(cudaSetDevice(in.device));
    ACTORPIPE_CUDA_TRY(cudaStreamWaitEvent(in.stream, e.ready, 0));
    return Error();
  }
  return ACTORPIPE_ERROR(ProtocolError, "cuda_xth descriptor names no pending transfer of " +
                                            std::to_string(in.length) + " bytes (transfer " + std::to_string(d.seq) +
                                            ")");
}

Error CudaEndpoint::importIpc(const std::string& descriptor, Import& in) {
  CudaIpcDescriptor d;
  if (auto e = parseCudaIpcDescriptor(descriptor, d)) return e;
  if (d.length != in.length) {
    return ACTORPIPE_ERROR(ProtocolError, "cuda_ipc descriptor announces " + std::to_string(d.length) +
                                              " bytes for a tensor of " + std::to_string(in.length));
  }
  if (d.seq != expectedSeq_) {
    return ACTORPIPE_ERROR(ProtocolError, "cuda_ipc descriptor names transfer " + std::to_string(d.seq) + " where " +
                                              std::to_string(expectedSeq_) + " comes next");
  }
  if (auto e = bindPeer(d.ackFd)) return e;
  in.ack = peerAck_;
  if (auto e = openAllocation(d, in.device, in.opened)) return e;
  const OpenedAllocation& a = opened_[in.opened];
  if (d.offset > a.size || a.size - d.offset < d.length) {
    return ACTORPIPE_ERROR(ProtocolError, "cuda_ipc descriptor names bytes " + std::to_string(d.offset) + ".." +
                                              std::to_string(d.offset + d.length) + " of an allocation of " +
                                              std::to_string(a.size));
  }
  in.src = a.base + d.offset;
  in.srcDevice = in.device;
  if (d.slot == kNoEvent) return Error();  // the sender synchronised its stream before describing
  OpenedEvent& ev = openedEvents_[d.slot];
  if (ev.event == nullptr || ev.handle != d.event) {
    if (ev.event != nullptr) {
      cudaEventDestroy(ev.event);
      ev.event = nullptr;
    }
    cudaIpcEventHandle_t handle;
    std::memcpy(&handle, d.event.data(), kIpcHandleBytes);
    ACTORPIPE_CUDA_TRY(cudaSetDevice(in.device));
    ACTORPIPE_CUDA_TRY(cudaIpcOpenEventHandle(&ev.event, handle));
    ev.handle = d.event;
  }
  in.senderReady = ev.event;
  return Error();
}

// The sender's acknowledgement page, opened once, in the process the
// kernel names (ack_page.h).
Error CudaEndpoint::bindPeer(uint64_t fd) {
  if (bound_) {
    if (!bindError_ && fd != peerAckFd_) {
      return ACTORPIPE_ERROR(ProtocolError, "cuda_ipc descriptor names acknowledgement fd " + std::to_string(fd) +
                                                ", earlier ones " + std::to_string(peerAckFd_));
    }
    return bindError_;
  }
  bound_ = true;
  peerAckFd_ = fd;
  bindError_ = mapPeerAckPage(lookup_ ? lookup_() : std::nullopt, fd, peerAckPage_, pidfd_);
  if (!bindError_) peerAck_ = static_cast<std::atomic<uint64_t>*>(peerAckPage_);
  return bindError_;
}

Error CudaEndpoint::openAllocation(const CudaIpcDescriptor& d, int device, size_t& index) {
  ++useClock_;
  for (size_t i = 0; i < opened_.size(); ++i) {
    auto& a = opened_[i];
    if (a.handle == d.memory && a.bufferId == d.bufferId && a.device == device) {
      a.lastUse = useClock_;
      ++a.users;
      index = i;
      return Error();
    }
  }
  // The same handle with another buffer id: the sender freed that
  // allocation and made a new one where it was. The old mapping is stale.
  for (size_t i = 0; i < opened_.size(); ++i) {
    auto& a = opened_[i];
    if (a.handle != d.memory || a.device != device) continue;
    if (a.users > 0) {
      return ACTORPIPE_ERROR(ProtocolError, "cuda_ipc: the peer replaced an allocation a copy is still reading");
    }
    ACTORPIPE_CUDA_TRY(cudaIpcCloseMemHandle(a.base));
    opened_.erase(opened_.begin() + static_cast<std::ptrdiff_t>(i));
    for (auto& in : imports_) {
      if (in.opened != SIZE_MAX && in.opened > i) --in.opened;
    }
    break;
  }
  // Full: close the least recently used allocation no copy is reading.
  if (opened_.size() >= kOpenAllocations) {
    size_t victim = SIZE_MAX;
    for (size_t i = 0; i < opened_.size(); ++i) {
      if (opened_[i].users == 0 && (victim == SIZE_MAX || opened_[i].lastUse < opened_[victim].lastUse)) victim = i;
    }
    if (victim == SIZE_MAX) {
      return ACTORPIPE_ERROR(LimitExceededError, "cuda_ipc allocations in flight", opened_.size() + 1,
                             kOpenAllocations);
    }
    ACTORPIPE_CUDA_TRY(cudaIpcCloseMemHandle(opened_[victim].base));
    opened_.erase(opened_.begin() + static_cast<std::ptrdiff_t>(victim));
    for (auto& in : imports_) {
      if (in.opened != SIZE_MAX && in.opened > victim) --in.opened;
    }
  }
  OpenedAllocation a;
  a.handle = d.memory;
  a.bufferId = d.bufferId;
  a.device = device;
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, d.memory.data(), kIpcHandleBytes);
  void* base = nullptr;
  ACTORPIPE_CUDA_TRY(cudaSetDevice(device));
  ACTORPIPE_CUDA_TRY(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess));
  actorpipe::detail::AllocationRange range;
  if (auto e = actorpipe::detail::allocationOf(base, range)) {
    cudaIpcCloseMemHandle(base);
    return e;
  }
  a.base = static_cast<char*>(base);
  a.size = range.size - (reinterpret_cast<uintptr_t>(base) - range.base);
  a.users = 1;
  a.lastUse = useClock_;
  opened_.push_back(a);
  index = opened_.size() - 1;
  return Error();
}

Error CudaEndpoint::orderCopy(Import& in) {
  Error error;
  in.copied = takeEvent(error);
  if (error) return error;
  ACTORPIPE_CUDA_TRY(cudaSetDevice(in.device));
  if (in.srcDevice == in.device) {
    ACTORPIPE_CUDA_TRY(cudaMemcpyAsync(in.dst, in.src, in.length, cudaMemcpyDeviceToDevice, in.stream));
  } else {
    ACTORPIPE_CUDA_TRY(cudaMemcpyPeerAsync(in.dst, in.device, in.src, in.srcDevice, in.length, in.stream));
  }
  ACTORPIPE_CUDA_TRY(cudaEventRecord(in.copied, in.stream));
  in.ordered = true;
  in.orderedAt = std::chrono::steady_clock::now();
  return Error();
}

// --- progress -----------------------------------------------------------------

bool CudaEndpoint::poll() {
  // After main the runtime may be gone (a loop of a context never joined).
  if (actorpipe::detail::cudaExiting().load(std::memory_order_relaxed)) return false;
  bool progress = false;
  // Receiver: order copies whose sender is ready, in order; finish copies
  // that completed, in order (an acknowledgement covers every earlier one).
  for (auto& in : imports_) {
    if (in.ordered) continue;
    cudaError_t status = cudaEventQuery(in.senderReady);
    if (status == cudaErrorNotReady) break;
    Error error = status == cudaSuccess ? orderCopy(in) : cudaFailure("cudaEventQuery (the sender's event)", status);
    if (error) {
      (void)cudaGetLastError();
      failImports(error);
      return true;
    }
    progress = true;
  }
  while (!imports_.empty() && imports_.front().ordered) {
    Import& in = imports_.front();
    cudaError_t status = cudaEventQuery(in.copied);
    if (status == cudaErrorNotReady) break;
    Import done = std::move(in);
    imports_.pop_front();
    freeEvents_.push_back(done.copied);
    if (done.opened != SIZE_MAX) --opened_[done.opened].users;
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      Error error = cudaFailure("cudaEventQuery (the copy)", status);
      done.done(error);
      failImports(error);
      return true;
    }
    if (tracing()) {
      traceWait_.push_back(std::chrono::duration<double, std::micro>(done.orderedAt - done.since).count());
      traceCopy_.push_back(usSince(done.orderedAt));
    }
    // Acknowledge before reporting: see the header.
    done.ack->store(done.seq, std::memory_order_release);
    done.sender.reset();
    done.done(Error());
    progress = true;
  }

  // Sender: finish what the peer acknowledged.
  const uint64_t acked = ack_.load(std::memory_order_acquire)->load(std::memory_order_acquire);
  std::vector<Export> finished;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    while (!exports_.empty() && exports_.front().seq <= acked) {
      Export& e = exports_.front();
      if (e.ready != nullptr) freeEvents_.push_back(e.ready);
      if (e.slot >= 0) slots_[e.slot].busy = false;
      finished.push_back(std::move(e));
      exports_.pop_front();
    }
  }
  for (auto& e : finished) e.done(Error());
  return progress || !finished.empty();
}

bool CudaEndpoint::prepareToSleep() {
  if (!imports_.empty() && std::chrono::steady_clock::now() - imports_.front().since < kSpinAtMost) {
    return false;  // a device copy ends sooner than a sleeping thread wakes
  }
  bool waiting = !imports_.empty();
  {
    std::lock_guard<std::mutex> guard(mutex_);
    waiting = waiting || !exports_.empty();
  }
  if (waiting && loop_ != nullptr && wakeTimer_ == 0) {
    wakeTimer_ = loop_->after(std::chrono::milliseconds(1), [] {});
  }
  return true;
}

void CudaEndpoint::awake() {
  if (wakeTimer_ != 0) {
    loop_->cancel(wakeTimer_);
    wakeTimer_ = 0;
  }
}

// --- failing ------------------------------------------------------------------

// Copies already ordered still write into the receiver's memory: they are
// waited for before their reads are reported failed (the user may free that
// memory then).
void CudaEndpoint::failImports(const Error& reason) {
  std::deque<Import> failed;
  failed.swap(imports_);
  bool ordered = false;
  for (auto& in : failed) {
    if (in.ordered) {
      cudaEventSynchronize(in.copied);
      ordered = true;
    }
  }
  if (ordered) (void)cudaGetLastError();
  for (auto& in : failed) {
    if (in.ordered) freeEvents_.push_back(in.copied);
    if (in.opened != SIZE_MAX) --opened_[in.opened].users;
    in.sender.reset();
    in.done(reason);
  }
}

void CudaEndpoint::close(const Error& reason) {
  if (loop_ != nullptr && !loop_->inLoop()) {
    auto self = shared_from_this();
    if (loop_->post([self, reason] { self->closeInLoop(reason); })) return;
  }
  closeInLoop(reason);
}

void CudaEndpoint::closeInLoop(const Error& reason) {
  ACTORPIPE_DCHECK(loop_ == nullptr || loop_->ownsState());
  std::deque<Export> failed;
  bool beingRead = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (error_) return;
    error_ = reason;
    failed.swap(exports_);
    for (auto& e : failed) beingRead = beingRead || e.read;
  }
  if (polled_) {
    awake();
    loop_->removePoller(this);
    polled_ = false;
  }
  failImports(reason);
  // cuda_xth: a receiver in this process may still be copying out of a
  // tensor we are about to give back. Not the hot path: wait for the device.
  if (beingRead) {
    cudaDeviceSynchronize();
    (void)cudaGetLastError();
  }
  for (auto& e : failed) e.done(reason);
}

} // namespace actorpipe::channel::detail
