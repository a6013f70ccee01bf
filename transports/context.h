#pragma once
// What every transport offers: byte-stream connections between two contexts,
// listeners that accept them, and the context that makes both. Transports
// carry the pipe's control frames and inline data; they know nothing of
// messages. Callbacks run on the transport's loop thread.
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <actorpipe/runtime/detail/arrivals.h>
#include <actorpipe/runtime/detail/function.h>
#include <actorpipe/runtime/detail/peer_process.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {
class Loop;
}

namespace actorpipe::transport {

// TensorPipe spells the transport-level kinds under transport::. They are
// the same types as actorpipe's, so `isOfType<transport::EOFError>()` holds
// for the EOF that a pipe reports when its peer hangs up.
using EOFError = ::actorpipe::EOFError;
using ListenerClosedError = ::actorpipe::ListenerClosedError;
using ConnectionClosedError = ::actorpipe::ConnectionClosedError;
using ContextClosedError = ::actorpipe::ContextClosedError;
using ContextNotViableError = ::actorpipe::ContextNotViableError;

// No interface, or no usable address on it, for the address lookups
// (uv/utility.h, ibv/utility.h; TensorPipe names it uv:: and ibv::).
class NoAddrFoundError final : public BaseError {
 public:
  NoAddrFoundError() = default;
  explicit NoAddrFoundError(std::string where) : where_(std::move(where)) {}
  std::string what() const override {
    return where_.empty() ? "no address found" : "no address found: " + where_;
  }
 private:
  std::string where_;
};

struct Slice {
  const void* ptr;
  size_t length;
};

// The pieces of one write, sent back to back. Up to four are kept inline (a
// pipe writes its frame and the message's inline data: usually one or two),
// so a write allocates nothing for its list.
class Slices {
 public:
  Slices() = default;
  Slices(std::initializer_list<Slice> list) {
    for (const Slice& s : list) push_back(s);
  }
  void push_back(Slice s) {
    if (size_ < kInline) {
      inline_[size_] = s;
    } else {
      if (size_ == kInline) more_.assign(inline_, inline_ + kInline);
      more_.push_back(s);
    }
    ++size_;
  }
  void reserve(size_t n) {
    if (n > kInline) more_.reserve(n);
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Slice* data() const { return size_ <= kInline ? inline_ : more_.data(); }
  const Slice* begin() const { return data(); }
  const Slice* end() const { return data() + size_; }
  const Slice& operator[](size_t i) const { return data()[i]; }

 private:
  static constexpr size_t kInline = 4;
  Slice inline_[kInline]{};
  std::vector<Slice> more_;
  size_t size_{0};
};

class Connection {
 public:
  // Closures of up to 64 bytes (a few shared_ptrs) stay inline: a pipe
  // issues several reads and writes per message (detail/function.h).
  using read_callback_fn = actorpipe::detail::Function<void(const Error&), 64>;
  using write_callback_fn = actorpipe::detail::Function<void(const Error&), 64>;

  virtual ~Connection() = default;

  // Reads exactly `length` bytes into `ptr`. Reads complete in the order they
  // were asked for; so do writes.
  virtual void read(void* ptr, size_t length, read_callback_fn fn) = 0;
  // Loop thread, and only inside one of this connection's read callbacks:
  // reads exactly `length` bytes into `ptr` and returns true if they are
  // here already, with no read queued before them; otherwise reads nothing
  // and returns false (ask with read() then). What a frame's header says
  // follows it has usually arrived with it: taking it at once saves a
  // queued read and its callback per message.
  virtual bool readNow(void* /*ptr*/, size_t /*length*/) { return false; }
  // Writes the slices back to back. Their memory must stay valid until `fn`.
  virtual void write(Slices slices, write_callback_fn fn) = 0;
  void write(const void* ptr, size_t length, write_callback_fn fn) {
    write(Slices{{ptr, length}}, std::move(fn));
  }
  // Fails every pending and later operation with `reason`; releases the socket.
  virtual void close(Error reason) = 0;
  void close() { close(ACTORPIPE_ERROR(EOFError)); }
  // "127.0.0.1:4242": for error messages.
  virtual std::string peerAddress() const = 0;
  // Called once, on the loop, when the peer closes its end or dies, even if
  // no operation is pending. Bytes that arrived before stay readable; reads
  // beyond them fail with EOF.
  virtual void onPeerGone(std::function<void(const Error&)> fn) = 0;
  // The peer process as the kernel names it, once connected; empty where
  // the transport cannot know (tcp, ibv). Loop thread.
  virtual std::optional<actorpipe::detail::PeerProcess> peerProcess() const { return std::nullopt; }
  // Once its pipe is established: where to count the reads that bring the
  // peer's bytes (detail/arrivals.h). Any thread; counted on the loop.
  virtual void countArrivals(std::shared_ptr<actorpipe::detail::Arrivals> /*arrivals*/) {}
};

class Listener {
 public:
  using accept_callback_fn = std::function<void(const Error&, std::shared_ptr<Connection>)>;

  virtual ~Listener() = default;
  // Hands over the next incoming connection (one per call, in arrival order).
  virtual void accept(accept_callback_fn fn) = 0;
  // The bound address, port resolved: what a peer passes to connect().
  virtual std::string addr() const = 0;
  virtual void close() = 0;
};

}  // namespace actorpipe::transport

// In namespace tensorpipe: see runtime/fwd.h. Names of actorpipe::transport
// are spelled out here (an unqualified Listener would be tensorpipe::Listener).
namespace tensorpipe::transport {

class Context {
 public:
  using Connection = ::actorpipe::transport::Connection;
  using Listener = ::actorpipe::transport::Listener;

  virtual ~Context() = default;

  // Never fails synchronously: a connection that cannot be made fails its
  // operations with a ConnectError naming the address and the cause.
  virtual std::shared_ptr<Connection> connect(std::string addr) = 0;
  // Binds at once; a listener that could not bind fails every accept() with
  // the reason and reports an empty addr().
  virtual std::shared_ptr<Listener> listen(std::string addr) = 0;

  // Whether this transport can work on this host at all.
  virtual bool isViable() const = 0;
  // Two contexts can connect when their domain descriptors are equal.
  virtual const std::string& domainDescriptor() const = 0;
  // TensorPipe's question for the same rule, asked with the peer's descriptor.
  virtual bool canCommunicateWithRemote(const std::string& remoteDomainDescriptor) const {
    return remoteDomainDescriptor == domainDescriptor();
  }
  virtual void setId(std::string id) = 0;
  // Whether its connections can name the peer process (Connection::peerProcess).
  virtual bool knowsPeerProcess() const { return false; }

  virtual void close() = 0;
  virtual void join() = 0;

  // --- for actorpipe's core --------------------------------------------
  // The loop that runs this transport's handles, and every pipe built on it.
  virtual actorpipe::detail::Loop& loop() = 0;
  // Runs the transport on its Context's loop; false if it already runs on
  // one of its own (it was used before it was registered).
  virtual bool adoptLoop(std::shared_ptr<actorpipe::detail::Loop> loop) = 0;
  // Fails every connection and listener with `reason`: what happens when the
  // transport's supervising actor goes down.
  virtual void shutdown(const Error& reason) = 0;
};

}  // namespace tensorpipe::transport
