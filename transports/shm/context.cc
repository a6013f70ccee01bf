// The shm transport's context and listener.
#include <actorpipe/transports/shm/factory.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <vector>

#include <uv.h>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/detail/loop_holder.h>
#include <actorpipe/transports/detail/handles.h>
#include <actorpipe/transports/detail/registry.h>
#include <actorpipe/transports/shm/connection.h>
#include <actorpipe/transports/shm/socket.h>
#include <actorpipe/runtime/detail/check.h>

namespace actorpipe::transport::shm {
namespace {

class ShmListener;
// The context's: what it closes when it closes. Listeners share it, so that
// the connections they accept close with their context (as uv's do).
using ShmRegistry = detail::Registry<ShmConnection, ShmListener>;

class ShmListener final : public Listener, public std::enable_shared_from_this<ShmListener> {
 public:
  // `maxRingSize`: the largest ring an accepted peer may ask for.
  ShmListener(detail::Loop& loop, size_t maxRingSize, std::shared_ptr<ShmRegistry> registry)
      : keepLoop_(loop.weak_from_this().lock()), loop_(loop), maxRingSize_(maxRingSize), registry_(std::move(registry)) {}

  // Loop thread.
  void bind(const std::string& name);
  void failInLoop(const Error& error);
  // A connection's setup ended (ready, failed or abandoned): one more may
  // start.
  void setupEnded();

  void accept(accept_callback_fn fn) override {
    auto self = shared_from_this();
    auto shared = std::make_shared<accept_callback_fn>(std::move(fn));
    if (!loop_.post([self, shared] {
          self->accepts_.push_back(std::move(*shared));
          self->match();
        })) {
      (*shared)(ACTORPIPE_ERROR(ContextClosedError), nullptr);
    }
  }
  std::string addr() const override {
    std::lock_guard<std::mutex> guard(mutex_);
    return addr_;
  }
  void close() override {
    auto self = shared_from_this();
    loop_.post([self] { self->failInLoop(ACTORPIPE_ERROR(ListenerClosedError)); });
  }

 private:
  void onReadable();
  void startPolling();
  void pauseAccepting();
  // Connections accepted but still waiting for their setup: ours to close
  // when we close (the context's registry learns of them once set up).
  void trackPending(const std::shared_ptr<ShmConnection>& c) {
    if (pending_.size() >= 64 && pending_.size() >= 2 * liveAfterPrune_) {
      std::vector<std::weak_ptr<ShmConnection>> live;
      for (auto& w : pending_) {
        auto p = w.lock();
        if (p && !p->ready()) live.push_back(w);
      }
      pending_.swap(live);
      liveAfterPrune_ = pending_.size();
    }
    pending_.push_back(c);
  }
  void match() {
    while (!accepts_.empty() && (!ready_.empty() || error_)) {
      auto fn = std::move(accepts_.front());
      accepts_.pop_front();
      if (error_) {
        fn(error_, nullptr);
        continue;
      }
      auto c = std::move(ready_.front());
      ready_.pop_front();
      fn(Error(), detail::handOut(std::move(c)));
    }
  }

  // Out of descriptors or memory, accept4 fails and the socket stays
  // readable: polling it would spin. We look again after this long.
  static constexpr std::chrono::milliseconds kAcceptPause{100};

  // As a connection's (detail/connection_base.h): a handle dropped after the
  // context posts its close to a finished loop, not to freed memory.
  const std::shared_ptr<detail::Loop> keepLoop_;
  detail::Loop& loop_;
  size_t maxRingSize_;
  std::shared_ptr<ShmRegistry> registry_;
  int fd_{-1};
  uv_poll_t* poll_{nullptr};
  detail::Loop::TimerId pauseTimer_{0};  // 0: polling, full, or closed
  // Connections accepted whose setup has not ended; at kMaxSetups we stop
  // taking more from the kernel (`full_`) until one ends.
  size_t setups_{0};
  bool full_{false};
  std::shared_ptr<ShmListener> self_;
  mutable std::mutex mutex_;
  std::string addr_;
  Error error_;
  std::deque<accept_callback_fn> accepts_;
  std::deque<std::shared_ptr<Connection>> ready_;
  std::vector<std::weak_ptr<ShmConnection>> pending_;
  size_t liveAfterPrune_{32};
};

void ShmListener::bind(const std::string& name) {
  sockaddr_un address;
  socklen_t length;
  if (auto e = abstractAddress(name, address, length)) return failInLoop(e);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return failInLoop(ACTORPIPE_ERROR(SystemError, "socket", errno));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(fd_, 1024) != 0) {
    return failInLoop(ACTORPIPE_ERROR(SystemError, "bind/listen on shm://" + name, errno));
  }
  sockaddr_un bound{};
  socklen_t boundLength = sizeof(bound);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &boundLength);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    addr_ = abstractName(bound, boundLength);
  }
  self_ = shared_from_this();
  poll_ = new uv_poll_t;
  uv_poll_init(loop_.uv(), poll_, fd_);
  poll_->data = this;
  startPolling();
}

void ShmListener::startPolling() {
  uv_poll_start(poll_, UV_READABLE, [](uv_poll_t* handle, int status, int) {
    static_cast<ShmListener*>(handle->data)->onReadable();
  });
}

void ShmListener::pauseAccepting() {
  uv_poll_stop(poll_);
  std::weak_ptr<ShmListener> weak = shared_from_this();
  pauseTimer_ = loop_.after(kAcceptPause, [weak] {
    auto self = weak.lock();
    if (!self) return;
    self->pauseTimer_ = 0;
    if (!self->error_ && self->poll_ != nullptr) self->startPolling();
  });
}

