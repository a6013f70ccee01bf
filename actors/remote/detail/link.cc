// One peer node: its pipe, the proxies of its actors, the requests pending
// there. Protocol in detail/frames.h, thread model in detail/node_core.h.
#include <actorpipe/actors/remote/detail/node_core.h>

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <new>

#include <caf/actor_cast.hpp>
#include <caf/actor_registry.hpp>
#include <caf/make_actor.hpp>
#include <caf/message_builder.hpp>
#include <caf/message_id.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/sec.hpp>

#include <actorpipe/actors/detail/pipe_core.h>
#include <actorpipe/actors/pipe_tensor.h>
#include <actorpipe/actors/remote/detail/handoff.h>
#include <actorpipe/actors/remote/detail/loop_unit.h>
#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/actors/remote/detail/parked.h>
#include <actorpipe/runtime/detail/log.h>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace actorpipe::remote::detail {

#if defined(__SANITIZE_THREAD__)
namespace {
char gHandoff;
}
void releaseHandoff() { __tsan_release(&gHandoff); }
void acquireHandoff() { __tsan_acquire(&gHandoff); }
#else
void releaseHandoff() {}
void acquireHandoff() {}
#endif

struct Outgoing {
  EncodedMessage message;
};

namespace {

int64_t ticks(Link::Clock::time_point t) { return t.time_since_epoch().count(); }

// Set while a pipe callback of a link runs: a loop thread, which must never
// wait for the window (the credit it waits for arrives on a loop).
thread_local bool tInPipeCallback = false;

// Set while a link that ended lets go of its registry: CAF's registry kills
// every proxy it lets go of, and a third node's actor's proxy is not this
// link's to kill (its own link kills it when that link or the actor ends).
thread_local bool tSparing = false;

// Set while a peer's LINK or UNLINK is applied here: the proxy's half of
// that link is the peer's already, and says nothing back.
thread_local bool tFromPeer = false;

struct InPipeCallback {
  InPipeCallback() : was(tInPipeCallback) { tInPipeCallback = true; }
  ~InPipeCallback() { tInPipeCallback = was; }
  bool was;
};

// A peer's message in a local mailbox. Its end (the actor handled it, or
// dropped it) is what credits the peer: the window counts messages until
// they are done with, not until they are read off the pipe, so a slow
// actor holds its senders back instead of growing its mailbox.
class CountedElement final : public caf::mailbox_element {
 public:
  CountedElement(caf::strong_actor_ptr&& sender, caf::message_id mid, caf::message&& content,
                 std::weak_ptr<Link> link, size_t bytes)
      : caf::mailbox_element(std::move(sender), mid, {}),
        content_(std::move(content)),
        link_(std::move(link)),
        bytes_(bytes) {
    // content() hands out the tuple; an empty message has none (as CAF's
    // own wrapper does).
    if (content_.vals() == nullptr) content_ = caf::message_builder().to_message();
  }
  ~CountedElement() override {
    if (auto link = link_.lock()) link->consumed(bytes_);
  }
  caf::type_erased_tuple& content() override { return content_; }
  const caf::type_erased_tuple& content() const override { return content_.content(); }
  caf::message move_content_to_message() override { return std::move(content_); }
  caf::message copy_content_to_message() const override { return content_; }
  size_t bytes() const { return bytes_; }

 private:
  caf::message content_;
  std::weak_ptr<Link> link_;
  size_t bytes_;
};

// A peer's actor, as CAF's remote actors are: a proxy whose mailbox is the
// link. It owns nothing of the link; when the link ends it is killed, which
// gives its monitors their down_msg.
class Proxy final : public caf::actor_proxy {
 public:
  Proxy(caf::actor_config& config, std::weak_ptr<Link> link, uint64_t linkSerial)
      : caf::actor_proxy(config), link_(std::move(link)), linkSerial_(linkSerial) {}

  uint64_t linkSerial() const { return linkSerial_; }

  ~Proxy() override {
    if (auto link = link_.lock()) link->forgetProxy(id(), ctrl());
  }

  void enqueue(caf::mailbox_element_ptr element, caf::execution_unit* context) override {
    std::shared_ptr<Link> link;
    caf::error reason;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      link = link_.lock();
      reason = reason_;
    }
    if (link) {
      link->forward(std::move(element), id(), caf::strong_actor_ptr(ctrl()));
      return;
    }
    // The node is gone: a request fails at once, as it would have had it
    // been pending when the link ended.
    if (element->mid.is_request() && element->sender) {
      if (!reason) reason = makeError(RemoteError::kNodeLost, "the actor's node is gone");
      element->sender->enqueue(
          caf::make_mailbox_element(caf::strong_actor_ptr(ctrl()), element->mid.response_id(), {},
                                    caf::make_message(std::move(reason))),
          context);
    }
  }

  // A local actor links itself to this proxy (CAF calls this inside its
  // critical section of both actors: only a frame is written here).
  bool add_backlink(caf::abstract_actor* x) override {
    if (!caf::actor_proxy::add_backlink(x)) return false;
    tellLink(x, true);
    return true;
  }

  bool remove_backlink(caf::abstract_actor* x) override {
    if (!caf::actor_proxy::remove_backlink(x)) return false;
    tellLink(x, false);
    return true;
  }

  void kill_proxy(caf::execution_unit* context, caf::error reason) override {
    if (tSparing) return;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      link_.reset();
      reason_ = reason;
    }
    cleanup(std::move(reason), context);
  }

 private:
  void tellLink(caf::abstract_actor* x, bool link) {
    if (tFromPeer || x->node() != home_system().node()) return;  // no third nodes
    std::shared_ptr<Link> to;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      to = link_.lock();
    }
    if (to) to->sendLink(x->id(), id(), link);
  }

  std::mutex mutex_;
  std::weak_ptr<Link> link_;
  const uint64_t linkSerial_;
  caf::error reason_;
};

} // namespace

// Links are numbered from 1: 0 is "this node's actors" to peerLinkOf.
static std::atomic<uint64_t> nextLinkSerial{1};

uint64_t peerLinkOf(const caf::strong_actor_ptr& sender) {
  auto* proxy = sender ? dynamic_cast<const Proxy*>(caf::actor_cast<caf::abstract_actor*>(sender)) : nullptr;
  return proxy != nullptr ? proxy->linkSerial() : 0;
}

size_t peerMessageBytes(const caf::mailbox_element* element) {
  auto* counted = dynamic_cast<const CountedElement*>(element);
  return counted != nullptr ? counted->bytes() : 0;
}

Link::Link(const std::shared_ptr<NodeCore>& node, std::shared_ptr<Pipe> pipe, std::string url)
    : node_(node),
      system_(node->system()),
      options_(node->options()),
      pipe_(std::move(pipe)),
      url_(std::move(url)),
      serial_(nextLinkSerial.fetch_add(1, std::memory_order_relaxed)),
      pool_(node->pool()),
      unit_(LoopUnit::of(node->system())),
      lastRead_(ticks(Clock::now())),
      lastArrival_(lastRead_.load()),
      lastWrite_(ticks(Clock::now())),
      handles_(new caf::proxy_registry(node->system(), *this)),
      decodeUnit_(&node->system()) {
  decodeUnit_.proxy_registry_ptr(handles_.get());
}

Link::~Link() {
  // The peer's actors' proxies were killed when the link failed; the rest
  // are other links': they forget this link (no decode runs now to add to
  // introducedAt_), and what its registry held of theirs is spared.
  for (auto& entry : introducedAt_) {
    if (auto owner = entry.second.lock()) owner->dropIntroducers(entry.first.second);
  }
  bool sparing = tSparing;
  tSparing = true;
  handles_.reset();
  tSparing = sparing;
}

void Link::DecodeUnit::exec_later(caf::resumable* job) { system().scheduler().enqueue(job); }

void Link::start() {
  auto node = node_.lock();
  if (!node) return;
  Frame hello;
  hello.kind = Frame::Kind::kHello;
  hello.identity = node->identity();
  hello.pid = static_cast<uint32_t>(::getpid());
  hello.node = encodeNodeId(system_, system_.node());
  hello.messages = options_.windowMessages;
  hello.bytes = options_.windowBytes;
  hello.urls = node->urls();
  write(hello);
  readNext();
}

caf::node_id Link::peerNodeId() {
  std::lock_guard<std::mutex> guard(mutex_);
  return peerNode_;
}

std::vector<std::string> Link::peerUrls() {
  std::lock_guard<std::mutex> guard(mutex_);
  return peerUrls_;
}

