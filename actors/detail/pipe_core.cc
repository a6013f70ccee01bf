// The pipe's operations: writing, reading and failing. The handshake that
// precedes them is in pipe_handshake.cc.
//
// Reading, once established (see ReadState in pipe_core.h):
//   kIdle --readDescriptor()--> kReadingHeader --8 bytes--> kReadingFrame
//   --frame decoded, descriptor delivered--> kAwaitingAllocation
//   --read(allocation) checked--> kReadingData --last byte--> kIdle
// The data of message N precedes the header of message N+1 on the stream,
// so a descriptor is only read once the previous message's data is consumed:
// that is what keeps messages in write order and needs no buffering.
#include <actorpipe/actors/detail/pipe_core.h>

#include <algorithm>
#include <utility>

#include <caf/actor_companion.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/message_handler.hpp>
#include <caf/response_promise.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_response_promise.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/type_erased_tuple.hpp>

#include <actorpipe/actors/atoms.h>
#include <actorpipe/actors/detail/context_core.h>
#include <actorpipe/actors/detail/frames.h>
#include <actorpipe/actors/detail/join_registry.h>
#include <actorpipe/actors/detail/loop_actor.h>
#include <actorpipe/actors/pipe_actor.h>
#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/detail/call_user.h>
#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::detail {
namespace {

// How long writes still queued on the connection when the peer left may take
// to leave (a peer that shut only its sending side still reads them) before
// the pipe fails and drops them.
constexpr std::chrono::milliseconds kPeerGoneLinger{5000};
// Frame bodies up to this size are taken at once when they are here already
// (Connection::readNow); larger ones are read in chunks as they arrive.
constexpr size_t kBodyNowMax = 64 * 1024;
// A decoded frame whose body was at most this large is decoded over by the
// next message (PipeCore::onFrame).
constexpr size_t kReuseFrameMax = 4 * 1024;

void bouncePipeMessage(caf::mailbox_element& element) {
  Error error = ACTORPIPE_ERROR(ContextClosedError);
  const caf::type_erased_tuple& msg = element.content();
  if (msg.match_elements<write_atom, Message, Pipe::write_callback_fn>()) {
    callUser("a pipe's write callback", msg.get_as<Pipe::write_callback_fn>(2), error);
  } else if (msg.match_elements<read_descriptor_atom, Pipe::read_descriptor_callback_fn>()) {
    callUser("a pipe's readDescriptor callback", msg.get_as<Pipe::read_descriptor_callback_fn>(1), error,
             Descriptor());
  } else if (msg.match_elements<read_atom, Allocation, Pipe::read_callback_fn>()) {
    callUser("a pipe's read callback", msg.get_as<Pipe::read_callback_fn>(2), error);
  } else {
    bounceRequest(element, toCafError(error));
  }
}

}  // namespace

uint64_t PipeCore::newPipeId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

PipeCore::PipeCore(std::shared_ptr<ContextCore> context, Loop* loop)
    : context_(std::move(context)),
      loop_(loop),
      handshakeTimeout_(context_->options().handshakeTimeout()),
      operationTimeout_(context_->options().operationTimeout()) {}

uint64_t PipeCore::armDeadline(const char* what) {
  if (operationTimeout_.count() <= 0) return 0;
  std::weak_ptr<PipeCore> weak = shared_from_this();
  auto timeout = operationTimeout_;
  return loop_->after(timeout, [weak, what, timeout] {
    // An operation can stop half-way through a message: only failing the
    // whole pipe leaves nothing inconsistent behind.
    if (auto core = weak.lock()) core->fail(ACTORPIPE_ERROR(TimeoutError, what, timeout.count()));
  });
}

void PipeCore::disarm(uint64_t& timer) {
  if (timer != 0) {
    loop_->cancel(timer);
    timer = 0;
  }
}

Error PipeCore::admit(size_t pending, const char* what) const {
  size_t limit = context_->limits().maxPendingOperations;
  if (pending >= limit) {
    return ACTORPIPE_ERROR(LimitExceededError, std::string("pending ") + what + " operations count", pending, limit);
  }
  return Error();
}

PipeCore::~PipeCore() {
  if (connection_) {
    connection_->close(ACTORPIPE_ERROR(PipeClosedError));
  }
  for (auto& e : endpoints_) {
    e.second->close(ACTORPIPE_ERROR(PipeClosedError));
  }
  if (actor_) {
    caf::anon_send_exit(actor_, caf::exit_reason::normal);
  }
}

