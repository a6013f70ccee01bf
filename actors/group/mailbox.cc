#include <actorpipe/actors/group/mailbox.h>

#include <cstring>

#include <actorpipe/actors/backends.h>
#include <actorpipe/actors/group/frames.h>
#include <actorpipe/actors/pipe_tensor.h>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadlineAfter(Timeout timeout) {
  if (timeout == kForever) return Clock::time_point::max();
  return Clock::now() + timeout;
}

std::string peerName(int id) {
  return id < 0 ? std::string("the server") : "client " + std::to_string(id);
}

} // namespace

std::shared_ptr<Context> makeMessagingContext(const std::string& name, const std::string& secret) {
  auto context = std::make_shared<Context>(ContextOptions().name(name).secret(secret));
  registerDefaultBackends(*context);
  return context;
}

Mailbox::~Mailbox() { shutdown(); }

void Mailbox::shutdown() {
  if (shutDown_.exchange(true)) return;
  close();
  context_->join();
}

void Mailbox::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
    changed_.notify_all();
  }
  context_->close();
}

Error Mailbox::parseHeader(const std::string& metadata, std::string& tag, uint64_t& id) {
  MailboxHeader header;
  if (Error error = decode(metadata, header)) return error;
  tag = std::move(header.tag);
  id = header.id;
  return Error::kSuccess;
}

void Mailbox::add(int id, std::shared_ptr<Pipe> pipe) {
  std::lock_guard<std::mutex> lock(mutex_);
  Peer& peer = peers_[id];
  peer.id = id;
  peer.pipe = std::move(pipe);
  readNext(peer);
  changed_.notify_all();
}

std::vector<int> Mailbox::peers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int> ids;
  for (const auto& entry : peers_) {
    if (!entry.second.dead) ids.push_back(entry.first);
  }
  return ids;
}

Error Mailbox::waitForPeers(size_t count, Timeout timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_until(lock, deadlineAfter(timeout),
                           [&] { return closed_ || peers_.size() >= count; })) {
    return ACTORPIPE_ERROR(TimeoutError, "only " + std::to_string(peers_.size()) + " of " +
                                             std::to_string(count) + " clients connected");
  }
  if (closed_) return ACTORPIPE_ERROR(ContextClosedError);
  return Error::kSuccess;
}

void Mailbox::readNext(Peer& peer) {
  if (closed_ || peer.dead || peer.holding || peer.readingData || peer.readingDescriptor) return;
  peer.readingDescriptor = true;
  std::weak_ptr<Mailbox> weak = shared_from_this();
  const int id = peer.id;
  peer.pipe->readDescriptor([weak, id](const Error& error, Descriptor descriptor) {
    auto self = weak.lock();
    if (!self) return;
    std::lock_guard<std::mutex> lock(self->mutex_);
    Peer& peer = self->peers_[id];
    peer.readingDescriptor = false;
    if (error) {
      peer.dead = ACTORPIPE_ERROR(RankFailedError, id,
                                  peerName(id) + " is gone (" + error.what() + ")");
    } else {
      peer.held = std::move(descriptor);
      peer.holding = true;
    }
    self->changed_.notify_all();
  });
}

