#pragma once
// What every channel offers: moving tensor data between the two ends of a
// pipe, for some device types. A channel is chosen per device type during the
// pipe's handshake, from those both peers registered with the same domain
// descriptor (see docs/architecture.md, "Negotiation").
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/runtime/buffer.h>
#include <actorpipe/runtime/detail/arrivals.h>
#include <actorpipe/runtime/detail/peer_process.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {
class Loop;
}

namespace actorpipe::channel {

// How a tensor that is not in CPU memory rides the pipe's own connection
// (cuda_basic): in chunks of chunkBytes(), through host memory the stager
// lends. The sender's pipe asks each chunk copied into a slot (toHost) and
// writes the slot on its connection once the copy is done; the receiver's
// pipe reads each chunk into a slot and asks it copied into the tensor
// (fromHost). A slot is reused only after its chunk is written or copied
// out, so the device copies of one chunk overlap the connection's moving of
// another; at most kSlots per direction, so what a peer can make us stage
// is bounded whatever the tensor's length. Completions may come in any
// order; each `done` runs on the pipe's loop. Loop thread only.
using done_fn = std::function<void(const Error&)>;

class Stager {
 public:
  enum class Side { kOut, kIn };
  static constexpr size_t kSlots = 4;
  virtual ~Stager() = default;
  virtual size_t chunkBytes() const = 0;
  // The host memory of `slot` (chunkBytes() long), made on first use and
  // kept with the endpoint; nullptr with `error` set if it cannot be made.
  virtual void* slot(Side side, size_t slot, Error& error) = 0;
  // Copies `length` bytes at `offset` in `buffer` into `host`.
  virtual void toHost(void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) = 0;
  // Copies `length` bytes from `host` to `offset` in `buffer`.
  virtual void fromHost(const void* host, const Buffer& buffer, size_t offset, size_t length, done_fn done) = 0;
};

// TensorPipe spells the channel-level kinds under channel::; here they are
// actorpipe's own types.
using ContextClosedError = ::actorpipe::ContextClosedError;
using ChannelClosedError = ::actorpipe::ChannelClosedError;
using ContextNotViableError = ::actorpipe::ContextNotViableError;

// One end of an out-of-band channel inside one pipe: an ordered stream of
// buffers to the other end. The pipe calls it from its loop thread, in
// message order; callbacks may come from any thread.
class Endpoint {
 public:
  using done_fn = std::function<void(const Error&)>;
  virtual ~Endpoint() = default;
  // Starts moving `length` bytes at `ptr` to the peer. Returns what the peer
  // needs to receive them (it travels in the message frame; may be empty).
  virtual std::string send(const void* ptr, size_t length, done_fn done) = 0;
  // Receives the next buffer the peer sent, into `ptr`.
  virtual void recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) = 0;
  // The same for any kind of buffer: channels of other devices (cuda_*)
  // override these; CPU channels take the CPU pointer. A buffer whose kind
  // the channel does not move fails with a LogicError.
  virtual std::string sendBuffer(const Buffer& buffer, size_t length, done_fn done);
  virtual void recvBuffer(const std::string& descriptor, const Buffer& buffer, size_t length, done_fn done);
  // Whether this channel can send `buffer` (checked while the message is
  // built, before anything is sent: a write with a tensor it cannot move
  // fails alone, the pipe carries on). CPU channels take any CPU memory.
  virtual Error checkBuffer(const Buffer& buffer, size_t length) { return Error(); }
  // Fails pending and later operations with `reason`. Any thread.
  virtual void close(const Error& reason) = 0;
  // Tensors shorter than this travel inline on the pipe's connection instead:
  // below it, the channel's own costs (system calls, descriptors) outweigh
  // the copy it saves. Both sides need not agree: each frame says which.
  virtual size_t inlineBelow() const { return 0; }
  // The pipe's loop (called once, on it, right after the endpoint is made).
  virtual void attach(actorpipe::detail::Loop& loop) {}
  // Loop thread: complete at once whatever is already complete (the pipe is
  // about to fail; what the peer finished must not be reported as failed).
  virtual void flush() {}
  // Once the pipe is established: how to learn which process the peer is
  // (channels that need it: see Context::needsPeerProcess).
  virtual void setPeerProcess(actorpipe::detail::PeerProcessLookup lookup) {}
  // Once the pipe is established, on its loop: where to count the peer's
  // bytes as they arrive (detail/arrivals.h). Channels whose copies of a
  // large tensor take long count as they go; those on the pipe's connection
  // (basic, cuda_basic) need not: it counts.
  virtual void countArrivals(std::shared_ptr<actorpipe::detail::Arrivals> /*arrivals*/) {}
  // Channels whose bytes ride the pipe's connection through host memory
  // (cuda_basic: sendsInline() and an endpoint) lend their staging here.
  // close() on such an endpoint returns once no copy it started still reads
  // or writes a tensor's memory (the pipe then fails the operations); a
  // stager may bound that wait (cuda_basic: 10 s, then it logs). Its
  // checkBuffer() is asked for the reader's buffer too, with the peer's
  // length.
  virtual Stager* stager() { return nullptr; }
};

}  // namespace actorpipe::channel