void Link::whenReady(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!helloDone_ && !dead_) {
      readyWaiters_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

std::string Link::peerIdentity() {
  std::lock_guard<std::mutex> guard(mutex_);
  return peer_;
}

bool Link::dead() {
  std::lock_guard<std::mutex> guard(mutex_);
  return dead_;
}

caf::error Link::lostError(const std::string& cause) {
  std::string peer = peerIdentity();
  return makeError(RemoteError::kNodeLost,
                   "node " + (peer.empty() ? std::string("?") : peer) +
                       (url_.empty() ? std::string() : " at " + url_) + " lost: " + cause);
}

void Link::write(const Frame& frame, std::shared_ptr<Outgoing> body, bool windowed) {
  writeEncoded(encodeFrame(frame), std::move(body), frame.kind == Frame::Kind::kBye, windowed);
}

void Link::writeEncoded(std::string encoded, std::shared_ptr<Outgoing> body, bool bye,
                        bool windowed) {
  size_t control = 0;
  if (!windowed) {
    control = encoded.size();
    if (body) {
      control += body->message.bytes.size();
      for (const auto& tensor : body->message.tensors) control += tensor.nbytes();
    }
  }
  std::vector<Queued> batch;
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_) return;
    queue_.push_back(Queued{std::move(encoded), std::move(body), bye, control});
    queuedControl_ += control;
    queued = queuedControl_;
    if (queued <= options_.maxQueuedControlBytes) {
      // One pipe write at a time: what queues behind it goes in the next.
      if (writing_) return;
      writing_ = true;
      batch = takeBatch();
    }
  }
  if (queued > options_.maxQueuedControlBytes) {
    // Answers to a peer that asks and does not read would pile up for ever.
    Error error = ACTORPIPE_ERROR(ProtocolError, "the peer does not read: " + std::to_string(queued) +
                                                     " bytes of answers and control frames queued for it"
                                                     " (maxQueuedControlBytes " +
                                                     std::to_string(options_.maxQueuedControlBytes) + ")");
    // Failed on the loop, not here: the writer may be inside CAF's critical
    // section of two actors (a local actor linking to or unlinking from one
    // of this link's proxies: Proxy::add_backlink), and failing kills the
    // proxies, which takes their locks again: a deadlock.
    auto node = node_.lock();
    if (!node || !node->post([self = shared_from_this(), error] { self->failProtocol(error); })) {
      failProtocol(error);
    }
    return;
  }
  writeBatch(std::move(batch));
}

std::vector<Link::Queued> Link::takeBatch() {
  // At most kMaxBatchFrames frames and 1024 payloads and tensors (a
  // message with more tensors goes alone), so any peer's limits take it.
  // And at most a sixteenth of the window's messages (64 frames at least:
  // control frames need no window): with a batch holding the whole window
  // the peer sits idle until it arrives and the sender until its credit
  // does; smaller ones let the peer start while the sender queues (one-way small
  // messages over shm, one sitting: 0.6 M/s with 1024-frame batches in a
  // 1024 window, 1.1 with 64, 1.3 with 256 in a 4096 window; the benchmark
  // also has a slower mode on these VMs: docs/benchmarks.md).
  constexpr size_t kMaxPipeEntries = 1024;
  const size_t maxFrames = std::clamp<size_t>(windowMessages() / 16, 64, kMaxBatchFrames);
  std::vector<Queued> batch;
  size_t entries = 0;
  while (!queue_.empty() && batch.size() < maxFrames) {
    const Queued& next = queue_.front();
    size_t more = next.body ? 1 + next.body->message.tensors.size() : 0;
    if (!batch.empty() && entries + more > kMaxPipeEntries) break;
    entries += more;
    queuedControl_ -= queue_.front().control;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

void Link::writeBatch(std::vector<Queued> batch) {
  Message message;
  // This thread's, keeping its memory from batch to batch (nothing below
  // writes another batch before encodeBatch is done with it).
  thread_local std::vector<std::pair<std::string, uint32_t>> frames;
  frames.clear();
  frames.reserve(batch.size());
  bool bye = false;
  bool bodies = false;
  for (auto& queued : batch) {
    uint32_t tensors = 0;
    if (queued.body) {
      bodies = true;
      auto& bytes = queued.body->message.bytes;
      message.payloads.push_back(Message::Payload{bytes.data(), bytes.size(), std::string()});
      for (const auto& tensor : queued.body->message.tensors) message.tensors.push_back(pipeTensor(tensor));
      tensors = static_cast<uint32_t>(queued.body->message.tensors.size());
    }
    frames.emplace_back(std::move(queued.frame), tensors);
    bye = bye || queued.bye;
  }
  message.metadata = encodeBatch(frames);
  frames.clear();
  size_t writing = 0;
  for (const auto& queued : batch) {
    if (!queued.body) continue;
    writing += queued.body->message.bytes.size();
    for (const auto& tensor : queued.body->message.tensors) writing += tensor.nbytes();
  }
  writingBytes_ = writing;
  // One clock reading per pipe write, not per frame: the heartbeat's
  // "nothing written for a while" counts from the last write started.
  int64_t now = ticks(Clock::now());
  writeStarted_ = now;
  lastWrite_ = now;
  // The bodies' bytes stay alive until written (the frames are in the
  // metadata by now: a batch without bodies holds nothing).
  std::shared_ptr<std::vector<Queued>> held;
  if (bodies) held = std::make_shared<std::vector<Queued>>(std::move(batch));
  auto self = shared_from_this();
  pipe_->write(std::move(message), [self, held, bye](const Error& error) {
    InPipeCallback inCallback;
    self->unheardBytes_ = std::max(self->unheardBytes_.load(), self->writingBytes_.load());
    self->writingBytes_ = 0;
    if (error) {
      self->fail(bye ? makeError(RemoteError::kNodeLeft, "this node left") : self->lostError(error.what()));
      return;
    }
    std::vector<Queued> next;
    {
      std::lock_guard<std::mutex> guard(self->mutex_);
      if (bye) {
        // Nothing more goes out; the link ends when the peer closes its end
        // (or NodeCore::leave stops waiting).
        self->byeWritten_ = true;
        self->writeStarted_ = 0;
        return;
      }
      if (self->queue_.empty() || self->dead_) {
        self->writing_ = false;
        self->writeStarted_ = 0;
        return;
      }
      next = self->takeBatch();
    }
    self->writeBatch(std::move(next));
  });
}

void Link::forward(caf::mailbox_element_ptr element, caf::actor_id target,
                   const caf::strong_actor_ptr& targetProxy) {
  caf::message_id mid = element->mid;
  caf::strong_actor_ptr sender = std::move(element->sender);
  caf::message content = element->move_content_to_message();
  if (isSystemMessage(content)) {
    // A local actor linked to the peer's actor ended: the peer hears it as
    // that actor's DOWN (it kills the proxy its actor is linked to). Other
    // system messages are not for peers.
    if (content.match_elements<caf::exit_msg>()) {
      const auto& exit = content.get_as<caf::exit_msg>(0);
      if (exit.source && exit.source.node() == system_.node()) {
        sendDown(exit.source.id(), exit.reason);
        return;
      }
    }
    ACTORPIPE_LOG(kDebug, "not sent to a remote actor: " << caf::to_string(content));
    return;
  }
  // Encoded into this thread's buffer: a small message is copied into its
  // frame from there, so its bytes need no allocation of their own.
  thread_local EncodedMessage encoded;
  struct Release {  // however this returns: no tensor held, no large buffer kept
    ~Release() {
      encoded.tensors.clear();
      if (encoded.bytes.capacity() > (size_t{64} << 10)) std::vector<char>().swap(encoded.bytes);
    }
  } release;
  caf::error problem;
  if (Error bad = encodeMessage(system_, content, encoded)) {
    problem = makeError(RemoteError::kUnsendable, bad.what());
  } else if (encoded.bytes.size() > options_.maxMessageBytes) {
    problem = makeError(RemoteError::kUnsendable,
                        "a message of " + std::to_string(encoded.bytes.size()) +
                            " bytes (tensors apart) exceeds maxMessageBytes");
  } else if (encoded.tensors.size() > options_.maxTensors) {
    problem = makeError(RemoteError::kUnsendable, "a message of " +
                                                      std::to_string(encoded.tensors.size()) +
                                                      " tensors exceeds maxTensors");
  } else {
    size_t tensorBytes = 0;
    for (const auto& tensor : encoded.tensors) tensorBytes += tensor.nbytes();
    if (tensorBytes > options_.maxTensorBytes) {
      problem = makeError(RemoteError::kUnsendable, "a message of " + std::to_string(tensorBytes) +
                                                        " tensor bytes exceeds maxTensorBytes");
    }
  }
  // Only a local sender can be answered (no routing through this node).
  uint64_t source = 0;
  if (!problem && sender && sender->node() == system_.node()) {
    source = sender->id();
    if (auto node = node_.lock()) node->exportActor(sender);
  }
  size_t bytes = encoded.bytes.size();
  for (const auto& tensor : encoded.tensors) bytes += tensor.nbytes();
  // Entries forgotten to make room: let go after the lock (the last
  // handle of a proxy ends it, and it tells this link).
  std::vector<Pending> forgotten;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool awaited = mid.is_request() && source != 0;
    // Before the window: a request that cannot wait for its answer does
    // not wait for room either (senders waiting meanwhile may take the
    // book past its bound by their number).
    if (!problem && awaited && !dead_ && !roomForRequest(forgotten)) {
      problem = makeError(RemoteError::kTooManyRequests,
                          std::to_string(pending_.size()) + " requests to node " + peer_ +
                              " await answers (maxPendingRequests)");
    }
    if (!problem && !waitForWindow(lock, bytes)) return;  // refused: trySend
    if (dead_) {
      problem = deathReason_;
    } else if (!problem) {
      if (awaited) {
        pending_[{source, mid.request_id().integer_value()}] =
            Pending{caf::weak_actor_ptr(sender.get()), targetProxy, mid};
      }
      window_.inFlightMessages += 1;
      window_.inFlightBytes += bytes;
      window_.maxInFlightMessages = std::max(window_.maxInFlightMessages, window_.inFlightMessages);
      window_.maxInFlightBytes = std::max(window_.maxInFlightBytes, window_.inFlightBytes);
    }
  }
  if (problem) {
    if (mid.is_request() && sender) {
      sender->enqueue(caf::make_mailbox_element(targetProxy, mid.response_id(), {},
                                                caf::make_message(std::move(problem))),
                      nullptr);
    } else {
      ACTORPIPE_LOG(kWarn, "remote message to actor " << target << " dropped: "
                                                      << system_.render(problem));
    }
    return;
  }
  Frame frame;
  frame.source = source;
  frame.aid = target;
  frame.messageId = mid.integer_value();
  if (encoded.tensors.empty() && encoded.bytes.size() <= kMaxInlineBytes) {
    writeEncoded(encodeInlineFrame(frame, encoded.bytes.data(), encoded.bytes.size()), nullptr,
                 false, true);
    return;
  }
  frame.kind = Frame::Kind::kMessage;
  auto body = std::make_shared<Outgoing>();
  body->message = std::move(encoded);
  write(frame, std::move(body), true);
}

bool Link::roomForRequest(std::vector<Pending>& forgotten) {
  if (pending_.size() < options_.maxPendingRequests) {
    refusedRequests_ = 0;
    return true;
  }
  // Full: forget the requests of requesters that have ended, on the first
  // refusal and then once per 1/64 of the bound in refusals (a walk of the
  // whole book, under the lock: 64 entries per refusal at most). Ended is
  // read off the control block: a strong handle taken here could be the
  // last, and end the requester under the lock.
  const size_t step = std::max<size_t>(1, options_.maxPendingRequests / 64);
  if (refusedRequests_++ % step != 0) return false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    caf::actor_control_block* requester = it->second.sender.get();
    if (requester != nullptr && requester->strong_refs.load() > 0) {
      ++it;
      continue;
    }
    forgotten.push_back(std::move(it->second));
    it = pending_.erase(it);
  }
  return pending_.size() < options_.maxPendingRequests;
}