void Mailbox::readHeld(Peer& peer, const std::vector<TensorView>& into,
                       std::shared_ptr<Received> target, std::shared_ptr<Error> result,
                       std::shared_ptr<bool> finished) {
  const Descriptor& d = peer.held;
  target->from = peer.id;
  // A message that does not make sense is still read off the pipe (or the
  // next one would be misread), as bytes, and its receive fails.
  if (Error bad = parseHeader(d.metadata, target->tag, target->id)) {
    if (!*result) *result = ACTORPIPE_ERROR(ProtocolError, peerName(peer.id) + " sent " + bad.what());
  }
  Allocation allocation;
  if (!d.payloads.empty()) {
    target->data.resize(d.payloads[0].length);
    allocation.payloads.push_back({&target->data[0]});
  }
  bool inPlace = !into.empty();
  if (inPlace && into.size() != d.tensors.size()) inPlace = false;
  for (size_t i = 0; inPlace && i < d.tensors.size(); ++i) {
    inPlace = into[i].bytes() == d.tensors[i].length && into[i].device.type == kCpuDeviceType;
  }
  if (!into.empty() && !inPlace) {
    *result = ACTORPIPE_ERROR(LogicError, "the tensors given to receive do not match the " +
                                              std::to_string(d.tensors.size()) +
                                              " tensors of the message; it was received "
                                              "into allocated storage instead");
  }
  target->storage.resize(d.tensors.size());
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    // Sent as pipe tensors (dtype and shape checked against the length);
    // an entry that is not one, or does not parse, arrives as bytes.
    DType dtype = DType::kUint8;
    size_t count = d.tensors[i].length;
    if (isPipeTensor(d.tensors[i])) {
      Shape shape;
      if (Error bad = parsePipeTensor(d.tensors[i], dtype, shape)) {
        dtype = DType::kUint8;
        if (!*result) *result = ACTORPIPE_ERROR(ProtocolError, peerName(peer.id) + " sent " + bad.what());
      } else {
        count = static_cast<size_t>(elementCount(shape));
      }
    }
    if (inPlace) {
      target->tensors.push_back(into[i]);
    } else {
      target->storage[i].resize(d.tensors[i].length);
      target->tensors.push_back(TensorView{target->storage[i].data(), count, dtype});
    }
    allocation.tensors.push_back({CpuBuffer{target->tensors.back().data}});
  }
  peer.holding = false;
  peer.readingData = true;
  std::weak_ptr<Mailbox> weak = shared_from_this();
  const int id = peer.id;
  size_t bytes = target->data.size();
  for (const auto& t : d.tensors) bytes += t.length;
  peer.pipe->read(std::move(allocation), [weak, id, result, finished, bytes](const Error& error) {
    auto self = weak.lock();
    if (!self) return;
    std::lock_guard<std::mutex> lock(self->mutex_);
    Peer& peer = self->peers_[id];
    peer.readingData = false;
    if (error) {
      peer.dead = ACTORPIPE_ERROR(RankFailedError, id,
                                  peerName(id) + " is gone (" + error.what() + ")");
      *result = peer.dead;
    } else {
      ++peer.stats.messagesReceived;
      peer.stats.bytesReceived += bytes;
      self->readNext(peer);
    }
    *finished = true;
    self->changed_.notify_all();
  });
}

Error Mailbox::receive(int wanted, bool any, const std::string& tag,
                       const std::vector<TensorView>& into, Received& message, Timeout timeout) {
  const auto deadline = deadlineAfter(timeout);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (closed_) return ACTORPIPE_ERROR(ContextClosedError);
    std::vector<int> order;
    if (any) {
      // Round robin: start after the peer served last.
      for (auto it = peers_.upper_bound(cursor_); it != peers_.end(); ++it) order.push_back(it->first);
      for (auto it = peers_.begin(); it != peers_.end() && it->first <= cursor_; ++it) {
        order.push_back(it->first);
      }
    } else {
      if (!peers_.count(wanted)) {
        return ACTORPIPE_ERROR(LogicError, "no " + peerName(wanted) + " is connected");
      }
      order.push_back(wanted);
    }

    // Messages already read (skipped earlier by a receive for another tag).
    for (int id : order) {
      Peer& peer = peers_[id];
      for (auto it = peer.inbox.begin(); it != peer.inbox.end(); ++it) {
        if (!tagMatches(tag, it->tag)) continue;
        message = std::move(*it);
        peer.inbox.erase(it);
        if (any) cursor_ = id;
        if (into.empty()) return Error::kSuccess;
        bool fits = into.size() == message.tensors.size();
        for (size_t i = 0; fits && i < into.size(); ++i) fits = into[i].bytes() == message.tensors[i].bytes();
        if (!fits) {
          return ACTORPIPE_ERROR(LogicError, "the tensors given to receive do not match the "
                                             "message's; it stays in allocated storage");
        }
        for (size_t i = 0; i < into.size(); ++i) {
          std::memcpy(into[i].data, message.tensors[i].data, into[i].bytes());
          message.tensors[i] = into[i];
        }
        message.storage.clear();
        return Error::kSuccess;
      }
    }

    // Messages whose data still waits on the wire.
    bool setAside = false;
    for (int id : order) {
      Peer& peer = peers_[id];
      if (!peer.holding) continue;
      std::string heldTag;
      uint64_t heldId = 0;
      parseHeader(peer.held.metadata, heldTag, heldId);
      auto result = std::make_shared<Error>();
      auto finished = std::make_shared<bool>(false);
      if (tagMatches(tag, heldTag)) {
        auto target = std::make_shared<Received>();
        readHeld(peer, into, target, result, finished);
        changed_.wait(lock, [&] { return *finished; });
        message = std::move(*target);
        if (any) cursor_ = id;
        return *result;
      }
      // Another tag: read it aside, so the messages behind it can come.
      auto aside = std::make_shared<Received>();
      readHeld(peer, {}, aside, result, finished);
      changed_.wait(lock, [&] { return *finished; });
      if (!*result) peers_[id].inbox.push_back(std::move(*aside));
      setAside = true;
    }
    if (setAside) continue;  // the lock was released meanwhile: look again

    // Peers that are gone, once nothing of theirs is left.
    bool anyAlive = false;
    for (int id : order) {
      Peer& peer = peers_[id];
      const bool drained = peer.inbox.empty() && !peer.holding && !peer.readingData;
      if (!peer.dead || !drained) {
        anyAlive = true;
        continue;
      }
      if (!any) return peer.dead;
      if (!peer.deathReported) {
        peer.deathReported = true;
        cursor_ = id;
        return peer.dead;
      }
    }
    if (any && !order.empty() && !anyAlive) {
      return ACTORPIPE_ERROR(LogicError, "every peer is gone");
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return ACTORPIPE_ERROR(TimeoutError, "no message" + (tag.empty() ? "" : " tagged \"" + tag + "\"") +
                                               " from " + (any ? "any peer" : peerName(wanted)));
    }
  }
}

