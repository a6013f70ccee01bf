// The ibv transport's context and listener. Bootstrap connections come from
// a uv context of its own, on the same loop.
#include <actorpipe/transports/ibv/factory.h>

#include <deque>
#include <map>
#include <mutex>

#include <uv.h>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/detail/loop_holder.h>
#include <actorpipe/transports/detail/handles.h>
#include <actorpipe/transports/ibv/connection.h>
#include <actorpipe/transports/ibv/device.h>
#include <actorpipe/transports/ibv/not_viable.h>
#include <actorpipe/transports/uv/factory.h>

namespace actorpipe::transport::ibv {
namespace {

class IbvContext;

class IbvListener final : public Listener, public std::enable_shared_from_this<IbvListener> {
 public:
  IbvListener(std::shared_ptr<IbvContext> context, std::shared_ptr<Listener> bootstrap)
      : context_(std::move(context)), bootstrap_(std::move(bootstrap)) {}
  void arm();
  void startAccepted(const std::shared_ptr<IbvConnection>& connection);
  void accept(accept_callback_fn fn) override;
  std::string addr() const override { return bootstrap_->addr(); }
  void close() override { bootstrap_->close(); }

 private:
  void match();
  std::shared_ptr<IbvContext> context_;
  std::shared_ptr<Listener> bootstrap_;
  std::mutex mutex_;
  Error error_;
  std::deque<accept_callback_fn> accepts_;
  std::deque<std::shared_ptr<Connection>> ready_;
};

// One completion channel for all of a context's connections: its fd wakes
// the loop, the event names the completion queue, whose connection then
// polls. It is an object of its own, held by its poll handle while that is
// open, so that a context destroyed while its lent loop runs on leaves the
// handle to a close task rather than to freed memory (the handle's data was
// the context itself). Untested on hardware: there is no RDMA device here.
struct Completions : std::enable_shared_from_this<Completions> {
  explicit Completions(std::shared_ptr<Device> device) : device(std::move(device)) {}

  // Any thread.
  void track(const std::shared_ptr<IbvConnection>& c) {
    std::lock_guard<std::mutex> guard(mutex);
    for (auto it = connections.begin(); it != connections.end();) {
      it = it->second.expired() ? connections.erase(it) : std::next(it);
    }
    connections[c->cq()] = c;
  }
  template <typename Fn>
  void forEach(Fn fn) {
    std::lock_guard<std::mutex> guard(mutex);
    for (auto& c : connections) {
      if (auto live = c.second.lock()) fn(*live);
    }
  }

  // Loop thread.
  void watch(actorpipe::detail::Loop& on) {
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (poll != nullptr || closed) return;
    }
    loop = &on;
    poll = new uv_poll_t;
    if (uv_poll_init(on.uv(), poll, device->channel->fd) != 0) {
      delete poll;
      poll = nullptr;
      return;
    }
    poll->data = this;
    held = shared_from_this();
    uv_poll_start(poll, UV_READABLE, [](uv_poll_t* h, int, int) {
      auto* self = static_cast<Completions*>(h->data);
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      while (ibv_get_cq_event(self->device->channel, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        std::lock_guard<std::mutex> guard(self->mutex);
        auto it = self->connections.find(cq);
        if (it != self->connections.end()) {
          if (auto c = it->second.lock()) c->onCompletionEvent();
        }
      }
      self->loop->noteActivity();
    });
  }
  // Loop thread; or, with loopFinished, any thread once the loop refused a
  // post (it has finished its turns; its teardown closes every handle, ours
  // too, with no callback, and may still be doing so: the handle is left to
  // it, a hundred bytes never freed, and only our hold on ourselves goes).
  void unwatch(bool loopFinished) {
    std::shared_ptr<Completions> drop;
    {
      std::lock_guard<std::mutex> guard(mutex);
      if (closed) return;
      closed = true;
      if (poll == nullptr) return;
      if (loopFinished) {
        poll = nullptr;
        drop = std::move(held);
      }
    }
    if (loopFinished) return;  // the caller holds us: drop may not free *this here
    uv_close(reinterpret_cast<uv_handle_t*>(poll), [](uv_handle_t* h) {
      auto* self = static_cast<Completions*>(h->data);
      delete reinterpret_cast<uv_poll_t*>(h);
      self->poll = nullptr;
      self->held.reset();  // may free *self
    });
  }

  const std::shared_ptr<Device> device;
  std::mutex mutex;
  std::map<ibv_cq*, std::weak_ptr<IbvConnection>> connections;
  // Loop thread only.
  actorpipe::detail::Loop* loop{nullptr};
  uv_poll_t* poll{nullptr};
  std::shared_ptr<Completions> held;  // while the handle is open
  bool closed{false};
};

class IbvContext final : public Context, public std::enable_shared_from_this<IbvContext> {
 public:
  explicit IbvContext(std::shared_ptr<Device> device)
      : device_(std::move(device)), uv_(uv::create()), completions_(std::make_shared<Completions>(device_)) {}
  ~IbvContext() override { join(); }