std::shared_ptr<PipeCore> PipeCore::failed(const std::shared_ptr<ContextCore>& context,
                                           Error error) {
  auto core = std::make_shared<PipeCore>(context, nullptr);
  core->error_ = std::move(error);
  core->state_ = State::kClosed;
  return core;
}

// The actor's behavior: the user's operations, by callback or by request.
void PipeCore::spawnActor() {
  std::weak_ptr<PipeCore> weak = shared_from_this();
  LoopActorHooks hooks;
  hooks.bounce = &bouncePipeMessage;
  hooks.init = [weak](caf::actor_companion* self) -> caf::behavior {
    self->set_down_handler([weak](caf::down_msg& msg) {
      if (auto core = weak.lock()) {
        core->fail(ACTORPIPE_ERROR(BackendDownError, "a channel of pipe " + core->url_,
                                   to_string(msg.reason)));
      }
    });
    auto closed = [] { return ACTORPIPE_ERROR(PipeClosedError); };
    // The typed interface (PipeActor): the compiler checks these handlers
    // against the interface, so the handle asActor() returns is what it
    // claims. Same operations as the callbacks below, answered by reply.
    auto done = [](caf::typed_response_promise<ok_atom> rp) {
      return [rp](const Error& error) mutable {
        if (error) rp.deliver(toCafError(error));
        else rp.deliver(ok_atom::value);
      };
    };
    PipeActor::behavior_type typed{
        [weak, self, closed, done](write_atom, Message& message) {
          auto rp = self->make_response_promise<ok_atom>();
          if (auto core = weak.lock()) core->doWrite(std::move(message), done(rp));
          else done(rp)(closed());
          return rp;
        },
        [weak, self, closed](read_descriptor_atom) {
          auto rp = self->make_response_promise<Descriptor>();
          auto deliver = [rp](const Error& error, Descriptor descriptor) mutable {
            if (error) rp.deliver(toCafError(error));
            else rp.deliver(std::move(descriptor));
          };
          if (auto core = weak.lock()) core->doReadDescriptor(std::move(deliver));
          else deliver(closed(), Descriptor());
          return rp;
        },
        [weak, self, closed, done](read_atom, Allocation& allocation) {
          auto rp = self->make_response_promise<ok_atom>();
          if (auto core = weak.lock()) core->doRead(std::move(allocation), done(rp));
          else done(rp)(closed());
          return rp;
        },
        [weak](close_atom) {
          if (auto core = weak.lock()) core->fail(ACTORPIPE_ERROR(PipeClosedError));
        },
    };
    // The handles' messages (Pipe's methods post these: callbacks, not
    // replies), then the typed interface.
    caf::message_handler internal{
        [weak, closed](write_atom, Message& message, Pipe::write_callback_fn& fn) {
          if (auto core = weak.lock()) core->doWrite(std::move(message), std::move(fn));
          else callUser("a pipe's write callback", fn, closed());
        },
        [weak, closed](read_descriptor_atom, Pipe::read_descriptor_callback_fn& fn) {
          if (auto core = weak.lock()) core->doReadDescriptor(std::move(fn));
          else callUser("a pipe's readDescriptor callback", fn, closed(), Descriptor());
        },
        [weak, closed](read_atom, Allocation& allocation, Pipe::read_callback_fn& fn) {
          if (auto core = weak.lock()) core->doRead(std::move(allocation), std::move(fn));
          else callUser("a pipe's read callback", fn, closed());
        },
        [weak](close_atom, Error& reason) {
          if (auto core = weak.lock()) core->fail(reason);
        },
        [self](watch_atom, caf::actor& backend) { self->monitor(backend); },
    };
    return internal.or_else(typed.unbox());
  };
  actor_ = spawnOnLoop(context_->system(), *loop_, std::move(hooks));
}

// --- operations arriving from any thread ----------------------------------

