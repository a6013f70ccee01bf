// The uv transport's context and listener: one loop thread per context,
// sockets bound and accepted on it.
#include <actorpipe/transports/uv/factory.h>

#include <deque>
#include <future>
#include <mutex>
#include <set>

#include <uv.h>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/detail/loop_holder.h>
#include <actorpipe/transports/detail/handles.h>
#include <actorpipe/transports/detail/registry.h>
#include <actorpipe/transports/uv/connection.h>
#include <actorpipe/transports/uv/error.h>
#include <actorpipe/transports/uv/sockaddr.h>
#include <actorpipe/runtime/detail/check.h>

namespace actorpipe::transport::uv {
namespace {

class UvListener;
using UvRegistry = detail::Registry<UvConnection, UvListener>;

// Connections the kernel completes and keeps for us until we accept them.
constexpr int kBacklog = 1024;

class UvListener final : public Listener, public std::enable_shared_from_this<UvListener> {
 public:
  UvListener(detail::Loop& loop, std::shared_ptr<UvRegistry> registry)
      : keepLoop_(loop.weak_from_this().lock()), loop_(loop), registry_(std::move(registry)) {}

  // Loop thread.
  void bind(const SockAddr& addr);
  void failInLoop(const Error& error);

  void accept(accept_callback_fn fn) override;
  std::string addr() const override {
    std::lock_guard<std::mutex> guard(mutex_);
    return addr_;
  }
  void close() override {
    auto self = shared_from_this();
    loop_.post([self] { self->failInLoop(ACTORPIPE_ERROR(ListenerClosedError)); });
  }

 private:
  void match();
  std::shared_ptr<UvConnection> takeHeld();
  static void onConnection(uv_stream_t* server, int status);

  // As a connection's (detail/connection_base.h): a handle dropped after the
  // context posts its close to a finished loop, not to freed memory.
  const std::shared_ptr<detail::Loop> keepLoop_;
  detail::Loop& loop_;
  // The context's: connections we accept are closed when it closes. Shared,
  // not the context itself, which may be gone while we still run.
  std::shared_ptr<UvRegistry> registry_;
  uv_tcp_t* handle_{nullptr};
  // Keeps us alive while libuv holds our handle.
  std::shared_ptr<UvListener> self_;
  mutable std::mutex mutex_;
  std::string addr_;
  Error error_;
  std::deque<accept_callback_fn> accepts_;
  // libuv has accepted a connection we have not taken yet: it stopped
  // watching the socket until we do (see onConnection).
  bool held_{false};
};

class UvContext final : public Context {
 public:
  UvContext() : loop_("uv") {}
  ~UvContext() override { join(); }

  std::shared_ptr<Connection> connect(std::string addr) override;
  std::shared_ptr<Listener> listen(std::string addr) override;

  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }

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
  std::string domain_{"tcp"};
  std::string id_{"uv"};
  actorpipe::detail::LoopHolder loop_;
  std::shared_ptr<UvRegistry> registry_ = std::make_shared<UvRegistry>();
};

std::shared_ptr<Connection> UvContext::connect(std::string addr) {
  auto connection = std::make_shared<UvConnection>(loop(), addr);
  SockAddr sa;
  Error error = parseAddress(addr, sa);  // may block on DNS: done on the caller's thread
  bool posted = loop().post([registry = registry_, connection, sa, error] {
    if (registry->closed()) {
      connection->failConnect(registry->closed());
    } else if (error) {
      connection->failConnect(error);
    } else {
      registry->track(connection);
      connection->startConnect(sa.get());
    }
  });
  if (!posted) {
    connection->close(ACTORPIPE_ERROR(ContextClosedError));
  }
  return detail::handOut(std::move(connection));
}

std::shared_ptr<Listener> UvContext::listen(std::string addr) {
  auto listener = std::make_shared<UvListener>(loop(), registry_);
  SockAddr sa;
  Error error = parseAddress(addr, sa);
  if (!detail::runAndWait(loop(), [registry = registry_, listener, sa, error] {
        if (registry->closed()) {
          listener->failInLoop(registry->closed());
        } else if (error) {
          listener->failInLoop(error);
        } else {
          registry->track(listener);
          listener->bind(sa);
        }
      })) {
    listener->failInLoop(ACTORPIPE_ERROR(ContextClosedError));
  }
  return detail::handOut(std::move(listener));
}

void UvListener::bind(const SockAddr& addr) {
  handle_ = new uv_tcp_t;
  uv_tcp_init(loop_.uv(), handle_);
  handle_->data = this;
  self_ = shared_from_this();
  int rc = uv_tcp_bind(handle_, addr.get(), 0);
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(handle_), kBacklog, &UvListener::onConnection);
  }
  if (rc != 0) {
    failInLoop(ACTORPIPE_ERROR(UVError, "bind/listen on " + formatAddress(addr.get()), rc));
    return;
  }
  sockaddr_storage local{};
  int len = sizeof(local);
  uv_tcp_getsockname(handle_, reinterpret_cast<sockaddr*>(&local), &len);
  std::lock_guard<std::mutex> guard(mutex_);
  addr_ = formatAddress(reinterpret_cast<sockaddr*>(&local));
}

