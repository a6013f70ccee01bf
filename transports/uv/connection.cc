#include <actorpipe/transports/uv/connection.h>

#include <actorpipe/transports/detail/in_loop.h>
#include <actorpipe/transports/uv/error.h>
#include <actorpipe/runtime/detail/check.h>

#include <algorithm>
#include <cstring>

namespace actorpipe::transport::uv {
namespace {

// Reads at least this large skip the staging buffer.
constexpr size_t kDirectReadThreshold = 16 * 1024;
// The staging buffer starts small and doubles while the peer keeps it full:
// a connection that has sent a hello (or nothing) holds 4 KiB, not 64.
constexpr size_t kFirstStagingSize = 4 * 1024;
constexpr size_t kStagingSize = 64 * 1024;

Error uvError(const char* what, int status) {
  if (status == UV_EOF) {
    return ACTORPIPE_ERROR(EOFError);
  }
  return ACTORPIPE_ERROR(UVError, what, status);
}

}  // namespace

struct UvConnection::WriteOp {
  uv_write_t req;
  std::vector<uv_buf_t> bufs;
  write_callback_fn fn;
  std::shared_ptr<UvConnection> owner;
};

UvConnection::UvConnection(detail::Loop& loop, std::string peer)
    : ConnectionBase(loop, std::move(peer)) {}

UvConnection::~UvConnection() = default;

void UvConnection::adopt(uv_tcp_t* handle) {
  handle_ = handle;
  handle_->data = this;
  self_ = shared_from_this();
  connected_ = true;
  uv_tcp_nodelay(handle_, 1);
  updateReading();
}

void UvConnection::startConnect(const sockaddr* addr) {
  if (error_) {
    return;
  }
  handle_ = new uv_tcp_t;
  uv_tcp_init(loop_.uv(), handle_);
  handle_->data = this;
  self_ = shared_from_this();
  auto* req = new uv_connect_t;
  req->data = this;
  int rc = uv_tcp_connect(req, handle_, addr, [](uv_connect_t* req, int status) {
    auto* self = static_cast<UvConnection*>(req->data);
    delete req;
    self->onConnected(status);
  });
  if (rc != 0) {
    delete req;
    closeInLoop(ACTORPIPE_ERROR(ConnectError, peer_, uv_strerror(rc), -rc));
  }
}

void UvConnection::failConnect(const Error& error) { closeInLoop(error); }

void UvConnection::onConnected(int status) {
  loop_.noteActivity();
  if (status == UV_ECANCELED || error_) {
    return;  // closed while connecting; closeInLoop reported it
  }
  if (status != 0) {
    closeInLoop(ACTORPIPE_ERROR(ConnectError, peer_, uv_strerror(status), -status));
    return;
  }
  connected_ = true;
  uv_tcp_nodelay(handle_, 1);
  auto pending = std::move(writesBeforeConnect_);
  for (auto* op : pending) {
    issueWrite(op);
  }
  updateReading();
}

// Serves queued reads from the staging buffer, then decides whether the
// socket should keep reading: it reads ahead into staging while there is room,
// so the next frame header is usually here before anyone asks for it.
void UvConnection::pumpReads() {
  pumping_ = true;
  while (!reads_.empty() && !error_) {
    ReadOp& op = reads_.front();
    size_t avail = stagingEnd_ - stagingBegin_;
    size_t n = std::min(avail, op.length - op.done);
    if (n > 0) {
      std::memcpy(op.ptr + op.done, staging_.data() + stagingBegin_, n);
      stagingBegin_ += n;
      op.done += n;
    }
    if (stagingBegin_ == stagingEnd_) {
      stagingBegin_ = stagingEnd_ = 0;
    }
    if (op.done < op.length) {
      break;
    }
    auto fn = std::move(op.fn);
    reads_.popFront();
    fn(Error());  // may queue more reads or close us
  }
  pumping_ = false;
  if (peerGone_ && !reads_.empty() && !error_) {
    closeInLoop(ACTORPIPE_ERROR(EOFError));  // nothing more will come
    return;
  }
  updateReading();
}

bool UvConnection::readNow(void* ptr, size_t length) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (!pumping_ || error_ || !reads_.empty() || stagingEnd_ - stagingBegin_ < length) return false;
  if (length > 0) std::memcpy(ptr, staging_.data() + stagingBegin_, length);
  stagingBegin_ += length;
  if (stagingBegin_ == stagingEnd_) stagingBegin_ = stagingEnd_ = 0;
  return true;
}

// The peer closed its end: what it sent before is in staging and still
// ours to deliver.
void UvConnection::peerGone() {
  peerGone_ = true;
  if (reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(handle_));
    reading_ = false;
  }
  tellPeerGone(ACTORPIPE_ERROR(EOFError));
  if (!error_) pumpReads();
}

