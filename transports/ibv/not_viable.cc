#include <actorpipe/transports/ibv/not_viable.h>

#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::transport::ibv {
namespace {

// A connection that never was: every operation fails with the reason.
class FailedConnection final : public Connection {
 public:
  FailedConnection(detail::Loop& loop, Error error) : loop_(loop), error_(std::move(error)) {}
  void read(void*, size_t, read_callback_fn fn) override { later([fn, e = error_] { fn(e); }); }
  void write(Slices, write_callback_fn fn) override { later([fn, e = error_] { fn(e); }); }
  void close(Error) override {}
  std::string peerAddress() const override { return "(no ibv)"; }
  void onPeerGone(std::function<void(const Error&)>) override {}

 private:
  // Callbacks run on the loop, as every transport's do.
  void later(std::function<void()> fn) {
    if (!loop_.post(fn)) fn();
  }
  detail::Loop& loop_;
  Error error_;
};

class FailedListener final : public Listener {
 public:
  FailedListener(detail::Loop& loop, Error error) : loop_(loop), error_(std::move(error)) {}
  void accept(accept_callback_fn fn) override {
    auto e = error_;
    if (!loop_.post([fn, e] { fn(e, nullptr); })) fn(e, nullptr);
  }
  std::string addr() const override { return std::string(); }
  void close() override {}

 private:
  detail::Loop& loop_;
  Error error_;
};

}  // namespace

std::shared_ptr<Connection> NotViableContext::connect(std::string addr) {
  return std::make_shared<FailedConnection>(
      loop(), ACTORPIPE_ERROR(ConnectError, "ibv://" + addr, "ibv is not viable here: " + why_));
}

std::shared_ptr<Listener> NotViableContext::listen(std::string addr) {
  return std::make_shared<FailedListener>(
      loop(), ACTORPIPE_ERROR(LogicError, "cannot listen on ibv://" + addr + ": ibv is not viable here: " + why_));
}

} // namespace actorpipe::transport::ibv