// Asked on the pipe's own loop thread (a callback answering with the next
// operation: the common case), an operation skips the actor's mailbox. It is
// posted to the loop queue that the mailbox drains into, so it keeps its
// place behind everything this thread asked for before, runs on the thread a
// message would, and runs after the current callback returns, never inside
// it. What it saves is the CAF message (a mailbox element, its match and
// dispatch): about a tenth of a small round trip's work (docs/benchmarks.md,
// "Where a small round trip's time goes"). From any other thread an operation
// is a message to the actor. `task(core, refused)` gets the core, or null and
// why not: the loop runs no more tasks.
template <class Op>
void PipeCore::postNext(Op op) {
  // The closure (the operation's arguments and a reference to the pipe)
  // fits in a Loop::Task: no allocation. It is made only once the loop
  // accepts it, so a refused operation is still here to fail. The reference
  // is strong: the operation reaches the pipe even if the user let go of it
  // meanwhile, and the close that letting go asks for ends it as it ends
  // any pending operation (the weak reference this was cost two more atomic
  // operations and a compare-and-swap per operation).
  const bool posted = loop_->postMade([&] {
    return [core = shared_from_this(), op = std::move(op)]() mutable { op(core.get(), Error()); };
  });
  if (!posted) op(nullptr, ACTORPIPE_ERROR(ContextClosedError));
}

void PipeCore::write(Message message, Pipe::write_callback_fn fn) {
  if (!actor_) {
    callUser("a pipe's write callback", fn, error_);
    return;
  }
  if (loop_->inLoop()) {
    postNext([message = std::move(message), fn = std::move(fn)](PipeCore* core, const Error& refused) mutable {
      if (core) core->doWrite(std::move(message), std::move(fn));
      else callUser("a pipe's write callback", fn, refused);
    });
    return;
  }
  caf::anon_send(actor_, write_atom::value, std::move(message), std::move(fn));
}

void PipeCore::readDescriptor(Pipe::read_descriptor_callback_fn fn) {
  if (!actor_) {
    callUser("a pipe's readDescriptor callback", fn, error_, Descriptor());
    return;
  }
  if (loop_->inLoop()) {
    postNext([fn = std::move(fn)](PipeCore* core, const Error& refused) mutable {
      if (core) core->doReadDescriptor(std::move(fn));
      else callUser("a pipe's readDescriptor callback", fn, refused, Descriptor());
    });
    return;
  }
  caf::anon_send(actor_, read_descriptor_atom::value, std::move(fn));
}

void PipeCore::read(Allocation allocation, Pipe::read_callback_fn fn) {
  if (!actor_) {
    callUser("a pipe's read callback", fn, error_);
    return;
  }
  if (loop_->inLoop()) {
    postNext([allocation = std::move(allocation), fn = std::move(fn)](PipeCore* core, const Error& refused) mutable {
      if (core) core->doRead(std::move(allocation), std::move(fn));
      else callUser("a pipe's read callback", fn, refused);
    });
    return;
  }
  caf::anon_send(actor_, read_atom::value, std::move(allocation), std::move(fn));
}

void PipeCore::close(Error reason) {
  if (actor_) {
    caf::anon_send(actor_, close_atom::value, std::move(reason));
  }
}

// --- writing ------------------------------------------------------------------

void PipeCore::doWrite(Message message, Pipe::write_callback_fn fn) {
  Error refused = error_ ? error_ : writeError_ ? writeError_ : admit(writes_.size(), "write");
  WriteOp& op = writes_.add();
  op.message = std::move(message);
  op.fn = std::move(fn);
  if (refused) {
    op.done = true;
    op.error = refused;
    flushWrites();
    return;
  }
  op.deadline = armDeadline("write");
  if (state_ == State::kEstablished && !staging_) {
    sendWrite(op);
  }
}

void PipeCore::sendUnsent() {
  // sendWrite may finish writes (or fail the pipe, finishing all): walk by number.
  for (uint64_t seq = writes_.empty() ? 0 : writes_.front().seq; WriteOp* op = writes_.find(seq); ++seq) {
    if (state_ != State::kEstablished || staging_) return;
    if (!op->sent && !op->done) sendWrite(*op);
  }
}

channel::Endpoint* PipeCore::endpointFor(const std::string& channel) const {
  auto it = endpoints_.find(channel);
  return it == endpoints_.end() ? nullptr : it->second.get();
}