void UvConnection::updateReading() {
  if (!connected_ || error_ || handle_ == nullptr || peerGone_) {
    return;
  }
  bool stagingFull = stagingEnd_ == kStagingSize && stagingBegin_ == 0;
  bool want = !reads_.empty() || !stagingFull;
  if (want && !reading_) {
    int rc = uv_read_start(reinterpret_cast<uv_stream_t*>(handle_), &UvConnection::onAlloc,
                           &UvConnection::onRead);
    if (rc != 0) {
      closeInLoop(uvError("uv_read_start", rc));
      return;
    }
    reading_ = true;
  } else if (!want && reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(handle_));
    reading_ = false;
  }
}

void UvConnection::onAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* self = static_cast<UvConnection*>(handle->data);
  self->directRead_ = false;
  if (!self->reads_.empty() && self->stagingBegin_ == self->stagingEnd_) {
    ReadOp& op = self->reads_.front();
    size_t need = op.length - op.done;
    if (need >= kDirectReadThreshold) {
      self->directRead_ = true;
      *buf = uv_buf_init(reinterpret_cast<char*>(op.ptr + op.done), static_cast<unsigned>(std::min<size_t>(need, 1u << 30)));
      return;
    }
  }
  if (self->stagingBegin_ > 0) {
    size_t live = self->stagingEnd_ - self->stagingBegin_;
    std::memmove(self->staging_.data(), self->staging_.data() + self->stagingBegin_, live);
    self->stagingBegin_ = 0;
    self->stagingEnd_ = live;
  }
  if (self->stagingEnd_ == self->staging_.size() && self->staging_.size() < kStagingSize) {
    self->staging_.resize(std::max(kFirstStagingSize, 2 * self->staging_.size()));
  }
  *buf = uv_buf_init(reinterpret_cast<char*>(self->staging_.data() + self->stagingEnd_),
                     static_cast<unsigned>(self->staging_.size() - self->stagingEnd_));
}

void UvConnection::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
  auto* self = static_cast<UvConnection*>(stream->data);
  self->loop_.noteActivity();
  if (nread == UV_EOF) {
    self->peerGone();
    return;
  }
  if (nread < 0) {
    if (nread != UV_ENOBUFS) {
      self->closeInLoop(uvError("read", static_cast<int>(nread)));
    }
    return;
  }
  if (nread == 0) {
    return;
  }
  self->noteArrival();
  if (self->directRead_) {
    self->reads_.front().done += static_cast<size_t>(nread);
  } else {
    self->stagingEnd_ += static_cast<size_t>(nread);
  }
  self->pumpReads();
}

void UvConnection::writeInLoop(Slices slices, write_callback_fn fn) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (refuseWrite(fn, error_)) return;
  WriteOp* op;
  if (spareWrites_.empty()) {
    op = new WriteOp;
  } else {
    op = spareWrites_.back().release();
    spareWrites_.pop_back();
    op->bufs.clear();  // keeps its capacity
  }
  op->req.data = op;
  op->fn = std::move(fn);
  for (const auto& s : slices) {
    if (s.length > 0) {
      op->bufs.push_back(uv_buf_init(const_cast<char*>(static_cast<const char*>(s.ptr)),
                                     static_cast<unsigned>(s.length)));
    }
  }
  if (op->bufs.empty()) {
    op->bufs.push_back(uv_buf_init(nullptr, 0));
  }
  if (!connected_) {
    writesBeforeConnect_.push_back(op);
    return;
  }
  issueWrite(op);
}