bool Link::waitForWindow(std::unique_lock<std::mutex>& lock, size_t bytes) {
  auto full = [&] {
    return window_.inFlightMessages > 0 &&
           (window_.inFlightMessages + 1 > windowMessages() ||
            window_.inFlightBytes + bytes > windowBytes());
  };
  if (dead_ || !full() || tInPipeCallback) return true;
  if (remote::detail::trying()) {
    remote::detail::refuse();
    return false;
  }
  window_.heldBack += 1;
  changed_.wait(lock, [&] { return dead_ || !full(); });
  return true;
}

uint64_t Link::windowMessages() const {
  return peerWindowMessages_ == 0 ? options_.windowMessages
                                  : std::min<uint64_t>(options_.windowMessages, peerWindowMessages_);
}

uint64_t Link::windowBytes() const {
  return peerWindowBytes_ == 0 ? options_.windowBytes
                               : std::min<uint64_t>(options_.windowBytes, peerWindowBytes_);
}

Error Link::hold(size_t bytes) {
  std::lock_guard<std::mutex> guard(mutex_);
  heldMessages_ += 1;
  heldBytes_ += bytes;
  // What we hold is at most what the peer has in flight, which its window
  // bounds (a message bigger than the window goes alone); twice that, for
  // the few answers a loop sends past the window (an error reply to a
  // message for an actor that is gone), is a peer that ignores it.
  if (heldMessages_ > 2 * windowMessages() + 16 ||
      (heldMessages_ > 1 && heldBytes_ > 2 * windowBytes())) {
    return ACTORPIPE_ERROR(ProtocolError, "the peer sends past the window: " +
                                              std::to_string(heldMessages_) + " messages, " +
                                              std::to_string(heldBytes_) +
                                              " bytes not yet handled here");
  }
  return Error();
}

void Link::consumed(size_t bytes) {
  Frame credit;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    heldMessages_ -= std::min<uint64_t>(1, heldMessages_);
    heldBytes_ -= std::min<uint64_t>(bytes, heldBytes_);
    if (dead_) return;
    doneMessages_ += 1;
    doneBytes_ += bytes;
    // A quarter of the window at a time: few CREDIT frames, and a sender
    // held at the full window always gets one (it has a whole window
    // here).
    if (doneMessages_ < std::max<uint64_t>(1, windowMessages() / 4) &&
        doneBytes_ < std::max<uint64_t>(1, windowBytes() / 4)) {
      return;
    }
    ACTORPIPE_LOG(kTrace, "node link " << url_ << ": credit " << doneMessages_ << " messages, "
                                       << doneBytes_ << " bytes");
    credit.kind = Frame::Kind::kCredit;
    credit.messages = doneMessages_;
    credit.bytes = doneBytes_;
    doneMessages_ = 0;
    doneBytes_ = 0;
  }
  write(credit);
}

LinkStats Link::stats() {
  std::lock_guard<std::mutex> guard(mutex_);
  LinkStats out = window_;
  out.peer = peer_;
  out.pendingRequests = pending_.size();
  out.proxies = proxies_.size();  // a proxy's entry goes when it ends (forgetProxy)
  out.handles = handleAids_.size();
  return out;
}