// Checks the message and describes it; sends nothing, so a message that
// fails here leaves no trace on the wire.
Error PipeCore::buildFrame(const WriteOp& op, wire::MessageFrame& frame, transport::Slices& inlineData,
                           std::vector<OutOfBand>& outOfBand, std::vector<StagedTensor>& staged) {
  const Message& m = op.message;
  const Limits& limits = context_->limits();
  size_t total = 0;
  for (size_t i = 0; i < m.payloads.size(); ++i) {
    const auto& p = m.payloads[i];
    if (p.length > 0 && p.data == nullptr) {
      return ACTORPIPE_ERROR(LogicError, "payload " + std::to_string(i) + " has a length but no data");
    }
    if (p.length > limits.maxPayloadSize) {
      return ACTORPIPE_ERROR(LimitExceededError, "payload", p.length, limits.maxPayloadSize);
    }
    total += p.length;
    frame.descriptor.payloads.push_back({p.length, p.metadata});
    inlineData.push_back({p.data, p.length});
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    Device device = t.buffer.device();
    auto it = channels_.find(device.type);
    if (it == channels_.end()) {
      std::string have;
      for (const auto& c : channels_) have += (have.empty() ? "" : ", ") + c.first + "->" + c.second;
      return ACTORPIPE_ERROR(NegotiationError, "tensor " + std::to_string(i) + " is on " +
                                                   device.toString() + " but this pipe negotiated channels only for [" +
                                                   have + "]");
    }
    if (t.length > limits.maxTensorSize) {
      return ACTORPIPE_ERROR(LimitExceededError, "tensor", t.length, limits.maxTensorSize);
    }
    const bool onCpu = device.type == kCpuDeviceType;
    const void* ptr = nullptr;
    if (!t.buffer.empty()) {
      if (onCpu) {
        ptr = std::as_const(t.buffer).unwrap<CpuBuffer>().ptr;
      } else if (device.type == kCudaDeviceType) {
        ptr = std::as_const(t.buffer).unwrap<CudaBuffer>().ptr;
      }
    }
    if (t.length > 0 && ptr == nullptr) {
      return ACTORPIPE_ERROR(LogicError, "tensor " + std::to_string(i) + " has a length but no memory");
    }
    total += t.length;
    frame.descriptor.tensors.push_back({t.length, device, t.targetDevice, t.metadata});
    channel::Endpoint* endpoint = endpointFor(it->second);
    if (endpoint != nullptr && onCpu && t.length < endpoint->inlineBelow()) {
      endpoint = nullptr;  // small: inline is cheaper
    }
    channel::Stager* stager = endpoint != nullptr && !onCpu ? endpoint->stager() : nullptr;
    if (stager != nullptr) {
      // Inline, through the stager's host memory (cuda_basic).
      if (t.length > 0) {
        if (auto e = endpoint->checkBuffer(t.buffer, t.length)) return e;
      }
      frame.routes.push_back({it->second, true, std::string()});
      if (t.length > 0) {
        staged.push_back({inlineData.size(), &t.buffer, t.length, stager});
        inlineData.push_back({nullptr, t.length});
      }
      continue;
    }
    if (endpoint == nullptr && !onCpu) {
      // The connection streams bytes from CPU memory only.
      return ACTORPIPE_ERROR(LogicError, "tensor " + std::to_string(i) + " is on " + device.toString() +
                                             " and channel '" + it->second + "' moves tensors inline, from CPU memory");
    }
    if (!onCpu && t.length > 0) {
      if (auto e = endpoint->checkBuffer(t.buffer, t.length)) return e;
    }
    frame.routes.push_back({it->second, endpoint == nullptr, std::string()});
    if (endpoint == nullptr) {
      inlineData.push_back({ptr, t.length});
    } else if (t.length > 0) {
      outOfBand.push_back({endpoint, i, ptr, t.length, onCpu ? nullptr : &t.buffer});
    }
  }
  if (total > limits.maxMessageSize) {
    return ACTORPIPE_ERROR(LimitExceededError, "message", total, limits.maxMessageSize);
  }
  return Error();
}