  std::shared_ptr<Connection> connect(std::string addr) override {
    auto connection = std::make_shared<IbvConnection>(loop(), device_, uv_->connect(addr), "ibv://" + addr);
    auto self = shared_from_this();
    loop().post([self, connection] {
      self->completions_->watch(self->loop());
      self->completions_->track(connection);
      connection->start([](const Error&) {});
    });
    return detail::handOut(std::move(connection));
  }

  std::shared_ptr<Listener> listen(std::string addr) override {
    auto listener = std::make_shared<IbvListener>(shared_from_this(), uv_->listen(addr));
    listener->arm();
    return detail::handOut(std::move(listener));
  }

  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override { shutdown(ACTORPIPE_ERROR(ContextClosedError)); }
  void join() override {
    close();
    uv_->join();
    loop_.stopIfOwned();
  }
  detail::Loop& loop() override { return loop_.get(); }
  bool adoptLoop(std::shared_ptr<detail::Loop> loop) override {
    return loop_.adopt(loop) && uv_->adoptLoop(loop);
  }
  void shutdown(const Error& reason) override {
    uv_->shutdown(reason);
    completions_->forEach([&](IbvConnection& c) { c.close(reason); });
    // The close task holds the completions, not us: from the destructor on
    // a lent loop, it runs after we are gone. Without a loop yet nothing was
    // ever watched (watch runs on a loop task).
    auto loop = loop_.existing();
    auto completions = completions_;
    if (loop && !loop->post([completions] { completions->unwatch(false); })) completions->unwatch(true);
  }

  std::shared_ptr<Device> device() const { return device_; }

 private:
  std::shared_ptr<Device> device_;
  std::shared_ptr<Context> uv_;
  std::string domain_{"ibv"};
  std::string id_{"ibv"};
  actorpipe::detail::LoopHolder loop_{"ibv"};
  std::shared_ptr<Completions> completions_;

  friend class IbvListener;
};

void IbvListener::arm() {
  auto self = shared_from_this();
  bootstrap_->accept([self](const Error& e, std::shared_ptr<Connection> bootstrap) {
    if (e) {
      // Closed (or failed): connections set up but not accepted close with
      // it, as shm's and uv's do.
      std::deque<std::shared_ptr<Connection>> ready;
      {
        std::lock_guard<std::mutex> guard(self->mutex_);
        self->error_ = e;
        ready.swap(self->ready_);
      }
      for (auto& c : ready) c->close(e);
    } else {
      auto connection = std::make_shared<IbvConnection>(self->context_->loop(), self->context_->device_, bootstrap,
                                                        "ibv peer " + bootstrap->peerAddress());
      // On the ibv loop: the bootstrap's accept may run on a uv loop of its
      // own (ibv used on its own, not registered with a Context).
      self->context_->loop().post([self, connection] {
        self->context_->completions_->watch(self->context_->loop());
        self->context_->completions_->track(connection);
        self->startAccepted(connection);
      });
      self->arm();
    }
    self->match();
  });
}

// Ibv loop thread.
void IbvListener::startAccepted(const std::shared_ptr<IbvConnection>& connection) {
  auto self = shared_from_this();
  connection->start([self, connection](const Error& e) {
    if (e) return;  // a peer that failed its setup concerns itself only
    Error closed;
    {
      std::lock_guard<std::mutex> guard(self->mutex_);
      closed = self->error_;
      if (!closed) self->ready_.push_back(connection);
    }
    if (closed) return connection->close(closed);
    self->match();  // an accept() may be waiting for it
  });
}

void IbvListener::accept(accept_callback_fn fn) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    accepts_.push_back(std::move(fn));
  }
  auto self = shared_from_this();
  context_->loop().post([self] { self->match(); });
}

void IbvListener::match() {
  for (;;) {
    accept_callback_fn fn;
    std::shared_ptr<Connection> connection;
    Error error;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (accepts_.empty() || (ready_.empty() && !error_)) return;
      fn = std::move(accepts_.front());
      accepts_.pop_front();
      if (!ready_.empty()) {
        connection = std::move(ready_.front());
        ready_.pop_front();
      } else {
        error = error_;
      }
    }
    fn(error, detail::handOut(std::move(connection)));
  }
}

}  // namespace

std::shared_ptr<Context> create() {
  std::string why;
  auto device = openFirstActivePort(why);
  if (!device) return std::make_shared<NotViableContext>(why);
  return std::make_shared<IbvContext>(device);
}

} // namespace actorpipe::transport::ibv
