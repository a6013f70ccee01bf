#include <actorpipe/channels/detail/cuda_stager.h>

#include <thread>
#include <utility>

#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/cuda.h>
#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::channel::detail {
namespace {

using actorpipe::detail::cudaFailure;
// A copy still in flight after this long lets the loop sleep (and look
// again every millisecond) instead of spinning on it.
constexpr auto kSpinAtMost = std::chrono::milliseconds(2);

Error notHere(const char* what) {
  return ACTORPIPE_ERROR(LogicError, std::string("cuda_basic stages tensors on the pipe's connection; it has no ") +
                                         what);
}

// How long close() waits for copies in flight before it gives up on them:
// they queue on the user's streams, behind whatever work is there, and a
// stream that waits for something only this loop could give would never
// drain.
constexpr auto kCloseWaitAtMost = std::chrono::seconds(10);

}  // namespace

std::shared_ptr<CudaStager> CudaStager::make(Error&) { return std::make_shared<CudaStager>(); }

CudaStager::~CudaStager() {
  // Nothing to give back where nothing was made (no CUDA call then: it
  // would start CUDA), nothing after main (the runtime may be gone).
  bool made = !events_.empty();
  for (auto& side : slots_) {
    for (void* s : side) made = made || s != nullptr;
  }
  if (!made || actorpipe::detail::cudaExiting().load()) return;
  for (auto& side : slots_) {
    for (void* s : side) {
      if (s != nullptr) cudaFreeHost(s);
    }
  }
  for (auto& e : events_) cudaEventDestroy(e.second);
  (void)cudaGetLastError();
}

std::string CudaStager::send(const void*, size_t, done_fn done) {
  done(notHere("out-of-band sends"));
  return std::string();
}
void CudaStager::recv(const std::string&, void*, size_t, done_fn done) { done(notHere("out-of-band reads")); }
std::string CudaStager::sendBuffer(const Buffer&, size_t, done_fn done) {
  done(notHere("out-of-band sends"));
  return std::string();
}
void CudaStager::recvBuffer(const std::string&, const Buffer&, size_t, done_fn done) {
  done(notHere("out-of-band reads"));
}

// Checked before the write sends anything: device memory, and the tensor
// inside its allocation (a copy past it would fault on the device, or read
// another allocation's bytes into the peer's hands).
Error CudaStager::checkBuffer(const Buffer& buffer, size_t length) {
  if (buffer.device().type != kCudaDeviceType) {
    return ACTORPIPE_ERROR(LogicError, "cuda_basic moves CUDA tensors, not tensors on " + buffer.device().toString());
  }
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  int device = 0;
  if (auto e = actorpipe::detail::deviceOfPointer(cuda.ptr, device)) return e;
  // The driver API needs the device's context current on this thread.
  ACTORPIPE_CUDA_TRY(cudaSetDevice(device));
  actorpipe::detail::AllocationRange range;
  if (auto e = actorpipe::detail::allocationOf(cuda.ptr, range)) return e;
  if (reinterpret_cast<uintptr_t>(cuda.ptr) + length > range.base + range.size) {
    return ACTORPIPE_ERROR(LogicError, "the tensor runs past the end of its CUDA allocation");
  }
  return Error();
}

void CudaStager::attach(actorpipe::detail::Loop& loop) {
  loop_ = &loop;
  loop_->addPoller(this);
  polled_ = true;
}

void* CudaStager::slot(Side side, size_t slot, Error& error) {
  ACTORPIPE_DCHECK(slot < kSlots);
  if (error_) {
    error = error_;
    return nullptr;
  }
  void*& memory = slots_[side == Side::kOut ? 0 : 1][slot];
  if (memory == nullptr) {
    // Portable: a copy on any device's stream may use it.
    cudaError_t status = cudaHostAlloc(&memory, kChunkBytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      memory = nullptr;
      error = cudaFailure("cudaHostAlloc (cuda_basic's staging)", status);
    }
  }
  return memory;
}

void CudaStager::toHost(void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) {
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  start(host, static_cast<const char*>(cuda.ptr) + offset, length, true, buffer, std::move(done));
}

void CudaStager::fromHost(const void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) {
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  start(static_cast<char*>(cuda.ptr) + offset, host, length, false, buffer, std::move(done));
}