// In namespace tensorpipe: see runtime/fwd.h.
namespace tensorpipe::channel {

class Context {
 public:
  using Endpoint = ::actorpipe::channel::Endpoint;

  virtual ~Context() = default;

  // The device types whose tensors this channel moves ("cpu", "cuda").
  virtual const std::vector<std::string>& deviceTypes() const = 0;
  // Whether this channel can work on this host at all.
  virtual bool isViable() const = 0;
  // Two peers can use the channel when their domain descriptors are equal.
  virtual const std::string& domainDescriptor() const = 0;
  virtual void setId(std::string id) = 0;
  virtual void close() = 0;
  virtual void join() = 0;

  // --- for actorpipe's core --------------------------------------------
  // Inline channels let the pipe stream a tensor's bytes right behind its
  // message frame on the pipe's own connection (no extra sockets, no extra
  // round trip). Out-of-band channels move the bytes themselves.
  virtual bool sendsInline() const = 0;
  // What this side tells the peer about itself in its hello (cma: where to
  // find a probe word), and whether the peer's is reachable from here. A
  // channel the acceptor cannot reach is not chosen (it says why).
  // `current` is the kernel's word on the peer over the connection the
  // hello came on (null where that transport cannot tell). Never act on a
  // pid or address from `peerDetail` alone: the peer wrote it.
  virtual std::string helloDetail() const { return std::string(); }
  virtual bool reachable(const std::string& peerDetail, const actorpipe::detail::PeerProcess* current,
                         std::string& why) const {
    return true;
  }
  // Channels that act on the peer's process (cma) are chosen only over a
  // transport that can name it (transport::Context::knowsPeerProcess).
  virtual bool needsPeerProcess() const { return false; }
  // Whether each pipe makes an endpoint of this channel: out-of-band
  // channels do; inline ones that stage through host memory (cuda_basic)
  // do too, for their staging.
  virtual bool makesEndpoints() const { return !sendsInline(); }
  // Out-of-band channels make one endpoint per pipe. The accepting side
  // makes it first and fills `setup` with what the connecting side needs
  // (it travels in the welcome frame); an error means the channel cannot
  // serve this pipe.
  virtual std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error& error) {
    error = ACTORPIPE_ERROR(::actorpipe::LogicError, "this channel has no endpoints");
    return nullptr;
  }
  virtual std::shared_ptr<Endpoint> connectEndpoint(const std::string& setup, Error& error) {
    error = ACTORPIPE_ERROR(::actorpipe::LogicError, "this channel has no endpoints");
    return nullptr;
  }
};

}  // namespace tensorpipe::channel