void Link::readNext() {
  auto self = shared_from_this();
  pipe_->readDescriptor([self](const Error& error, Descriptor descriptor) {
    InPipeCallback inCallback;
    if (error) {
      self->failRead(error);
      return;
    }
    self->lastRead_ = ticks(Clock::now());
    self->unheardBytes_ = 0;
    // A batch with nothing to read (INLINEs and control frames) is
    // delivered in this callback: its frames are decoded into this thread's
    // vectors, which keep their memory from batch to batch. Any other
    // batch (or one that arrives while those are in use: a delivery that
    // reaches another link's callback) has its own, kept until its read.
    const bool deliverNow = descriptor.payloads.empty() && descriptor.tensors.empty();
    thread_local Scratch tScratch;
    const bool scratch = deliverNow && !tScratch.busy;
    std::shared_ptr<std::vector<BatchEntry>> ownEntries;
    std::shared_ptr<std::vector<Incoming>> ownIncoming;
    if (!scratch) {
      ownEntries = std::make_shared<std::vector<BatchEntry>>();
      ownIncoming = std::make_shared<std::vector<Incoming>>();
    }
    std::vector<BatchEntry>* entries = scratch ? &tScratch.entries : ownEntries.get();
    std::vector<Incoming>* incoming = scratch ? &tScratch.incoming : ownIncoming.get();
    struct Release {  // however this returns: the scratch holds nothing of this batch
      ~Release() {
        if (!used) return;
        tScratch.entries.clear();
        tScratch.incoming.clear();
        tScratch.busy = false;
      }
      bool used;
    } release{scratch};
    if (scratch) tScratch.busy = true;
    if (Error bad = decodeBatch(descriptor.metadata, *entries)) {
      self->failProtocol(bad);
      return;
    }
    // Each MESSAGE owns the next payload and its count of the tensors.
    size_t messages = 0, tensorCount = 0;
    for (const auto& entry : *entries) {
      if (entry.frame.kind == Frame::Kind::kMessage) ++messages;
      tensorCount += entry.tensors;
    }
    if (descriptor.payloads.size() != messages || descriptor.tensors.size() != tensorCount) {
      self->failProtocol(ACTORPIPE_ERROR(
          ProtocolError, "a node batch of " + std::to_string(messages) + " messages and " +
                             std::to_string(tensorCount) + " tensors came with " +
                             std::to_string(descriptor.payloads.size()) + " payloads and " +
                             std::to_string(descriptor.tensors.size()) + " tensors"));
      return;
    }
    size_t announced = 0;  // for the error below (each length is checked on its own)
    for (const auto& p : descriptor.payloads) announced += p.length;
    // Device tensors: a read may wait behind GPU work before any byte
    // moves (a cuda_ipc read on the sender's event, cuda_basic's copy off
    // the device), and nothing counts meanwhile. The pipe bounds each
    // length (maxTensorBytes) and their number: no overflow.
    size_t uncounted = 0;
    for (const auto& t : descriptor.tensors) {
      announced += t.length;
      if (t.targetDevice ? !t.targetDevice->isCpu() : !t.sourceDevice.isCpu()) uncounted += t.length;
    }
    Allocation allocation;
    // The memory is the peer's to ask for, within the bounds checked below;
    // a host without it cuts the link (the peer would wait for ever).
    try {
      incoming->resize(entries->size());
      size_t payload = 0, tensor = 0;
      for (size_t i = 0; i < entries->size(); ++i) {
        const BatchEntry& entry = (*entries)[i];
        Incoming& in = (*incoming)[i];
        if (entry.frame.kind == Frame::Kind::kInline) {
          in.bytes = entry.frame.body.size();
          if (in.bytes > self->options_.maxMessageBytes) {
            self->failProtocol(ACTORPIPE_ERROR(LimitExceededError, "a remote actor message", in.bytes,
                                               self->options_.maxMessageBytes));
            return;
          }
          if (Error over = self->hold(in.bytes)) {
            self->failProtocol(over);
            return;
          }
          continue;
        }
        if (entry.frame.kind != Frame::Kind::kMessage) continue;
        size_t length = descriptor.payloads[payload].length;
        if (length > self->options_.maxMessageBytes) {
          self->failProtocol(ACTORPIPE_ERROR(LimitExceededError, "a remote actor message", length,
                                             self->options_.maxMessageBytes));
          return;
        }
        if (entry.tensors > self->options_.maxTensors) {
          self->failProtocol(ACTORPIPE_ERROR(ProtocolError, "a remote actor message of " +
                                                                std::to_string(entry.tensors) +
                                                                " tensors exceeds maxTensors"));
          return;
        }
        // One message's tensors together, the bound that also holds for a
        // message larger than the window (hold() lets one such in alone).
        size_t tensorBytes = 0;
        for (uint32_t t = 0; t < entry.tensors; ++t) {
          const size_t stated = descriptor.tensors[tensor + t].length;
          if (stated > self->options_.maxTensorBytes - tensorBytes) {
            self->failProtocol(ACTORPIPE_ERROR(
                LimitExceededError, "the tensors of a remote actor message",
                tensorBytes + std::min(stated, std::numeric_limits<size_t>::max() - tensorBytes),
                self->options_.maxTensorBytes));
            return;
          }
          tensorBytes += stated;
        }
        in.bytes = length + tensorBytes;
        if (Error over = self->hold(in.bytes)) {
          self->failProtocol(over);
          return;
        }
        in.payload.resize(length);
        allocation.payloads.push_back(Allocation::Payload{in.payload.data()});
        in.tensors.resize(entry.tensors);
        for (uint32_t t = 0; t < entry.tensors; ++t, ++tensor) {
          allocation.tensors.emplace_back();
          self->poolTensor(descriptor.tensors[tensor], in.tensors[t]);
          if (Error bad = receiveTensor(descriptor.tensors[tensor], in.tensors[t],
                                        allocation.tensors.back())) {
            self->failProtocol(bad);
            return;
          }
        }
        ++payload;
      }
    } catch (const std::bad_alloc&) {
      self->failProtocol(ACTORPIPE_ERROR(SystemError, "allocating the " + std::to_string(announced) +
                                                          " bytes of a node batch", ENOMEM));
      return;
    }
    if (deliverNow) {
      // INLINEs and control frames: the read has nothing to bring, so the
      // batch is delivered now, a loop turn before its (empty) read would
      // complete; the next descriptor is asked for once it has.
      releaseHandoff();
      self->deliver(*entries, *incoming);
      if (self->dead()) return;
      self->pipe_->read(Allocation(), [self](const Error& error) {
        InPipeCallback inCallback;
        if (error) {
          self->failRead(error);
          return;
        }
        self->readNext();
      });
      return;
    }
    self->uncountedBytes_ = uncounted;  // checked and allocated: the wait begins
    self->pipe_->read(std::move(allocation), [self, entries = std::move(ownEntries),
                                              incoming = std::move(ownIncoming)](const Error& error) {
      InPipeCallback inCallback;
      self->uncountedBytes_ = 0;
      if (error) {
        self->failRead(error);
        return;
      }
      self->lastRead_ = ticks(Clock::now());
      releaseHandoff();
      self->deliver(*entries, *incoming);
      if (!self->dead()) self->readNext();
    });
  });
}

namespace {

// Frames whose order against the peer's messages does not matter: they are
// handled while a message is held (AT is what a held message waits for).
bool passesHeld(Frame::Kind kind) {
  switch (kind) {
    case Frame::Kind::kAt:
    case Frame::Kind::kWhere:
    case Frame::Kind::kLookup:
    case Frame::Kind::kFound:
    case Frame::Kind::kBeat:
    case Frame::Kind::kCredit:
    case Frame::Kind::kWatch:
      return true;
    default:
      return false;
  }
}

} // namespace

void Link::deliver(std::vector<BatchEntry>& entries, std::vector<Incoming>& incoming) {
  // Hosted actors woken by this batch run here, once it is delivered.
  LoopUnit::Batch hosted(unit_);
  for (size_t i = 0; i < entries.size() && !dead(); ++i) {
    Frame& frame = entries[i].frame;
    if (!held_.empty() && !passesHeld(frame.kind)) {
      // Behind a held message, in order. Its MESSAGEs are bounded by the
      // window (read, not credited); other frames by this, past which the
      // hold is given up, as it is when the peer leaves: what is held is
      // delivered (the message waiting refused), then the BYE.
      held_.push_back(Held{std::move(frame), std::move(incoming[i])});
      if (held_.back().frame.kind == Frame::Kind::kBye) {
        abandonHold("its sender left");
      } else if (held_.size() > options_.windowMessages + kMaxHeldFrames) {
        abandonHold("its sender sent more than " + std::to_string(held_.size()) +
                    " frames meanwhile");
      }
      continue;
    }
    if (!onFrame(frame, incoming[i])) held_.push_back(Held{std::move(frame), std::move(incoming[i])});
  }
  holding_ = !held_.empty();
}