// The kernel's backlog is the only queue of connections: we take one from
// libuv only for an accept() that waits. A connection nobody asked for stays
// with libuv, which stops watching the socket until uv_accept takes it. Taking
// every connection as it came let a peer that connects faster than our
// accept() callbacks re-arm pile up descriptors and buffers for as long as it
// kept on (hostile/bounds_test.cc, the churn case).
void UvListener::onConnection(uv_stream_t* server, int status) {
  auto* self = static_cast<UvListener*>(server->data);
  self->loop_.noteActivity();
  if (status != 0 || self->error_) {
    return;  // a failed accept(2) concerns that one client only
  }
  self->held_ = true;
  self->match();
}

std::shared_ptr<UvConnection> UvListener::takeHeld() {
  ACTORPIPE_DCHECK(held_ && handle_ != nullptr);
  held_ = false;
  auto* client = new uv_tcp_t;
  uv_tcp_init(loop_.uv(), client);
  // Also starts watching the listening socket again.
  if (uv_accept(reinterpret_cast<uv_stream_t*>(handle_), reinterpret_cast<uv_stream_t*>(client)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(client), [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
    // A failed uv_accept does not watch the socket again (libuv's
    // uv_accept); listening anew does, and keeps the backlog.
    int rc = uv_listen(reinterpret_cast<uv_stream_t*>(handle_), kBacklog, &UvListener::onConnection);
    if (rc != 0) failInLoop(ACTORPIPE_ERROR(UVError, "listen again on " + addr(), rc));
    return nullptr;
  }
  sockaddr_storage peer{};
  int len = sizeof(peer);
  uv_tcp_getpeername(client, reinterpret_cast<sockaddr*>(&peer), &len);
  auto connection = std::make_shared<UvConnection>(loop_, formatAddress(reinterpret_cast<sockaddr*>(&peer)));
  connection->adopt(client);
  registry_->track(connection);
  return connection;
}

void UvListener::accept(accept_callback_fn fn) {
  auto self = shared_from_this();
  auto shared = std::make_shared<accept_callback_fn>(std::move(fn));
  if (!loop_.post([self, shared] {
        self->accepts_.push_back(std::move(*shared));
        self->match();
      })) {
    (*shared)(ACTORPIPE_ERROR(ContextClosedError), nullptr);
  }
}

void UvListener::match() {
  while (!accepts_.empty() && (held_ || error_)) {
    if (error_) {
      auto fn = std::move(accepts_.front());
      accepts_.pop_front();
      fn(error_, nullptr);
      continue;
    }
    auto connection = takeHeld();
    if (!connection) continue;  // the callback waits for the next one
    auto fn = std::move(accepts_.front());
    accepts_.pop_front();
    fn(Error(), detail::handOut(std::move(connection)));
  }
}

void UvListener::failInLoop(const Error& error) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (error_) {
    return;
  }
  error_ = error;
  if (handle_ != nullptr) {
    uv_close(reinterpret_cast<uv_handle_t*>(handle_), [](uv_handle_t* h) {
      auto* self = static_cast<UvListener*>(h->data);
      delete reinterpret_cast<uv_tcp_t*>(h);
      self->self_.reset();  // may destroy *self
    });
    handle_ = nullptr;
  }
  held_ = false;  // closing the handle closes what libuv held
  match();
}

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<UvContext>(); }

} // namespace actorpipe::transport::uv