// Counts a connection against kMaxSetups for as long as its setup callback
// lives: the connection lets go of it once called, failed or destroyed.
struct SetupSlot {
  explicit SetupSlot(std::weak_ptr<ShmListener> l) : listener(std::move(l)) {}
  ~SetupSlot() {
    if (auto l = listener.lock()) l->setupEnded();
  }
  std::weak_ptr<ShmListener> listener;
};

void ShmListener::setupEnded() {
  ACTORPIPE_DCHECK(loop_.ownsState());
  --setups_;
  if (full_ && setups_ < kMaxSetups && !error_ && poll_ != nullptr) {
    full_ = false;
    startPolling();
  }
}

void ShmListener::onReadable() {
  loop_.noteActivity();
  for (;;) {
    if (setups_ >= kMaxSetups) {
      // The rest wait in the kernel's backlog, not in our memory.
      uv_poll_stop(poll_);
      full_ = true;
      return;
    }
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // These concern the one client that gave up (or a signal): next one.
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM, and whatever else we cannot tell
      // will pass: the pending connection stays queued and the socket
      // readable, so polling on would spin and starve the loop.
      return pauseAccepting();
    }
    auto connection = std::make_shared<ShmConnection>(loop_, "shm peer of " + addr_);
    trackPending(connection);
    std::weak_ptr<ShmListener> weak = shared_from_this();
    ++setups_;
    auto slot = std::make_shared<SetupSlot>(weak);
    connection->startAsServer(fd, maxRingSize_, [weak, slot](const Error& e, std::shared_ptr<ShmConnection> c) {
      auto self = weak.lock();
      if (e || !self) return;  // a peer that failed its setup concerns itself only
      if (self->error_) return c->close(self->error_);
      if (self->registry_->closed()) return c->close(self->registry_->closed());
      self->registry_->track(c);
      self->ready_.push_back(std::move(c));
      self->match();
    });
  }
}

void ShmListener::failInLoop(const Error& error) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (error_) return;
  error_ = error;
  if (pauseTimer_ != 0) {
    loop_.cancel(pauseTimer_);
    pauseTimer_ = 0;
  }
  if (poll_ != nullptr) {
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) {
      auto* self = static_cast<ShmListener*>(h->data);
      delete reinterpret_cast<uv_poll_t*>(h);
      self->self_.reset();  // may destroy *self
    });
    poll_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  for (auto& c : ready_) c->close(error);
  ready_.clear();
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& w : pending) {
    if (auto c = w.lock()) c->abandonSetup(error);
  }
  match();
}

bool memfdWorks() {
  int fd = ::memfd_create("actorpipe-probe", MFD_CLOEXEC);
  if (fd < 0) return false;
  closeMemfd(fd);
  return true;
}

size_t roundUpToPowerOfTwo(size_t n) {
  size_t p = 4096;
  while (p < n) p <<= 1;
  return p;
}

class ShmContext final : public Context, public std::enable_shared_from_this<ShmContext> {
 public:
  explicit ShmContext(size_t ringSize)
      : ringSize_(roundUpToPowerOfTwo(ringSize)), domain_("shm/" + hostIdentity()), viable_(memfdWorks()) {}
  ~ShmContext() override { join(); }

  std::shared_ptr<Connection> connect(std::string addr) override {
    auto connection = std::make_shared<ShmConnection>(loop(), "shm://" + addr);
    auto self = shared_from_this();
    if (!loop().post([self, connection, addr] {
          if (self->registry_->closed()) return connection->failEarly(self->registry_->closed());
          self->registry_->track(connection);
          connection->startAsClient(addr, self->ringSize_);
        })) {
      connection->close(ACTORPIPE_ERROR(ContextClosedError));
    }
    return detail::handOut(std::move(connection));
  }

  std::shared_ptr<Listener> listen(std::string addr) override {
    auto listener = std::make_shared<ShmListener>(loop(), ringSize_, registry_);
    auto self = shared_from_this();
    if (!detail::runAndWait(loop(), [self, listener, addr] {
          if (self->registry_->closed()) {
            listener->failInLoop(self->registry_->closed());
          } else {
            self->registry_->track(listener);
            listener->bind(addr);
          }
        })) {
      listener->failInLoop(ACTORPIPE_ERROR(ContextClosedError));
    }
    return detail::handOut(std::move(listener));
  }

  bool isViable() const override { return viable_; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  bool knowsPeerProcess() const override { return true; }
  void close() override { shutdown(ACTORPIPE_ERROR(ContextClosedError)); }
  void join() override {
    close();
    loop_.stopIfOwned();
  }
  detail::Loop& loop() override { return loop_.get(); }
  bool adoptLoop(std::shared_ptr<detail::Loop> loop) override { return loop_.adopt(std::move(loop)); }

  void shutdown(const Error& reason) override {
    // Not `this`: called from our destructor, the task may run after we are
    // gone (on a loop lent to us, which stopIfOwned() does not wait for).
    loop().post([registry = registry_, reason] { registry->closeAll(reason); });
  }

 private:
  size_t ringSize_;
  std::string domain_;
  std::string id_{"shm"};
  bool viable_;
  detail::LoopHolder loop_{"shm"};
  std::shared_ptr<ShmRegistry> registry_ = std::make_shared<ShmRegistry>();
};

}  // namespace

std::shared_ptr<Context> create(size_t ringSize) { return std::make_shared<ShmContext>(ringSize); }

} // namespace actorpipe::transport::shm