Link::Introduced Link::introduce(const Frame& frame, std::string& why) {
  auto node = node_.lock();
  if (!node || abandoning_) {
    why = abandoning_ ? abandonWhy_ : "this node is leaving";
    return Introduced::kNo;
  }
  // Only a message someone here would get is worth a link: an answer that
  // is awaited, or a message for an actor that peers may address.
  caf::message_id mid(frame.messageId);
  if (mid.is_response()) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (pending_.count({frame.aid, mid.request_id().integer_value()}) == 0) {
      return Introduced::kNobodyWaits;
    }
  } else if (!node->exported(frame.aid)) {
    return Introduced::kNobodyWaits;
  }
  if (tooManyNodes_) {  // not worth a link to any of them: refused at once
    why = "it names more than " + std::to_string(kMaxIntroductions) + " nodes without a link here";
    return Introduced::kNo;
  }
  bool waiting = false;
  auto note = [&why](const std::string& reason) { why += (why.empty() ? "" : "; ") + reason; };
  for (const auto& nid : unknownNodes_) {
    auto failed = failedNodes_.find(nid);
    if (failed != failedNodes_.end()) {
      note(failed->second);
      continue;
    }
    Introduction* known = nullptr;
    for (auto& entry : introductions_) {
      if (entry.second.node == nid) known = &entry.second;
    }
    if (known != nullptr) {
      if (known->state == Introduction::kFailed) {
        note(known->why);
      } else if (known->state == Introduction::kDone) {
        note("its link ended as soon as it was made");
      } else {
        waiting = true;
      }
      continue;
    }
    if (node->linkToNode(nid)) {
      // Linked since the decode (another link's introduction): again now.
      Introduction& now = introductions_[nextWhere_++];
      now.node = nid;
      now.state = Introduction::kDone;
      waiting = true;
      node->post([self = shared_from_this()] { self->resumeHeld(); });
      continue;
    }
    if (introductions_.size() >= kMaxIntroductions) {
      note("more than " + std::to_string(kMaxIntroductions) + " nodes to link to for one message");
      continue;
    }
    uint64_t request = nextWhere_++;
    Introduction& asked = introductions_[request];
    asked.node = nid;
    Frame where;
    where.kind = Frame::Kind::kWhere;
    where.request = request;
    where.node = encodeNodeId(system_, nid);
    write(where);
    waiting = true;
  }
  if (waiting && deadline_ == 0) {
    // Each hold its own deadline, never one an earlier hold had: a stale
    // expiry the ticker posted cannot end this one.
    deadline_ = std::max(ticks(Clock::now() + options_.lookupTimeout), lastDeadline_ + 1);
    lastDeadline_ = deadline_;
    holdDeadline_ = deadline_;
  }
  return waiting ? Introduced::kWaiting : Introduced::kNo;
}

namespace {

// Where a node says it listens, as a peer named it: a URL this node may
// connect to without a name lookup (one on the loop would stall every link).
bool numericUrl(const std::string& url) {
  if (url.rfind("shm://", 0) == 0) return true;
  if (url.rfind("tcp://", 0) != 0) return false;
  std::string rest = url.substr(6);
  std::string host;
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
    in6_addr v6;
    return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  }
  host = rest.substr(0, rest.find(':'));
  in_addr v4;
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

} // namespace

void Link::onAt(const Frame& frame) {
  auto it = introductions_.find(frame.request);
  if (it == introductions_.end() || it->second.state != Introduction::kAsking) return;
  Introduction& in = it->second;
  auto node = node_.lock();
  if (node && node->linkToNode(in.node)) {  // another introduction linked it meanwhile
    in.state = Introduction::kDone;
    resumeHeld();
    return;
  }
  for (const auto& url : frame.urls) {
    if (numericUrl(url)) {
      in.urls.push_back(url);
    } else {
      in.why += (in.why.empty() ? "" : ", ") + url + ": not a numeric address";
    }
  }
  if (frame.urls.empty()) {
    in.state = Introduction::kFailed;
    in.why = "node " + peerIdentity() + " has no link to it either";
    resumeHeld();
    return;
  }
  in.state = Introduction::kConnecting;
  tryNextUrl(frame.request);
}

void Link::tryNextUrl(uint64_t request) {
  auto it = introductions_.find(request);
  auto node = node_.lock();
  if (it == introductions_.end() || !node) return;
  Introduction& in = it->second;
  while (in.next < in.urls.size()) {
    const std::string& url = in.urls[in.next++];
    std::shared_ptr<Link> link;
    try {
      link = node->linkTo(url);
    } catch (const std::exception& e) {
      in.why += (in.why.empty() ? "" : ", ") + url + ": " + e.what();
    }
    if (!link) continue;
    in.trying = link;
    std::weak_ptr<Link> weak = shared_from_this();
    link->whenReady([weak, request] {
      auto self = weak.lock();
      if (!self) return;
      if (auto node = self->node_.lock()) {
        node->post([self, request] { self->introducedLinkReady(request); });
      }
    });
    return;
  }
  in.state = Introduction::kFailed;
  std::string urls;
  for (const auto& url : in.urls) urls += (urls.empty() ? "" : " ") + url;
  in.why = (urls.empty() ? std::string("no address to link to it at")
                         : "could not link to it at " + urls) +
           (in.why.empty() ? "" : " (" + in.why + ")");
  in.trying.reset();
  resumeHeld();
}

void Link::introducedLinkReady(uint64_t request) {
  auto it = introductions_.find(request);
  if (it == introductions_.end() || it->second.state != Introduction::kConnecting) return;
  Introduction& in = it->second;
  std::shared_ptr<Link> link = std::move(in.trying);
  if (!link || link->dead()) {
    in.why += std::string(in.why.empty() ? "" : ", ") + (link ? link->url() : "?") + ": link failed";
  } else if (link->peerNodeId() != in.node) {
    // Someone else listens there (or the peer lied): not that node.
    in.why += std::string(in.why.empty() ? "" : ", ") + link->url() + ": another node (" +
              link->peerIdentity() + ") listens there";
  } else {
    in.state = Introduction::kDone;
    ACTORPIPE_LOG(kInfo, "node link " << url_ << ": linked to " << link->peerIdentity()
                                      << " at " << link->url() << ", as " << peerIdentity()
                                      << " introduced it");
    resumeHeld();
    return;
  }
  tryNextUrl(request);
}

void Link::expireIntroductions(int64_t deadline) {
  if (deadline != deadline_) return;  // a hold that has ended since
  // Should the message wait again (a node it names lost its link since),
  // it gets a deadline of its own.
  deadline_ = 0;
  failIntroductions("no link to it within lookupTimeout (" +
                    std::to_string(options_.lookupTimeout.count()) + " ms)");
  resumeHeld();
}

void Link::failIntroductions(const std::string& why) {
  for (auto& entry : introductions_) {
    Introduction& in = entry.second;
    if (in.state != Introduction::kAsking && in.state != Introduction::kConnecting) continue;
    in.state = Introduction::kFailed;
    in.trying.reset();
    in.why = why;
  }
}

void Link::abandonHold(const std::string& why) {
  if (abandoning_) return;  // draining already
  abandoning_ = true;
  abandonWhy_ = why;
  failIntroductions(why);
  resumeHeld();
  abandoning_ = false;
}

void Link::resumeHeld() {
  for (const auto& entry : introductions_) {
    auto state = entry.second.state;
    if (state == Introduction::kAsking || state == Introduction::kConnecting) return;
  }
  // A hosted actor run below may send: as in a pipe callback, its send
  // must not wait for the window on this loop (only the loop reads CREDIT).
  InPipeCallback inCallback;
  LoopUnit::Batch hosted(unit_);
  while (!held_.empty() && !dead()) {
    Held& next = held_.front();
    bool message = next.frame.kind == Frame::Kind::kMessage || next.frame.kind == Frame::Kind::kInline;
    if (!onFrame(next.frame, next.in)) return;  // it waits for another node now
    held_.pop_front();
    if (message) {
      // The next message that waits starts a hold of its own (a deadline,
      // up to kMaxIntroductions nodes); nodes that failed are not asked for
      // again until nothing is held.
      for (auto& entry : introductions_) {
        if (entry.second.state == Introduction::kFailed && failedNodes_.size() < kMaxFailedNodes) {
          failedNodes_.emplace(entry.second.node, entry.second.why);
        }
      }
      introductions_.clear();
      deadline_ = 0;
      holdDeadline_ = 0;
    }
  }
  if (held_.empty()) failedNodes_.clear();
  holding_ = !held_.empty();
}

void Link::poolTensor(const Descriptor::Tensor& entry, Tensor& out) {
  DType dtype;
  Shape shape;
  // A bad entry is left to receiveTensor to refuse.
  if (parsePipeTensor(entry, dtype, shape) || !pool_) return;
  if (entry.targetDevice ? !entry.targetDevice->isCpu() : !entry.sourceDevice.isCpu()) return;
  out = Tensor::fromStorage(pool_->take(entry.length), std::move(shape), dtype);
}

void Link::failRead(const Error& error) {
  // What was read before is delivered first (a message still waiting for
  // a link refused), as it would have been without the hold.
  if (!held_.empty()) abandonHold("its sender's link ended");
  bool left = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    left = byeWritten_;
  }
  // After our BYE the peer closing its end is the leave completing.
  fail(left ? makeError(RemoteError::kNodeLeft, "this node left") : lostError(error.what()));
}

