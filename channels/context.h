#pragma once
// What every channel offers: moving tensor data between the two ends of a
// pipe, for some device types. A channel is chosen per device type during the
// pipe's handshake, from those both peers registered with the same domain
// descriptor (see docs/architecture.md, "Negotiation").
#include <memory>
#include <string>
#include <vector>

namespace actorpipe::channel {

class Context {
 public:
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
};

} // namespace actorpipe::channel