// A write is done when its frame (with inline data) is on the wire and every
// out-of-band channel has moved its tensors. Out-of-band sends are issued
// here, in message order, which is the order the peer's reads expect.
void PipeCore::sendWrite(WriteOp& op) {
  op.sent = true;
  wire::MessageFrame frame;
  transport::Slices inlineData;
  std::vector<OutOfBand> outOfBand;
  std::vector<StagedTensor> staged;
  // Moved, not copied (a metadata string past the short-string size would
  // be allocated and copied once more per message): nothing reads the
  // operation's copy after this.
  frame.descriptor.metadata = std::move(op.message.metadata);
  Error error = buildFrame(op, frame, inlineData, outOfBand, staged);
  if (!error) {
    wire::encodeMessage(frame, op.frame);  // header and body, in the operation's own buffer
    const size_t body = op.frame.size() - wire::kHeaderSize;
    // Checked before any send starts; descriptors add only a few bytes.
    if (body + 64 * outOfBand.size() > context_->limits().maxFrameSize) {
      error = ACTORPIPE_ERROR(LimitExceededError, "descriptor frame", body, context_->limits().maxFrameSize);
    }
  }
  if (error) {
    // Nothing reached the wire: this write fails, the pipe carries on.
    op.done = true;
    op.error = error;
    flushWrites();
    return;
  }
  auto self = shared_from_this();
  op.pending = 1 + outOfBand.size();
  if (!outOfBand.empty()) {
    for (const auto& o : outOfBand) {
      auto done = [self, seq = op.seq](const Error& e) {
        if (self->loop_->inLoop()) {
          self->writePartDone(seq, e);
        } else {
          self->loop_->post([self, seq, e] { self->writePartDone(seq, e); });
        }
      };
      frame.routes[o.route].channelDescriptor = o.buffer == nullptr
                                                    ? o.endpoint->send(o.ptr, o.length, std::move(done))
                                                    : o.endpoint->sendBuffer(*o.buffer, o.length, std::move(done));
    }
    // A send that failed at once failed the pipe, and this write with it.
    if (error_) return;
    wire::encodeMessage(frame, op.frame);
  }
  transport::Slices slices;
  slices.reserve(1 + inlineData.size());
  slices.push_back({op.frame.data(), op.frame.size()});
  for (const auto& s : inlineData) slices.push_back(s);
  op.onWire = true;
  if (!staged.empty()) return sendStaged(op, slices, staged);
  connection_->write(std::move(slices), [self = std::move(self), seq = op.seq](const Error& e) { self->wireDone(seq, e); });
}

void PipeCore::writePartDone(uint64_t seq, const Error& e) {
  WriteOp* op = writes_.find(seq);
  if (op == nullptr || op->done) return;  // the pipe failed first and reported it
  if (e) return fail(e);
  if (--op->pending == 0) {
    op->done = true;
    flushWrites();
  }
}

void PipeCore::wireDone(uint64_t seq, const Error& e) {
  if (WriteOp* op = writes_.find(seq)) {
    op->onWire = false;
    // The peer left while this frame was queued (onPeerGone): the write
    // failed then, with that error, and is reported now that the
    // connection reads none of its bytes any more.
    if (!op->done && op->error) {
      op->done = true;
      if (!writesOnWire()) disarm(lingerTimer_);
      flushWrites();
      return;
    }
  }
  writePartDone(seq, e);
}

// Callbacks fire in call order even when a later write fails early.
void PipeCore::flushWrites() {
  while (!writes_.empty() && writes_.front().done) {
    writes_.finishFront([this](Pipe::write_callback_fn& fn, const Error& error, uint64_t deadline) {
      disarm(deadline);
      callUser("a pipe's write callback", fn, error);
    });
  }
}

// --- reading ------------------------------------------------------------------

void PipeCore::doReadDescriptor(Pipe::read_descriptor_callback_fn fn) {
  Error refused = error_ ? error_ : admit(descriptorReads_.size(), "readDescriptor");
  if (refused) {
    callUser("a pipe's readDescriptor callback", fn, refused, Descriptor());
    return;
  }
  descriptorReads_.push_back(DescriptorOp{std::move(fn), armDeadline("readDescriptor")});
  advanceReads();
}

void PipeCore::advanceReads() {
  if (state_ != State::kEstablished || readState_ != ReadState::kIdle || descriptorReads_.empty()) {
    return;
  }
  readState_ = ReadState::kReadingHeader;
  connection_->read(header_, wire::kHeaderSize, [self = shared_from_this()](const Error& e) mutable {
    if (e) return self->fail(e);
    if (self->error_) return;
    PipeCore* core = self.get();
    core->onHeader(std::move(self));
  });
}

// `self`: the header read's reference, handed on to the body's read (one
// atomic increment and decrement less per message than a fresh one).
void PipeCore::onHeader(std::shared_ptr<PipeCore> self) {
  wire::FrameHeader header;
  if (auto error = wire::decodeHeader(header_, context_->limits(), header)) return fail(error);
  if (header.type != wire::FrameType::kMessage) {
    return fail(ACTORPIPE_ERROR(ProtocolError, "unexpected frame type " +
                                                   std::to_string(int(header.type)) +
                                                   " after the handshake"));
  }
  readState_ = ReadState::kReadingFrame;
  // A small frame's body has usually arrived with its header: taken at
  // once, without a queued read and its callback. (The buffer is sized as
  // the chunked read below sizes its first chunk.)
  if (header.length <= kBodyNowMax) {
    frameBody_.resize(header.length);
    if (header.length == 0 || connection_->readNow(frameBody_.data(), header.length)) return onFrame();
  }
  readBody(connection_, &frameBody_, header.length, [self = std::move(self)](const Error& e) {
    if (e) return self->fail(e);
    if (!self->error_) self->onFrame();
  });
}