void Link::loseOnLoop(const caf::error& reason, Clock::time_point now, std::chrono::milliseconds grace) {
  auto node = holding_.load() ? node_.lock() : nullptr;
  if (!node) {
    fail(reason);
    return;
  }
  int64_t since = losingSince_.load();
  if (since != 0) {
    // Posted once; a loop that has not run it within `grace` (a hosted
    // actor blocking it) does not keep the loss from the senders waiting.
    if (now - Clock::time_point(Clock::duration(since)) >= grace) fail(reason);
    return;
  }
  losingSince_ = ticks(now);
  bool posted = node->post([self = shared_from_this(), reason] {
    if (!self->held_.empty()) self->abandonHold("its sender is lost");
    self->fail(reason);
  });
  if (!posted) fail(reason);  // the loop has ended: nothing held is read any more
}

void Link::failProtocol(const Error& error) {
  ACTORPIPE_LOG(kWarn, "node link " << url_ << ": " << error.what());
  fail(lostError(error.what()));
}

bool Link::onFrame(Frame& frame, Incoming& in) {
  bool hello = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    hello = helloDone_;
  }
  if (!hello) {
    std::vector<std::function<void()>> ready;
    if (frame.kind != Frame::Kind::kHello) {
      failProtocol(ACTORPIPE_ERROR(ProtocolError, "a node's first frame must be HELLO"));
      return true;
    }
    auto node = node_.lock();
    if (node && frame.identity == node->identity()) {
      failProtocol(ACTORPIPE_ERROR(ProtocolError, "a peer claims this node's own identity"));
      return true;
    }
    // Its CAF node id names its actors in handles, and our proxies of them.
    // Ours would make its proxies look like this node's actors. (A peer
    // with the secret that claims a third node's id can make its proxies
    // look like that node's actors to that node: nodes of a job take each
    // other's word for who they are, docs/remote.md.)
    caf::node_id peerNode;
    if (Error bad = decodeNodeId(system_, frame.node, peerNode)) {
      failProtocol(bad);
      return true;
    }
    if (peerNode == system_.node()) {
      failProtocol(ACTORPIPE_ERROR(ProtocolError, "a peer claims this node's CAF node id"));
      return true;
    }
    {
      std::lock_guard<std::mutex> guard(mutex_);
      peer_ = frame.identity;
      peerNode_ = std::move(peerNode);
      peerWindowMessages_ = frame.messages;
      peerWindowBytes_ = frame.bytes;
      peerUrls_ = std::move(frame.urls);
      helloDone_ = true;
      ready.swap(readyWaiters_);
    }
    changed_.notify_all();
    for (auto& fn : ready) fn();
    ACTORPIPE_LOG(kInfo, "node link " << url_ << ": peer " << frame.identity);
    return true;
  }
  switch (frame.kind) {
    case Frame::Kind::kHello:
      failProtocol(ACTORPIPE_ERROR(ProtocolError, "a second HELLO"));
      return true;
    case Frame::Kind::kLookup: {
      Frame answer;
      answer.kind = Frame::Kind::kFound;
      answer.request = frame.request;
      if (auto node = node_.lock()) {
        if (auto actor = node->published(frame.name, answer.interface)) answer.aid = actor->id();
      }
      write(answer);
      return true;
    }
    case Frame::Kind::kFound: {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        auto it = lookups_.find(frame.request);
        if (it == lookups_.end()) return true;  // answered after its asker gave up
        it->second->done = true;
        it->second->aid = frame.aid;
        it->second->interface = std::move(frame.interface);
      }
      changed_.notify_all();
      return true;
    }
    case Frame::Kind::kMessage:
    case Frame::Kind::kInline: {
      caf::message content;
      // A message that names a node without a link here may be held and
      // decoded again once linked: its tensors are kept until then.
      bool mayHold = options_.automaticConnections;
      unknownNodes_.clear();
      tooManyNodes_ = false;
      Error bad = frame.kind == Frame::Kind::kInline
                      ? decodeMessage(system_, frame.body.data(), frame.body.size(), {}, content,
                                      &decodeUnit_)
                      : decodeMessage(system_, in.payload.data(), in.payload.size(),
                                      mayHold ? in.tensors : std::move(in.tensors), content,
                                      &decodeUnit_);
      size_t unreachable = 0;
      if (!settleHandles(unreachable)) {
        failProtocol(ACTORPIPE_ERROR(ProtocolError, "the peer sent handles of more than " +
                                                        std::to_string(options_.maxPeerHandles) +
                                                        " of its actors"));
        return true;
      }
      if (bad) {
        failProtocol(bad);
        return true;
      }
      caf::error refused;
      if (unreachable == 0) in.tensors.clear();  // the copies kept for a second decode
      if (unreachable > 0) {
        std::string why;
        Introduced introduced = mayHold ? introduce(frame, why) : Introduced::kNo;
        if (introduced == Introduced::kWaiting) return false;  // held until linked to those nodes
        in.tensors.clear();
        if (introduced == Introduced::kNobodyWaits) {
          // onMessage drops an answer nobody awaits and answers a message
          // for an actor that is not here as it always does.
          onMessage(frame, std::move(content), in.bytes);
          return true;
        }
        if (!mayHold) {
          why = "automatic connections are off";
        } else if (why.empty() && unknownNodes_.empty()) {
          why = "the link to its node ended meanwhile";
        }
        // Its handles would arrive as no actor: the message is refused, as
        // one to an actor that is gone (a request is answered with this).
        refused = makeError(RemoteError::kUnsendable,
                            "the message holds " + std::to_string(unreachable) +
                                " handle(s) of actors on nodes this node has no link to" +
                                (why.empty() ? std::string() : " (" + why + ")") +
                                "; nodes do not relay");
        ACTORPIPE_LOG(kWarn, "node link " << url_ << ": " << system_.render(refused));
      }
      onMessage(frame, std::move(content), in.bytes, std::move(refused));
      return true;
    }
    case Frame::Kind::kWhere: {
      // Where a node we link to listens, as it said in its HELLO: the asker
      // got a handle of its actor from us. None if we have no live link.
      caf::node_id nid;
      if (Error bad = decodeNodeId(system_, frame.node, nid)) {
        failProtocol(bad);
        return true;
      }
      Frame answer;
      answer.kind = Frame::Kind::kAt;
      answer.request = frame.request;
      if (auto node = node_.lock()) {
        auto link = nid ? node->linkToNode(nid) : nullptr;
        if (link && link.get() != this) answer.urls = link->peerUrls();
      }
      write(answer);
      return true;
    }
    case Frame::Kind::kAt:
      onAt(frame);
      return true;
    case Frame::Kind::kLink:
    case Frame::Kind::kUnlink:
      onLink(frame.source, frame.aid, frame.kind == Frame::Kind::kLink);
      return true;
    case Frame::Kind::kWatch:
      onWatch(frame.aid);
      return true;
    case Frame::Kind::kDown: {
      caf::error reason;
      if (frame.code != 0) {
        reason = caf::error(frame.code, caf::atom_value{frame.category},
                            frame.reason.empty() ? caf::message() : caf::make_message(frame.reason));
      }
      caf::strong_actor_ptr proxy;
      std::vector<caf::strong_actor_ptr> held;  // released after the kill
      HeldHandles handle;  // in registries
      {
        std::lock_guard<std::mutex> guard(mutex_);
        auto it = proxies_.find(frame.aid);
        if (it != proxies_.end()) {
          proxy = it->second.lock();
          proxies_.erase(it);
        }
        for (auto& recent : recentProxies_) {
          if (recent && recent == proxy) held.push_back(std::move(recent));
        }
        // Every link of the peer's actor frame.aid. Not by aid + 1: a peer's
        // aid of 2^64 - 1 wraps it to 0, and the range ran from end() to
        // begin() (the tree's header freed, a neighbour overwritten).
        auto first = peerLinks_.lower_bound({frame.aid, 0});
        auto last = peerLinks_.upper_bound({frame.aid, std::numeric_limits<caf::actor_id>::max()});
        for (auto i = first; i != last; ++i) held.push_back(std::move(i->second));
        peerLinks_.erase(first, last);
        auto h = handleAids_.find(frame.aid);
        if (h != handleAids_.end()) handle.insert(handleAids_.extract(h));
      }
      releaseHandles(std::move(handle), reason);
      if (proxy) caf::actor_cast<caf::actor_proxy*>(proxy)->kill_proxy(nullptr, std::move(reason));
      return true;
    }
    case Frame::Kind::kCredit: {
      ACTORPIPE_LOG(kTrace, "node link " << url_ << ": credited " << frame.messages << " messages, "
                                         << frame.bytes << " bytes");
      {
        std::lock_guard<std::mutex> guard(mutex_);
        // More credit than was in flight is the peer's mistake: clamp.
        window_.inFlightMessages -= std::min<uint64_t>(frame.messages, window_.inFlightMessages);
        window_.inFlightBytes -= std::min<uint64_t>(frame.bytes, window_.inFlightBytes);
      }
      changed_.notify_all();
      return true;
    }
    case Frame::Kind::kBeat:
      return true;
    case Frame::Kind::kBye:
      fail(makeError(RemoteError::kNodeLeft,
                     "node " + peerIdentity() + (url_.empty() ? "" : " at " + url_) + " left"));
      return true;
  }
  return true;
}