Error Mailbox::send(const std::vector<int>& to, const Outgoing& outgoing) {
  Message message;
  uint64_t id = outgoing.id;
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_) return ACTORPIPE_ERROR(ContextClosedError);
  std::vector<Peer*> targets;
  for (int peerId : to) {
    auto it = peers_.find(peerId);
    if (it == peers_.end()) return ACTORPIPE_ERROR(LogicError, "no " + peerName(peerId) + " is connected");
    if (it->second.dead) return it->second.dead;
    targets.push_back(&it->second);
  }
  if (id == 0 && !targets.empty()) id = targets.front()->nextId;
  for (Peer* peer : targets) peer->nextId = std::max(peer->nextId, id + 1);
  if (outgoing.tag.size() > kMaxTagBytes) {
    return ACTORPIPE_ERROR(LogicError, "a tag of " + std::to_string(outgoing.tag.size()) + " bytes (at most " +
                                           std::to_string(kMaxTagBytes) + ")");
  }
  message.metadata = encode(MailboxHeader{id, outgoing.tag});
  size_t bytes = outgoing.data.size();
  if (!outgoing.data.empty()) {
    Message::Payload payload;
    payload.data = const_cast<char*>(outgoing.data.data());
    payload.length = outgoing.data.size();
    message.payloads.push_back(payload);
  }
  for (const auto& tensor : outgoing.tensors) {
    if (tensor.device.type != kCpuDeviceType) {
      return ACTORPIPE_ERROR(LogicError, "sending " + tensor.device.type +
                                             " tensors needs a build with that device's backend");
    }
    // A view of the caller's memory (nothing is copied or freed), written
    // as a pipe tensor: dtype and shape travel with it.
    auto view = Storage::adopt(tensor.data, tensor.bytes(), tensor.device, [](void*) {});
    message.tensors.push_back(
        pipeTensor(actorpipe::Tensor::fromStorage(view, {static_cast<int64_t>(tensor.count)}, tensor.dtype)));
    bytes += tensor.bytes();
  }

  auto remaining = std::make_shared<size_t>(targets.size());
  auto firstError = std::make_shared<Error>();
  std::weak_ptr<Mailbox> weak = shared_from_this();
  for (Peer* peer : targets) {
    const int peerId = peer->id;
    peer->pipe->write(message, [weak, peerId, remaining, firstError, bytes](const Error& error) {
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard<std::mutex> lock(self->mutex_);
      Peer& peer = self->peers_[peerId];
      if (error) {
        if (!*firstError) {
          *firstError = ACTORPIPE_ERROR(RankFailedError, peerId,
                                        peerName(peerId) + " is gone (" + error.what() + ")");
        }
      } else {
        ++peer.stats.messagesSent;
        peer.stats.bytesSent += bytes;
      }
      --*remaining;
      self->changed_.notify_all();
    });
  }
  changed_.wait(lock, [&] { return *remaining == 0; });
  return *firstError;
}

size_t Mailbox::ready(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return 0;
  return it->second.inbox.size() + (it->second.holding ? 1 : 0);
}

TrafficStats Mailbox::stats(int peer, bool all) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TrafficStats total;
  for (const auto& entry : peers_) {
    if (!all && entry.first != peer) continue;
    total.messagesSent += entry.second.stats.messagesSent;
    total.messagesReceived += entry.second.stats.messagesReceived;
    total.bytesSent += entry.second.stats.bytesSent;
    total.bytesReceived += entry.second.stats.bytesReceived;
  }
  return total;
}

} // namespace actorpipe::group
