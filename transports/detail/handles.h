#pragma once
// What a transport hands out from connect(), listen() and accept(): the
// user's handle on a connection or listener. Dropping the last handle closes
// it, as TensorPipe's boilerplate does in its destructors. The transport's own
// object holds itself while its socket is open (libuv keeps a pointer to it),
// so without a handle a connection its user forgot to close stayed open, its
// descriptor and buffers held and its peer never told, until the whole
// context closed. The transport keeps the object itself in its registry and
// its callbacks; only users hold handles.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <actorpipe/transports/context.h>

namespace actorpipe::detail {

class ConnectionHandle final : public transport::Connection {
 public:
  explicit ConnectionHandle(std::shared_ptr<transport::Connection> impl) : impl_(std::move(impl)) {}
  ~ConnectionHandle() override { impl_->close(ACTORPIPE_ERROR(ConnectionClosedError)); }
  ConnectionHandle(const ConnectionHandle&) = delete;
  ConnectionHandle& operator=(const ConnectionHandle&) = delete;

  using transport::Connection::close;
  using transport::Connection::write;
  void read(void* ptr, size_t length, read_callback_fn fn) override { impl_->read(ptr, length, std::move(fn)); }
  bool readNow(void* ptr, size_t length) override { return impl_->readNow(ptr, length); }
  void write(transport::Slices slices, write_callback_fn fn) override { impl_->write(std::move(slices), std::move(fn)); }
  void close(Error reason) override { impl_->close(std::move(reason)); }
  std::string peerAddress() const override { return impl_->peerAddress(); }
  void onPeerGone(std::function<void(const Error&)> fn) override { impl_->onPeerGone(std::move(fn)); }
  std::optional<PeerProcess> peerProcess() const override { return impl_->peerProcess(); }
  void countArrivals(std::shared_ptr<Arrivals> arrivals) override { impl_->countArrivals(std::move(arrivals)); }

 private:
  const std::shared_ptr<transport::Connection> impl_;
};

class ListenerHandle final : public transport::Listener {
 public:
  explicit ListenerHandle(std::shared_ptr<transport::Listener> impl) : impl_(std::move(impl)) {}
  ~ListenerHandle() override { impl_->close(); }
  ListenerHandle(const ListenerHandle&) = delete;
  ListenerHandle& operator=(const ListenerHandle&) = delete;

  void accept(accept_callback_fn fn) override { impl_->accept(std::move(fn)); }
  std::string addr() const override { return impl_->addr(); }
  void close() override { impl_->close(); }

 private:
  const std::shared_ptr<transport::Listener> impl_;
};

inline std::shared_ptr<transport::Connection> handOut(std::shared_ptr<transport::Connection> impl) {
  return impl ? std::make_shared<ConnectionHandle>(std::move(impl)) : nullptr;
}
inline std::shared_ptr<transport::Listener> handOut(std::shared_ptr<transport::Listener> impl) {
  return impl ? std::make_shared<ListenerHandle>(std::move(impl)) : nullptr;
}

}  // namespace actorpipe::detail