void Link::onMessage(const Frame& frame, caf::message content, size_t bytes, caf::error refused) {
  ACTORPIPE_LOG(kTrace, "node link " << url_ << ": message " << frame.source << " -> " << frame.aid
                                     << ", " << bytes << " bytes");
  caf::message_id mid(frame.messageId);
  if (mid.is_response()) {
    // Only an answer to a request this link carried, delivered with the id
    // its asker waits for: a peer cannot answer what it was not asked.
    Pending waiting;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto it = pending_.find({frame.aid, mid.request_id().integer_value()});
      if (it == pending_.end()) {
        lock.unlock();
        consumed(bytes);
        return;
      }
      waiting = std::move(it->second);
      pending_.erase(it);
    }
    if (refused) content = caf::make_message(std::move(refused));
    auto sender = waiting.sender.lock();
    if (!sender) {  // the requester ended meanwhile
      consumed(bytes);
      return;
    }
    sender->enqueue(
        caf::mailbox_element_ptr(new CountedElement(std::move(waiting.target),
                                                    waiting.mid.response_id(), std::move(content),
                                                    weak_from_this(), bytes)),
        &unit_);
    return;
  }
  auto node = node_.lock();
  caf::strong_actor_ptr target = node ? node->exported(frame.aid) : nullptr;
  caf::strong_actor_ptr sender = frame.source != 0 ? proxyFor(frame.source) : nullptr;
  if (!target && !refused) {
    refused = caf::make_error(caf::sec::request_receiver_down,
                              "no actor " + std::to_string(frame.aid) + " on node " +
                                  (node ? node->identity() : std::string("?")));
  }
  if (refused) {
    consumed(bytes);
    if (mid.is_request() && frame.source != 0) {
      Frame answer;
      answer.kind = Frame::Kind::kMessage;
      answer.source = frame.aid;
      answer.aid = frame.source;
      answer.messageId = mid.response_id().integer_value();
      auto body = std::make_shared<Outgoing>();
      encodeMessage(system_, caf::make_message(std::move(refused)), body->message);
      write(answer, std::move(body));
    }
    return;
  }
  target->enqueue(caf::mailbox_element_ptr(new CountedElement(std::move(sender), mid,
                                                              std::move(content),
                                                              weak_from_this(), bytes)),
                  &unit_);
}

caf::strong_actor_ptr Link::proxyFor(caf::actor_id aid) {
  caf::strong_actor_ptr evicted;  // let go outside the lock: its end calls forgetProxy
  std::lock_guard<std::mutex> guard(mutex_);
  if (dead_) return nullptr;
  auto& slot = proxies_[aid];
  if (auto proxy = slot.lock()) return proxy;
  caf::actor_config config;
  auto proxy = caf::make_actor<Proxy, caf::strong_actor_ptr>(aid, peerNode_, &system_, config,
                                                              weak_from_this(), serial_);
  slot = caf::weak_actor_ptr(proxy.get());
  auto& recent = recentProxies_[nextRecent_++ % kRecentProxies];
  evicted = std::move(recent);
  recent = proxy;
  return proxy;
}

void Link::forgetProxy(caf::actor_id aid, const caf::actor_control_block* proxy) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = proxies_.find(aid);
  if (it != proxies_.end() && it->second.get() == proxy) proxies_.erase(it);
}

caf::expected<caf::strong_actor_ptr> Link::lookup(const std::string& name,
                                                  std::chrono::milliseconds timeout,
                                                  std::set<std::string>& interface) {
  auto state = std::make_shared<Lookup>();
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_) return deathReason_;
    id = nextLookup_++;
    lookups_[id] = state;
  }
  Frame ask;
  ask.kind = Frame::Kind::kLookup;
  ask.request = id;
  ask.name = name;
  write(ask);
  caf::actor_id aid = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return state->done || dead_; });
    lookups_.erase(id);
    if (!state->done) {
      if (dead_) return deathReason_;
      return caf::make_error(caf::sec::request_timeout,
                             "the node at " + url_ + " did not answer within " +
                                 std::to_string(timeout.count()) + " ms");
    }
    aid = state->aid;
  }
  if (aid == 0) {
    return makeError(RemoteError::kNoSuchActor,
                     "nothing is published as '" + name + "' at " + url_);
  }
  interface = std::set<std::string>(state->interface.begin(), state->interface.end());
  auto proxy = proxyFor(aid);
  if (!proxy) return lostError("while looking up '" + name + "'");
  return proxy;
}

void Link::sendLink(caf::actor_id source, caf::actor_id target, bool link) {
  if (dead()) return;
  Frame frame;
  frame.kind = link ? Frame::Kind::kLink : Frame::Kind::kUnlink;
  frame.source = source;
  frame.aid = target;
  write(frame);
}

void Link::onLink(caf::actor_id source, caf::actor_id target, bool link) {
  auto node = node_.lock();
  caf::strong_actor_ptr actor = node ? node->exported(target) : nullptr;
  if (!actor) {
    // Linking to an actor that is gone ends the linker, as in CAF.
    if (link) sendDown(target, caf::make_error(caf::exit_reason::unknown));
    return;
  }
  caf::strong_actor_ptr proxy = proxyFor(source);
  if (!proxy) return;  // the link is dead
  bool tooMany = false;
  caf::strong_actor_ptr unlinked;  // let go outside the lock
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!link) {
      auto it = peerLinks_.find({source, target});
      if (it != peerLinks_.end()) {
        unlinked = std::move(it->second);
        peerLinks_.erase(it);
      }
    } else if (peerLinks_.size() >= options_.maxPeerLinks && !peerLinks_.count({source, target})) {
      tooMany = true;  // each link is an attachable here and a proxy held
    } else {
      peerLinks_[{source, target}] = proxy;
    }
  }
  if (tooMany) {
    failProtocol(ACTORPIPE_ERROR(ProtocolError, "the peer made more than " +
                                                    std::to_string(options_.maxPeerLinks) +
                                                    " links to this node's actors"));
    return;
  }
  tFromPeer = true;
  if (link) actor->get()->add_link(proxy->get());
  else actor->get()->remove_link(proxy->get());
  tFromPeer = false;
}

void Link::onWatch(caf::actor_id aid) {
  auto node = node_.lock();
  if (!node) return;
  // A handle of ours that left this node is in CAF's registry until the
  // actor ends: CAF's serializer puts it there (as for its middleman), and
  // exportActor does for published actors and senders. Nothing else is
  // found, whatever id a peer names.
  caf::strong_actor_ptr actor = system_.registry().get(aid);
  if (!actor) {
    sendDown(aid, caf::make_error(caf::exit_reason::unknown));
    return;
  }
  node->exportActor(actor);  // its end goes to peers as its DOWN
}

caf::strong_actor_ptr Link::make_proxy(caf::node_id nid, caf::actor_id aid) {
  // get_or_put keeps what this returns, a null too: settleHandles erases
  // the refused ones, so the registry holds only proxies. (Every link of a
  // node decodes on its Context's one loop: nothing else runs between.)
  refusedHandles_.emplace_back(nid, aid);
  if (!nid || aid == 0) return nullptr;  // a null handle, as CAF writes one
  auto node = node_.lock();
  std::shared_ptr<Link> owner;
  if (nid == peerNodeId()) {
    owner = shared_from_this();
  } else if (node) {
    owner = node->linkToNode(nid);  // a third node's actor, reached directly
  }
  if (!owner) {
    ++unreachableHandles_;
    if (std::find(unknownNodes_.begin(), unknownNodes_.end(), nid) == unknownNodes_.end()) {
      if (unknownNodes_.size() < kMaxIntroductions) {
        unknownNodes_.push_back(nid);
      } else {
        tooManyNodes_ = true;
      }
    }
    return nullptr;
  }
  if (introduced_ >= options_.maxPeerHandles) {
    handleOverflow_ = true;
    return nullptr;
  }
  auto proxy = owner->proxyFor(aid);
  if (!proxy || !owner->holdHandle(aid, shared_from_this())) {  // that link died meanwhile
    ++unreachableHandles_;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    introducedAt_[{owner->serial_, aid}] = owner;
  }
  newHandles_.emplace_back(owner, aid);
  refusedHandles_.pop_back();
  return proxy;
}