// libuv 1.44 re-registers a socket with epoll after every uv_write that
// the socket took at once: uv__io_stop(POLLOUT) queues the watcher even
// though its events did not change, and the next turn makes an
// EPOLL_CTL_MOD system call for it. That was one system call per message
// (two per round trip, besides the writes themselves). So while none of our
// writes is queued in libuv, a write first goes through uv_try_write, which
// touches no watcher; what the socket takes whole completes later, like a
// uv_write would, and the rest (if any) goes to uv_write.
//
// Callbacks still run in the order the writes were made (context.h's
// contract): those of writes taken at once wait in takenWrites_ for one
// posted task, and any uv_write callback (a later write's, possibly in
// this very turn: libuv calls back a write it finished at once, or one
// cancelled by a close, before our posted task runs) first runs theirs.
// Only while none of ours is queued in libuv: the try would then write
// past it. Large writes skip the try (the socket would take part, and
// uv_write's own attempt at the rest would be a wasted call), and so does
// a failing one: uv_write reports its error through the callback, on a
// later turn, as before.
void UvConnection::issueWrite(WriteOp* op) {
  auto* stream = reinterpret_cast<uv_stream_t*>(handle_);
  size_t first = 0;
  if (queuedWrites_ == 0) {
    size_t total = 0;
    for (const auto& b : op->bufs) total += b.len;
    if (total <= kTryWriteAtMost) {
      int n = uv_try_write(stream, op->bufs.data(), static_cast<unsigned>(op->bufs.size()));
      if (n >= 0 && static_cast<size_t>(n) == total) {
        takenWrites_.push_back(std::move(op->fn));
        recycle(op);
        loop_.noteActivity();
        scheduleTakenWrites();
        return;
      }
      // Taken in part: the rest from where the socket stopped.
      for (size_t left = n > 0 ? static_cast<size_t>(n) : 0; left > 0; ++first) {
        uv_buf_t& b = op->bufs[first];
        if (left < b.len) {
          b.base += left;
          b.len -= static_cast<unsigned>(left);
          break;
        }
        left -= b.len;
      }
    }
  }
  op->owner = shared_from_this();
  ++queuedWrites_;
  int rc = uv_write(&op->req, stream, op->bufs.data() + first,
                    static_cast<unsigned>(op->bufs.size() - first), &UvConnection::onWrite);
  if (rc != 0) {
    --queuedWrites_;
    auto fn = std::move(op->fn);
    recycle(op);
    // Posted before the close, whose callbacks may write (and be refused).
    Error why = uvError("write", rc);
    failLater(std::move(fn), why);
    closeInLoop(why);
  }
}

void UvConnection::completeTakenWrites() {
  takenPosted_ = false;
  if (takenWrites_.empty() || completingTaken_) return;
  auto keep = shared_from_this();  // a callback may drop the last handle
  // Callbacks may write more: those wait for the next task, behind these.
  completingTaken_ = true;
  completing_.swap(takenWrites_);
  size_t i = 0;
  try {
    for (; i < completing_.size(); ++i) completing_[i](Error());
  } catch (...) {
    // The loop's task runner catches it; the rest still run, first, on the
    // next task.
    takenWrites_.insert(takenWrites_.begin(), std::make_move_iterator(completing_.begin() + i + 1),
                        std::make_move_iterator(completing_.end()));
    completing_.clear();
    completingTaken_ = false;
    scheduleTakenWrites();
    throw;
  }
  completing_.clear();
  completingTaken_ = false;
  scheduleTakenWrites();  // for any a callback's write left here (normally a task is posted)
}

// One posted task runs the callbacks of writes taken at once; on a loop
// that refuses it (finished) they run here.
void UvConnection::scheduleTakenWrites() {
  if (takenWrites_.empty() || takenPosted_) return;
  takenPosted_ = true;
  auto self = shared_from_this();
  if (!loop_.postMade([&] { return [self] { self->completeTakenWrites(); }; })) completeTakenWrites();
}

void UvConnection::recycle(WriteOp* op) {
  op->owner.reset();
  // Kept for the next write (a steady exchange allocates none); a burst's
  // surplus is freed.
  if (spareWrites_.size() < kSpareWrites) {
    spareWrites_.emplace_back(op);
  } else {
    delete op;
  }
}

void UvConnection::onWrite(uv_write_t* req, int status) {
  auto* op = static_cast<WriteOp*>(req->data);
  auto owner = std::move(op->owner);
  auto fn = std::move(op->fn);
  --owner->queuedWrites_;
  owner->recycle(op);
  owner->loop_.noteActivity();
  owner->completeTakenWrites();  // earlier writes, taken at once
  if (status == 0) {
    fn(Error());
    return;
  }
  if (!owner->error_) {
    owner->closeInLoop(uvError("write", status));
  }
  fn(owner->error_);
}

void UvConnection::closeInLoop(const Error& reason) {
  if (!startClosing(reason)) return;
  auto reads = takeReads();
  auto early = std::move(writesBeforeConnect_);
  writesBeforeConnect_.clear();
  if (handle_ != nullptr) {
    if (reading_) {
      uv_read_stop(reinterpret_cast<uv_stream_t*>(handle_));
      reading_ = false;
    }
    // libuv cancels queued writes (their callbacks see UV_ECANCELED and report
    // error_) and calls us back once the socket is gone.
    uv_close(reinterpret_cast<uv_handle_t*>(handle_), [](uv_handle_t* h) {
      auto* self = static_cast<UvConnection*>(h->data);
      delete reinterpret_cast<uv_tcp_t*>(h);
      self->handle_ = nullptr;
      self->self_.reset();  // may destroy *self
    });
  }
  failReads(reads);
  for (auto* op : early) {
    auto fn = std::move(op->fn);
    delete op;
    fn(error_);
  }
}

} // namespace actorpipe::transport::uv