void PipeCore::onFrame() {
  // Decoded over the last message's frame when that one was small, reusing
  // its strings' and lists' memory; a large one's is let go (a decoded entry
  // takes several times its bytes on the wire, and would be held for the
  // pipe's life).
  if (lastFrameBody_ > kReuseFrameMax) frame_ = wire::MessageFrame();
  lastFrameBody_ = frameBody_.size();
  if (auto error = wire::decode(frameBody_.data(), frameBody_.size(), context_->limits(), frame_)) {
    return fail(error);
  }
  for (size_t i = 0; i < frame_.routes.size(); ++i) {
    const auto& route = frame_.routes[i];
    auto it = channels_.find(frame_.descriptor.tensors[i].sourceDevice.type);
    // Any negotiated channel may send a tensor inline; out of band needs its endpoint.
    channel::Endpoint* endpoint = endpointFor(route.channel);
    if (it == channels_.end() || it->second != route.channel || (!route.inlineData && endpoint == nullptr)) {
      return fail(ACTORPIPE_ERROR(ProtocolError, "tensor " + std::to_string(i) +
                                                     " arrives on channel '" + route.channel +
                                                     "', which this pipe did not negotiate"));
    }
    // Inline means on the connection: CPU memory, or another device's
    // through a staging channel's host memory, and those never out of band.
    const bool onCpu = frame_.descriptor.tensors[i].sourceDevice.type == kCpuDeviceType;
    const bool staging = endpoint != nullptr && endpoint->stager() != nullptr;
    if (route.inlineData && !onCpu && !staging) {
      return fail(ACTORPIPE_ERROR(ProtocolError, "tensor " + std::to_string(i) + " from " +
                                                     frame_.descriptor.tensors[i].sourceDevice.toString() +
                                                     " arrives inline (only CPU tensors can)"));
    }
    if (!route.inlineData && staging) {
      return fail(ACTORPIPE_ERROR(ProtocolError, "tensor " + std::to_string(i) + " on channel '" + route.channel +
                                                     "' arrives out of band (that channel stages it on the pipe's connection)"));
    }
  }
  readState_ = ReadState::kAwaitingAllocation;
  DescriptorOp op = descriptorReads_.takeFront();
  disarm(op.deadline);
  // The reads below need the lengths and devices; the metadata strings are
  // the callback's alone, moved rather than copied.
  Descriptor descriptor;
  descriptor.metadata = std::move(frame_.descriptor.metadata);
  descriptor.payloads.reserve(frame_.descriptor.payloads.size());
  for (auto& p : frame_.descriptor.payloads) descriptor.payloads.push_back({p.length, std::move(p.metadata)});
  descriptor.tensors.reserve(frame_.descriptor.tensors.size());
  for (auto& t : frame_.descriptor.tensors) {
    descriptor.tensors.push_back({t.length, t.sourceDevice, t.targetDevice, std::move(t.metadata)});
  }
  callUser("a pipe's readDescriptor callback", op.fn, Error(), std::move(descriptor));
}

Error PipeCore::checkAllocation(const Allocation& allocation) const {
  const Descriptor& d = frame_.descriptor;
  if (allocation.payloads.size() != d.payloads.size() || allocation.tensors.size() != d.tensors.size()) {
    return ACTORPIPE_ERROR(LogicError, "the allocation has " + std::to_string(allocation.payloads.size()) +
                                           " payloads and " + std::to_string(allocation.tensors.size()) +
                                           " tensors, the descriptor " + std::to_string(d.payloads.size()) +
                                           " and " + std::to_string(d.tensors.size()));
  }
  for (size_t i = 0; i < d.payloads.size(); ++i) {
    if (d.payloads[i].length > 0 && allocation.payloads[i].data == nullptr) {
      return ACTORPIPE_ERROR(LogicError, "payload " + std::to_string(i) + " of the allocation has no memory");
    }
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    if (d.tensors[i].length == 0) continue;
    // A tensor lands on a device of the type it left from: the channel
    // chosen for that type moves it (TensorPipe's rule too).
    const Buffer& b = allocation.tensors[i].buffer;
    const std::string& type = d.tensors[i].sourceDevice.type;
    const bool onCpu = type == kCpuDeviceType;
    bool usable = !b.empty() && b.device().type == type;
    if (usable && onCpu) usable = b.unwrap<CpuBuffer>().ptr != nullptr;
    if (usable && type == kCudaDeviceType) usable = b.unwrap<CudaBuffer>().ptr != nullptr;
    if (!usable) {
      return ACTORPIPE_ERROR(LogicError, "tensor " + std::to_string(i) + " of the allocation needs " +
                                             (onCpu ? std::string("CPU") : type) + " memory (channel '" +
                                             frame_.routes[i].channel + "'), got " +
                                             (b.empty() ? std::string("none") : b.device().toString()));
    }
    // A staged tensor is copied into the buffer chunk by chunk: the stager
    // checks that all of the peer's length fits there (cuda_basic: device
    // memory, inside its allocation) before any byte is read.
    if (!onCpu && frame_.routes[i].inlineData) {
      if (Error e = endpointFor(frame_.routes[i].channel)->checkBuffer(b, d.tensors[i].length)) return e;
    }
  }
  return Error();
}