void Link::dropIntroducers(caf::actor_id aid) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = handleAids_.find(aid);
  if (it == handleAids_.end()) return;
  auto& introducers = it->second;
  introducers.erase(std::remove_if(introducers.begin(), introducers.end(),
                                   [](const std::weak_ptr<Link>& l) { return l.expired(); }),
                    introducers.end());
  // The proxy stays until its actor's DOWN or this link's end, as one
  // the peer's own messages brought and no registry holds now would.
  if (introducers.empty()) handleAids_.erase(it);
}

bool Link::holdHandle(caf::actor_id aid, const std::shared_ptr<Link>& introducer) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_) return false;
    // A registry asks only for what it lacks, and an entry leaves
    // handleAids_ before it leaves the registry: `introducer` is not here.
    handleAids_[aid].push_back(introducer);
  }
  ++introducer->introduced_;
  return true;
}

void Link::releaseHandles(HeldHandles held, const caf::error& reason) {
  caf::node_id peer = peerNodeId();
  for (auto& entry : held) {
    for (auto& weak : entry.second) {
      auto introducer = weak.lock();
      if (!introducer) continue;
      introducer->handles_->erase(peer, entry.first, reason);  // kills the proxy
      --introducer->introduced_;
      std::lock_guard<std::mutex> guard(introducer->mutex_);
      introducer->introducedAt_.erase({serial_, entry.first});
    }
  }
}

bool Link::settleHandles(size_t& unreachable) {
  unreachable = 0;
  if (refusedHandles_.empty() && newHandles_.empty() && unreachableHandles_ == 0 &&
      !handleOverflow_) {
    return true;  // most messages hold no handle: nothing to settle
  }
  for (const auto& refused : refusedHandles_) {
    // Only this loop adds entries: one still null is a refusal (the same
    // handle may have been refused, then taken, in one message).
    if (!handles_->get(refused.first, refused.second)) handles_->erase(refused.first, refused.second);
  }
  refusedHandles_.clear();
  unreachable = unreachableHandles_;
  unreachableHandles_ = 0;
  std::vector<std::pair<std::shared_ptr<Link>, caf::actor_id>> watch;
  watch.swap(newHandles_);
  for (auto& entry : watch) {
    Frame frame;
    frame.kind = Frame::Kind::kWatch;
    frame.aid = entry.second;
    entry.first->write(frame);
  }
  bool ok = !handleOverflow_;
  handleOverflow_ = false;
  return ok;
}

void Link::sendDown(caf::actor_id aid, const caf::error& reason) {
  if (dead()) return;
  Frame down;
  down.kind = Frame::Kind::kDown;
  down.aid = aid;
  if (reason) {  // CAF 0.17's code() of no error dereferences nothing
    down.code = reason.code();
    down.category = static_cast<uint64_t>(reason.category());
    down.reason = system_.render(reason).substr(0, kMaxReasonLength);
  }
  write(down);
}

void Link::tick(Clock::time_point now, std::chrono::milliseconds interval,
                std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_ || byeWritten_) return;  // leaving: NodeCore::leave bounds the wait
  }
  auto since = [&](int64_t tick) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        now - Clock::time_point(Clock::duration(tick)));
  };
  int64_t deadline = holdDeadline_.load();
  if (deadline != 0 && ticks(now) >= deadline && holdDeadline_.compare_exchange_strong(deadline, 0)) {
    if (auto node = node_.lock()) {
      node->post([self = shared_from_this(), deadline] { self->expireIntroductions(deadline); });
    }
  }
  // Nothing else arrives while a large message's bytes do (they share the
  // pipe): those bytes are the peer speaking. Counted as they arrive, not
  // allowed for by the size the peer announced: a peer that announces
  // gigabytes and sends none is as silent as one that sends nothing.
  if (uint64_t arrived = pipe_->core()->arrivals(); arrived != arrivalsSeen_) {
    arrivalsSeen_ = arrived;
    lastArrival_ = ticks(now);
  }
  auto sinceFrame = since(lastRead_.load());
  auto sinceRead = std::min(sinceFrame, since(lastArrival_));
  auto sinceWrite = since(lastWrite_.load());
  // A loop busy writing a large message reads late, and a peer still
  // reading one we finished writing speaks late: a large message on a slow
  // link gets the time it needs at 10 MB/s (a 100 Mbit/s link), on top,
  // until the peer next speaks. Device tensors being read get as long, up
  // to kDeviceWaits bounds: a peer that announces 16 GiB of them and falls
  // silent is let go within that, not 28 minutes later.
  size_t sent = std::max(writingBytes_.load(), unheardBytes_.load());
  auto device = std::min(std::chrono::milliseconds(uncountedBytes_.load() / 10000), timeout * kDeviceWaits);
  auto allowed = timeout + device + std::chrono::milliseconds(sent / 10000);
  if (sinceRead >= allowed) {
    loseOnLoop(lostError("nothing heard for " + std::to_string(sinceRead.count()) +
                         " ms (frozen, or the network between is cut)"),
               now, timeout);
    return;
  }
  // A peer's loop reads whatever arrives (its window bounds what it holds),
  // so a write it leaves unread is a peer that speaks but does not listen:
  // it would hold this write, and the senders behind it, for ever.
  // Only once the peer has spoken after the bound passed: a loop of ours
  // too busy to finish the write would not have read that either.
  int64_t started = writeStarted_.load();
  if (started != 0) {
    auto waited = since(started);
    auto bound = timeout + std::chrono::milliseconds(writingBytes_.load() / 10000);
    // Frames only: a copy that blocks our loop counts arrivals meanwhile
    // (cma, xth), and that loop cannot write either.
    if (waited >= bound && sinceFrame < waited - bound) {
      loseOnLoop(lostError("it has not read what was written to it for " + std::to_string(waited.count()) +
                           " ms"),
                 now, timeout);
      return;
    }
  }
  // A BEAT would only queue behind a write in flight (which the peer hears).
  if (sinceWrite >= interval && writeStarted_.load() == 0) {
    Frame beat;
    beat.kind = Frame::Kind::kBeat;
    write(beat);
  }
}

void Link::leave() {
  if (dead()) return;
  Frame bye;
  bye.kind = Frame::Kind::kBye;
  write(bye);  // fails the link once written (or not)
}

void Link::fail(const caf::error& reason) {
  std::map<std::pair<caf::actor_id, uint64_t>, Pending> pending;
  std::vector<caf::strong_actor_ptr> proxies;
  // Released after the kills below (which end the peer's links).
  std::map<std::pair<caf::actor_id, caf::actor_id>, caf::strong_actor_ptr> peerLinks;
  std::vector<std::function<void()>> ready;
  std::vector<caf::strong_actor_ptr> held;  // the recent proxies, released after the kills
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (dead_) return;
    dead_ = true;
    deathReason_ = reason;
    pending.swap(pending_);
    peerLinks.swap(peerLinks_);
    for (auto& entry : proxies_) {
      if (auto proxy = entry.second.lock()) proxies.push_back(std::move(proxy));
    }
    proxies_.clear();
    for (auto& recent : recentProxies_) held.push_back(std::move(recent));
    ready.swap(readyWaiters_);
  }
  changed_.notify_all();
  for (auto& fn : ready) fn();
  ACTORPIPE_LOG(kInfo, "node link " << url_ << ": " << system_.render(reason));
  pipe_->close();
  for (auto& entry : pending) {
    auto& waiting = entry.second;
    auto sender = waiting.sender.lock();
    if (!sender) continue;
    sender->enqueue(caf::make_mailbox_element(waiting.target, waiting.mid.response_id(),
                                                      {}, caf::make_message(reason)),
                            nullptr);
  }
  for (auto& proxy : proxies) {
    caf::actor_cast<caf::actor_proxy*>(proxy)->kill_proxy(nullptr, reason);
  }
  HeldHandles handles;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    handles.swap(handleAids_);
  }
  releaseHandles(std::move(handles), reason);  // killed above: the registry lets them go
  if (auto node = node_.lock()) node->linkClosed(shared_from_this());
}

} // namespace actorpipe::remote::detail