void CudaStager::start(void* dst, const void* src, size_t length, bool toHost, const Buffer& buffer, done_fn done) {
  ACTORPIPE_DCHECK(loop_ == nullptr || loop_->ownsState());
  if (error_) return done(error_);
  const CudaBuffer& cuda = buffer.unwrap<CudaBuffer>();
  auto order = [&](int& device, cudaEvent_t& event) -> Error {
    // The device of the memory itself, not the buffer's word for it: the
    // event must belong to the device of the stream the copy runs on.
    if (auto e = actorpipe::detail::deviceOfPointer(cuda.ptr, device)) return e;
    ACTORPIPE_CUDA_TRY(cudaSetDevice(device));
    for (size_t i = 0; i < events_.size(); ++i) {
      if (events_[i].first == device) {
        event = events_[i].second;
        events_.erase(events_.begin() + i);
        break;
      }
    }
    if (event == nullptr) ACTORPIPE_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    cudaError_t status = cudaMemcpyAsync(dst, src, length, toHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                         cuda.stream);
    if (status == cudaSuccess) {
      status = cudaEventRecord(event, cuda.stream);
      // The copy is queued and nothing will tell when it ends: it must end
      // before the failure is reported (the memory is the user's again then).
      if (status != cudaSuccess) cudaStreamSynchronize(cuda.stream);
    }
    if (status != cudaSuccess) {
      events_.emplace_back(device, event);
      event = nullptr;
      return cudaFailure(toHost ? "cudaMemcpyAsync (cuda_basic, device to host)"
                                : "cudaMemcpyAsync (cuda_basic, host to device)",
                         status);
    }
    return Error();
  };
  int device = 0;
  cudaEvent_t event = nullptr;
  if (Error error = order(device, event)) {
    (void)cudaGetLastError();
    return done(error);
  }
  copies_.push_back(Copy{event, device, std::move(done), std::chrono::steady_clock::now()});
  if (loop_ != nullptr) loop_->noteActivity();
}

bool CudaStager::poll() {
  // After main the runtime may be gone (a loop of a context never joined).
  if (copies_.empty() || actorpipe::detail::cudaExiting().load(std::memory_order_relaxed)) return false;
  // Copies on one stream end in order; on several, in any: each is asked.
  std::vector<std::pair<done_fn, Error>> finished;
  for (auto it = copies_.begin(); it != copies_.end();) {
    cudaError_t status = cudaEventQuery(it->event);
    if (status == cudaErrorNotReady) {
      ++it;
      continue;
    }
    Error error;
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      error = cudaFailure("cudaEventQuery (cuda_basic's copy)", status);
    }
    events_.emplace_back(it->device, it->event);
    finished.emplace_back(std::move(it->done), std::move(error));
    it = copies_.erase(it);
  }
  // Outside the walk: a callback asks the next copies.
  for (auto& f : finished) f.first(f.second);
  return !finished.empty();
}

bool CudaStager::prepareToSleep() {
  if (copies_.empty()) return true;
  if (std::chrono::steady_clock::now() - copies_.front().since < kSpinAtMost) {
    return false;  // a chunk's copy ends sooner than a sleeping thread wakes
  }
  if (loop_ != nullptr && wakeTimer_ == 0) {
    wakeTimer_ = loop_->after(std::chrono::milliseconds(1), [] {});
  }
  return true;
}

void CudaStager::awake() {
  if (wakeTimer_ != 0) {
    loop_->cancel(wakeTimer_);
    wakeTimer_ = 0;
  }
}

void CudaStager::close(const Error& reason) {
  if (loop_ != nullptr && !loop_->inLoop()) {
    auto self = shared_from_this();
    if (loop_->post([self, reason] { self->closeInLoop(reason); })) return;
  }
  closeInLoop(reason);
}

// Copies in flight still read or write the operations' memory: they are
// waited for (microseconds each) before the operations are failed.
void CudaStager::closeInLoop(const Error& reason) {
  ACTORPIPE_DCHECK(loop_ == nullptr || loop_->ownsState());
  if (error_) return;
  error_ = reason;
  if (polled_) {
    awake();
    loop_->removePoller(this);
    polled_ = false;
  }
  std::deque<Copy> failed;
  failed.swap(copies_);
  const auto until = std::chrono::steady_clock::now() + kCloseWaitAtMost;
  for (auto& c : failed) {
    // Polled, not cudaEventSynchronize: bounded (see kCloseWaitAtMost).
    cudaError_t status;
    while ((status = cudaEventQuery(c.event)) == cudaErrorNotReady && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (status == cudaErrorNotReady) {
      ACTORPIPE_LOG(kWarn, "cuda_basic: a staging copy still queued after "
                                  << kCloseWaitAtMost.count() << " s; its operation is failed without it");
      continue;  // its event may still be recorded on: not reused
    }
    events_.emplace_back(c.device, c.event);
  }
  if (!failed.empty()) (void)cudaGetLastError();
  for (auto& c : failed) c.done(reason);
}

} // namespace actorpipe::channel::detail