void PipeCore::doRead(Allocation allocation, Pipe::read_callback_fn fn) {
  Error refused = admit(reads_.size(), "read");
  ReadOp& op = reads_.add();
  op.fn = std::move(fn);
  if (error_) {
    op.error = error_;
  } else if (refused) {
    op.error = refused;
  } else if (readState_ != ReadState::kAwaitingAllocation) {
    op.error = ACTORPIPE_ERROR(LogicError, "read() called with no descriptor waiting for its data");
  } else {
    op.error = checkAllocation(allocation);
  }
  if (op.error) {
    op.done = true;
    flushReads();
    return;
  }
  readState_ = ReadState::kReadingData;
  op.deadline = armDeadline("read");
  const Descriptor& d = frame_.descriptor;
  // Inline bytes come off the connection in stream order; out-of-band
  // tensors come from their channel's endpoint.
  struct Region {
    void* ptr;
    size_t length;
    channel::Endpoint* endpoint;
    const std::string* descriptor;
    const Buffer* buffer;  // tensors not on the CPU; read at once by recvBuffer
  };
  std::vector<Region> regions;
  // A message with a staged tensor reads its connection part step by step
  // (pipe_staging.cc): its chunks wait for the stager's slots.
  std::shared_ptr<StagedRead> staged;
  for (size_t i = 0; i < d.tensors.size() && !staged; ++i) {
    if (d.tensors[i].length > 0 && frame_.routes[i].inlineData &&
        d.tensors[i].sourceDevice.type != kCpuDeviceType) {
      staged = newStagedRead(op.seq);
    }
  }
  for (size_t i = 0; i < d.payloads.size(); ++i) {
    if (d.payloads[i].length == 0) continue;
    if (staged) {
      addStagedStep(*staged, allocation.payloads[i].data, d.payloads[i].length, Buffer(), nullptr);
    } else {
      regions.push_back({allocation.payloads[i].data, d.payloads[i].length, nullptr, nullptr, nullptr});
    }
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    if (d.tensors[i].length == 0) continue;
    const auto& route = frame_.routes[i];
    const Buffer& buffer = allocation.tensors[i].buffer;
    const bool onCpu = d.tensors[i].sourceDevice.type == kCpuDeviceType;
    void* cpu = onCpu ? std::as_const(buffer).unwrap<CpuBuffer>().ptr : nullptr;
    if (staged && route.inlineData) {
      // onFrame checked that a tensor not on the CPU comes inline only
      // through a staging channel.
      addStagedStep(*staged, cpu, d.tensors[i].length, onCpu ? Buffer() : buffer,
                    onCpu ? nullptr : endpointFor(route.channel)->stager());
      continue;
    }
    regions.push_back({cpu, d.tensors[i].length, route.inlineData ? nullptr : endpointFor(route.channel),
                       &route.channelDescriptor, onCpu ? nullptr : &buffer});
  }
  auto self = shared_from_this();
  dataReadsLeft_ = regions.size() + (staged ? stagedParts(*staged) : 0);
  if (dataReadsLeft_ == 0) {
    finishRead(op.seq);
    return;
  }
  for (const auto& region : regions) {
    if (region.endpoint == nullptr) {
      connection_->read(region.ptr, region.length, [self, seq = op.seq](const Error& e) {
        self->readPartDone(seq, e);
      });
    } else {
      auto done = [self, seq = op.seq](const Error& e) {
        if (self->loop_->inLoop()) {
          self->readPartDone(seq, e);
        } else {
          self->loop_->post([self, seq, e] { self->readPartDone(seq, e); });
        }
      };
      if (region.buffer == nullptr) {
        region.endpoint->recv(*region.descriptor, region.ptr, region.length, std::move(done));
      } else {
        region.endpoint->recvBuffer(*region.descriptor, *region.buffer, region.length, std::move(done));
      }
    }
  }
  if (staged) readStaged(op.seq, std::move(staged));
}

void PipeCore::readPartDone(uint64_t seq, const Error& e) {
  if (e) return fail(e);
  ReadOp* op = reads_.find(seq);
  if (op == nullptr || op->done) return;
  if (--dataReadsLeft_ == 0) finishRead(seq);
}

void PipeCore::finishRead(uint64_t seq) {
  if (ReadOp* op = reads_.find(seq)) op->done = true;
  readState_ = ReadState::kIdle;
  flushReads();
  advanceReads();
}

void PipeCore::flushReads() {
  while (!reads_.empty() && reads_.front().done) {
    reads_.finishFront([this](Pipe::read_callback_fn& fn, const Error& error, uint64_t deadline) {
      disarm(deadline);
      callUser("a pipe's read callback", fn, error);
    });
  }
}

// --- failing ------------------------------------------------------------------

void PipeCore::onPeerGone(const Error& error) {
  if (error_ || writeError_) return;
  for (auto& e : endpoints_) {
    e.second->flush();  // what the peer acknowledged before it went is done
  }
  writeError_ = error;
  writes_.forEach([&](WriteOp& op) {
    if (op.done) return;
    op.error = error;
    // Its bytes still queued on the connection are still sent (the peer
    // may only have shut its sending side), from the frame and from the
    // user's memory: its callback, after which the user may reuse that
    // memory, waits until the connection is done with them.
    if (!op.onWire) op.done = true;
  });
  if (writesOnWire()) {
    std::weak_ptr<PipeCore> weak = shared_from_this();
    lingerTimer_ = loop_->after(kPeerGoneLinger, [weak] {
      if (auto core = weak.lock()) core->fail(core->writeError_);
    });
  }
  flushWrites();
}

bool PipeCore::writesOnWire() {
  bool any = false;
  writes_.forEach([&](WriteOp& op) { any = any || (op.onWire && !op.done); });
  return any;
}

// Every pending callback fires once with `error`, in call order per kind.
void PipeCore::fail(Error error) {
  if (error_) {
    return;
  }
  // Once the context closes, that is why the pipe ends, whatever failed on
  // the way: Context::join ends the channels, and a WELCOME read before the
  // pipe's close message came named a channel already gone ("the peer chose
  // channel 'basic', which we lack"; seen under load in CI).
  if (!error.isOfType<PipeClosedError>() && !error.isOfType<ContextClosedError>()) {
    if (Error closed = context_->closedError()) error = std::move(closed);
  }
  // What the peer already finished counts as done, not as failed.
  for (auto& e : endpoints_) {
    e.second->flush();
  }
  error_ = std::move(error);
  if (error_.isOfType<PipeClosedError>()) {
    ACTORPIPE_LOG(kDebug, "pipe " << id_ << ": closed by its owner");
  } else {
    ACTORPIPE_LOG(kInfo, "pipe " << id_ << ": failed: " << error_.what());
  }
  if (state_ == State::kAwaitingJoin) {
    registry_->forget(joinToken_);
    loop_->cancel(joinTimer_);
  }
  if (loop_ != nullptr) {
    disarm(handshakeTimer_);
    disarm(lingerTimer_);
  }
  state_ = State::kClosed;
  if (connection_) {
    connection_->close(error_);
  }
  for (auto& e : endpoints_) {
    e.second->close(error_);
  }
  writes_.forEach([&](WriteOp& op) {
    if (!op.done) {
      op.done = true;
      op.error = error_;
    }
  });
  flushWrites();
  auto descriptorReads = std::exchange(descriptorReads_, Fifo<DescriptorOp>());
  descriptorReads.drain([&](DescriptorOp op) {
    disarm(op.deadline);
    callUser("a pipe's readDescriptor callback", op.fn, error_, Descriptor());
  });
  reads_.forEach([&](ReadOp& op) {
    if (!op.done) {
      op.done = true;
      op.error = error_;
    }
  });
  flushReads();
  if (ready_) {
    auto ready = std::move(ready_);
    ready_ = nullptr;
    ready(error_, nullptr);
  }
}

} // namespace actorpipe::detail
