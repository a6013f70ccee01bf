#pragma once
// Inside a Node: the node itself (published names, the local actors peers
// may address, the listener, the liveness ticker) and one Link per peer
// node (a pipe, the proxies of the peer's actors, the requests pending
// there). See node.h for the behaviour and detail/frames.h for the frames.
//
// Thread model. A Link's pipe callbacks run on the pipe's loop thread and
// read frames one at a time, in order. Any thread may send: a local actor
// sending to a proxy encodes its message on its own thread and hands it to
// the pipe. The ticker thread writes heartbeats and declares silent peers
// lost. Every piece of state below is under its owner's mutex, and no mutex
// is held while a message is enqueued into an actor (an actor that has
// already terminated bounces a request straight back into a proxy, which
// would take the link's mutex again).
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_proxy.hpp>
#include <caf/actor_system.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/execution_unit.hpp>
#include <caf/node_id.hpp>
#include <caf/proxy_registry.hpp>

#include <actorpipe/actors/remote/detail/buffer_pool.h>
#include <actorpipe/actors/remote/detail/frames.h>
#include <actorpipe/actors/remote/detail/loop_unit.h>
#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe::remote::detail {

class Link;

class NodeCore : public std::enable_shared_from_this<NodeCore> {
 public:
  NodeCore(caf::actor_system& system, NodeOptions options);
  void start();
  void leave();

  caf::actor_system& system() { return system_; }
  const NodeOptions& options() const { return options_; }
  const std::string& identity() const { return identity_; }
  std::string url(const std::string& transport) const;
  // Where this node listens, one URL per transport (its HELLO says them).
  std::vector<std::string> urls() const;
  // Runs `fn` on the loop every link's pipe runs on; false once it ended.
  bool post(std::function<void()> fn);
  const std::shared_ptr<BufferPool>& pool() const { return pool_; }

  Error publish(caf::strong_actor_ptr actor, std::set<std::string> interface,
                const std::string& name);
  // With `only`: unpublishes `name` only while it still names that actor.
  void unpublish(const std::string& name, const caf::strong_actor_ptr& only = nullptr);
  void endOnLeave(caf::strong_actor_ptr actor);
  // The published actor and its interface; null if none.
  caf::strong_actor_ptr published(const std::string& name, std::vector<std::string>& interface);

  // A local actor peers may now address by its id (a sender of a remote
  // message, or a published actor); when it terminates, every peer hears.
  void exportActor(const caf::strong_actor_ptr& actor);
  caf::strong_actor_ptr exported(caf::actor_id aid);

  // The link to `url`, made if none is alive.
  std::shared_ptr<Link> linkTo(const std::string& url);
  // A live link whose peer is the node `nid`; null if none.
  std::shared_ptr<Link> linkToNode(const caf::node_id& nid);
  void linkClosed(const std::shared_ptr<Link>& link);
  std::vector<std::string> peers();
  std::vector<LinkStats> stats();

 private:
  void acceptNext();
  void onLocalDown(caf::actor_id aid, const caf::error& reason);
  void tick();

  caf::actor_system& system_;
  const NodeOptions options_;
  const std::string identity_;
  const std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<Context> context_;
  std::shared_ptr<Listener> listener_;

  std::mutex mutex_;
  struct Published {
    caf::strong_actor_ptr actor;
    std::vector<std::string> interface;
  };
  std::map<std::string, Published> published_;
  std::map<caf::actor_id, caf::weak_actor_ptr> exported_;
  std::vector<caf::weak_actor_ptr> endOnLeave_;
  std::set<std::shared_ptr<Link>> links_;
  std::map<std::string, std::weak_ptr<Link>> byUrl_;
  bool leaving_{false};

  std::mutex tickMutex_;
  std::condition_variable tickWake_;
  bool stopTicker_{false};
  std::thread ticker_;
};

// Handles inside a peer's messages resolve in its link's own registry, not
// in one of the node's keyed by node id (as CAF's middleman keeps them): a
// peer with the secret may claim any node id in its HELLO, and with one
// registry its handles of "node N's actor 7" were what an honest N's later
// messages naming its actor 7 resolved to. Per link, a handle of the
// peer's own node is always a proxy on that link.
class Link : public std::enable_shared_from_this<Link>, private caf::proxy_registry::backend {
 public:
  using Clock = std::chrono::steady_clock;

  Link(const std::shared_ptr<NodeCore>& node, std::shared_ptr<Pipe> pipe, std::string url);
  // Lets go of this link's handles: its peer's actors' proxies are killed
  // (fail() did), a third node's actors' proxies live on (they belong to
  // that node's link, and handles other links brought may share them).
  ~Link() override;
  // Says HELLO and starts reading.
  void start();

  const std::string& url() const { return url_; }
  std::string peerIdentity();
  caf::node_id peerNodeId();
  // Where the peer listens, as its HELLO said.
  std::vector<std::string> peerUrls();
  bool dead();
  // `fn` once the peer's HELLO came or the link died (at once if either
  // happened), on whichever thread saw it.
  void whenReady(std::function<void()> fn);

  // From a proxy: `element` is for the peer's actor `target`.
  void forward(caf::mailbox_element_ptr element, caf::actor_id target,
               const caf::strong_actor_ptr& targetProxy);
  // Blocks until the peer answers, the link dies or `timeout` passes.
  caf::expected<caf::strong_actor_ptr> lookup(const std::string& name,
                                              std::chrono::milliseconds timeout,
                                              std::set<std::string>& interface);
  void sendDown(caf::actor_id aid, const caf::error& reason);
  // Our actor `source` linked itself to (unlinked from) the peer's `target`.
  void sendLink(caf::actor_id source, caf::actor_id target, bool link);
  // Ticker: a BEAT if nothing was written for `interval`; lost if nothing
  // was read for `timeout`, or a pipe write has waited that long for the
  // peer to read it (each with time for the bytes in flight).
  void tick(Clock::time_point now, std::chrono::milliseconds interval,
            std::chrono::milliseconds timeout);
  // BYE; the link ends (kNodeLeft here too) when the peer, having read it,
  // closes its end.
  void leave();
  // The end: pending requests fail, proxies go down, the pipe closes.
  void fail(const caf::error& reason);

  void forgetProxy(caf::actor_id aid, const caf::actor_control_block* proxy);
  // A MESSAGE of the peer's, `bytes` long, is done with here (handled by
  // its actor, or dropped): credit the peer once enough add up.
  void consumed(size_t bytes);
  LinkStats stats();

 private:
  void readNext();
  // A MESSAGE's payload and tensors as read, and its bytes in all (an
  // INLINE's bytes are in its frame).
  struct Incoming {
    std::vector<char> payload;
    std::vector<Tensor> tensors;
    size_t bytes{0};
  };
  // A loop thread's vectors for the batches it delivers in their
  // descriptor's callback (readNext); busy while one is being delivered.
  struct Scratch {
    std::vector<BatchEntry> entries;
    std::vector<Incoming> incoming;
    bool busy{false};
  };
  // A read batch's frames, in order, on the loop that read them.
  void deliver(std::vector<BatchEntry>& entries, std::vector<Incoming>& incoming);
  // False: `frame` (a message naming nodes without a link here) is held
  // until they are linked (introduce); `in` is untouched then.
  bool onFrame(Frame& frame, Incoming& in);
  // A frame waiting for the pipe write in flight to finish.
  struct Queued {
    std::string frame;
    std::shared_ptr<struct Outgoing> body;
    bool bye{false};
    size_t control{0};  // its bytes, if the window does not count it
  };
  // Under mutex_: the frames that go in the next pipe write.
  std::vector<Queued> takeBatch();
  void writeBatch(std::vector<Queued> batch);
  // `refused`: not delivered; a request is answered with it, a response
  // arrives as it.
  void onMessage(const Frame& frame, caf::message content, size_t bytes, caf::error refused = {});
  // Until the window has room for `bytes` more (or the link ends); returns
  // at once on a loop thread.
  bool waitForWindow(std::unique_lock<std::mutex>& lock, size_t bytes);  // false: refused (trySend)
  // The window both ends keep: the smaller of the two (each says its own in
  // HELLO); under mutex_.
  uint64_t windowMessages() const;
  uint64_t windowBytes() const;
  // A peer's MESSAGE of `bytes` is read: refused if the peer is past the
  // window (it ignores CREDIT), before anything is allocated for it.
  Error hold(size_t bytes);
  // `windowed`: a MESSAGE the window counts (a local actor's send); any
  // other frame counts against maxQueuedControlBytes until it is written.
  void write(const Frame& frame, std::shared_ptr<struct Outgoing> body = nullptr,
             bool windowed = false);
  void writeEncoded(std::string frame, std::shared_ptr<struct Outgoing> body, bool bye,
                    bool windowed);
  caf::strong_actor_ptr proxyFor(caf::actor_id aid);
  void onLink(caf::actor_id source, caf::actor_id target, bool link);
  // The peer holds a handle of our actor `aid` (it came in a message).
  void onWatch(caf::actor_id aid);
  // After a decode: WATCH the new handles, drop the refused ones, say how
  // many named nodes without a live link here; false if the peer went past
  // maxPeerHandles.
  bool settleHandles(size_t& unreachable);
  // The registry's backend. CAF's deserializer, decoding this link's
  // message, found a handle of node `nid`'s actor `aid` that this link's
  // registry lacks: a proxy on the live link to that node (this one, or
  // another), or null (loop only, under the registry's lock).
  caf::strong_actor_ptr make_proxy(caf::node_id nid, caf::actor_id aid) override;
  void set_last_hop(caf::node_id*) override {}
  // The peer's actor `aid` is held in `introducer`'s registry for a message
  // it brought; false if this link is dead.
  bool holdHandle(caf::actor_id aid, const std::shared_ptr<Link>& introducer);
  // A link that held the peer's actor `aid` in its registry has ended.
  void dropIntroducers(caf::actor_id aid);
  // The registries' entries of the peer's actors go (killed with
  // `reason`); their introducers count them no more.
  using HeldHandles = std::map<caf::actor_id, std::vector<std::weak_ptr<Link>>>;
  void releaseHandles(HeldHandles held, const caf::error& reason);
  // Introductions (loop only). A decoded message named nodes without a
  // link here (unknownNodes_): ask the peer where each listens (WHERE), link
  // there (AT), then decode it again. Meanwhile it and the peer's frames
  // after it are held in order (held_), at most until lookupTimeout. True
  // if it waits; `why` gathers why nodes could not be linked.
  // `frame` is the message; kNobodyWaits at once for one nobody here would
  // get (an answer not awaited, a message for an actor that is not here).
  enum class Introduced { kWaiting, kNo, kNobodyWaits };
  Introduced introduce(const Frame& frame, std::string& why);
  void onAt(const Frame& frame);
  void tryNextUrl(uint64_t request);
  void introducedLinkReady(uint64_t request);
  // The ticker saw the hold whose deadline is `deadline` run out.
  void expireIntroductions(int64_t deadline);
  void failIntroductions(const std::string& why);
  // Delivers everything held now, in order, the message waiting refused
  // with `why` and no new introduction started (the peer left, or sent too
  // much meanwhile).
  void abandonHold(const std::string& why);
  // Delivers the held frames once no introduction is under way.
  void resumeHeld();
  void failProtocol(const Error& error);
  // The pipe failed a read: the peer is lost, or it closed after our BYE.
  void failRead(const Error& error);
  // The ticker found the peer lost: fail(reason), after delivering what is
  // held (on the loop, posted once) if anything is, as failRead does; at
  // once if the loop has not run that within `grace`.
  void loseOnLoop(const caf::error& reason, Clock::time_point now, std::chrono::milliseconds grace);
  // Makes `out` a host tensor for `entry` from the node's pool (large ones;
  // receiveTensor then reads into it in place).
  void poolTensor(const Descriptor::Tensor& entry, Tensor& out);
  caf::error lostError(const std::string& cause);

  std::weak_ptr<NodeCore> node_;
  caf::actor_system& system_;
  const NodeOptions options_;
  std::shared_ptr<Pipe> pipe_;
  const std::string url_;
  // This link's number, unique in the process (never 0), given to its
  // proxies: what a peer's share of an owner is counted by (peerLinkOf).
  const uint64_t serial_;
  const std::shared_ptr<BufferPool> pool_;
  // Peers' messages are enqueued with it: hosted actors run on the loop.
  LoopUnit& unit_;

  std::atomic<int64_t> lastRead_;
  // Ticker thread only: the pipe's count of arrivals (PipeCore::arrivals)
  // at the last tick, and when it last moved.
  uint64_t arrivalsSeen_{0};
  int64_t lastArrival_;
  std::atomic<int64_t> lastWrite_;
  std::atomic<size_t> uncountedBytes_{0};  // device tensors' of the pipe read in progress
  // The most a device tensors' read adds to the heartbeat bound, in bounds.
  static constexpr int kDeviceWaits = 8;
  std::atomic<size_t> writingBytes_{0};  // of the pipe write in flight
  // Of the last large write completed since the peer last spoke: the kernel
  // still holds its tail, and the peer reads it, then handles it, before it
  // speaks again (a loop busy reading a large message writes late).
  std::atomic<size_t> unheardBytes_{0};
  // When the pipe write in flight began (0: none in flight).
  std::atomic<int64_t> writeStarted_{0};

  std::mutex mutex_;
  std::condition_variable changed_;
  bool helloDone_{false};
  std::vector<std::function<void()>> readyWaiters_;
  std::vector<std::string> peerUrls_;
  std::string peer_;
  caf::node_id peerNode_;
  bool dead_{false};
  caf::error deathReason_;
  std::map<caf::actor_id, caf::weak_actor_ptr> proxies_;
  // The last proxies made, held: an actor that asks a node again and again
  // would otherwise get a new proxy for every request (made when it
  // arrives, gone when the answer leaves: an actor made and ended, and a
  // map entry, per message). At most kRecentProxies per link, whatever
  // ids a peer sends; let go when the link ends or the actor's DOWN comes.
  static constexpr size_t kRecentProxies = 16;
  std::array<caf::strong_actor_ptr, kRecentProxies> recentProxies_;
  size_t nextRecent_{0};
  // (the peer's actor, ours) -> the peer's actor's proxy: links the peer
  // made. CAF's links hold their actors weakly: the proxy is held here
  // until UNLINK, its DOWN (which kills it, ending the link) or the end.
  std::map<std::pair<caf::actor_id, caf::actor_id>, caf::strong_actor_ptr> peerLinks_;
  struct Pending {
    // Weak: a requester that ended (its request timed out, say) is not
    // kept alive by a peer that never answers; roomForRequest() forgets it.
    caf::weak_actor_ptr sender;
    caf::strong_actor_ptr target;  // the proxy the request went to
    caf::message_id mid;           // as the sender asked (the peer's copy is not trusted)
  };
  // (local sender aid, request id) -> who waits for the response
  std::map<std::pair<caf::actor_id, uint64_t>, Pending> pending_;
  size_t refusedRequests_{0};  // since pending_ last had room
  // With mutex_ held: whether one more request may wait for its answer;
  // the entries it forgets go to `forgotten`, to be let go after the lock.
  bool roomForRequest(std::vector<Pending>& forgotten);
  struct Lookup {
    bool done{false};
    caf::error error;
    caf::actor_id aid{0};
    std::vector<std::string> interface;
  };
  std::map<uint64_t, std::shared_ptr<Lookup>> lookups_;
  uint64_t nextLookup_{1};
  // The window, both ways: what we sent and the peer has not credited, and
  // what the peer sent and we are done with but have not credited yet.
  LinkStats window_;
  uint64_t doneMessages_{0};
  uint64_t doneBytes_{0};
  uint64_t peerWindowMessages_{0};  // from its HELLO
  uint64_t peerWindowBytes_{0};
  uint64_t heldMessages_{0};  // the peer's, read and not yet done with here
  uint64_t heldBytes_{0};
  // Handles that came inside messages: the ones of this peer's actors,
  // each with the links whose messages brought it and whose registries
  // hold it (their `introduced_` counts it). Under mutex_.
  HeldHandles handleAids_;
  // Entries this link's messages put in its registry and that are still
  // there; at most maxPeerHandles.
  std::atomic<size_t> introduced_{0};
  // Those entries: (owner link's serial, actor id) -> the owner, whose
  // handleAids_ names this link. Under mutex_.
  std::map<std::pair<uint64_t, caf::actor_id>, std::weak_ptr<Link>> introducedAt_;
  // This link's handles (make_proxy); a pointer, let go first in ~Link.
  std::unique_ptr<caf::proxy_registry> handles_;
  // The unit that decodes this link's messages: CAF's deserializer finds
  // the registry through it. Decoding state, loop only:
  class DecodeUnit final : public caf::execution_unit {
   public:
    using caf::execution_unit::execution_unit;
    void exec_later(caf::resumable* job) override;
  };
  DecodeUnit decodeUnit_;
  bool handleOverflow_{false};
  size_t unreachableHandles_{0};  // of nodes without a live link here
  std::vector<std::pair<std::shared_ptr<Link>, caf::actor_id>> newHandles_;  // to WATCH
  std::vector<std::pair<caf::node_id, caf::actor_id>> refusedHandles_;
  // Introductions, loop only (introduce()).
  static constexpr size_t kMaxIntroductions = 16;  // nodes asked for for one message
  static constexpr size_t kMaxHeldFrames = 4096;   // besides the window's messages
  static constexpr size_t kMaxFailedNodes = 1024;
  std::vector<caf::node_id> unknownNodes_;  // named by the message being decoded
  bool tooManyNodes_{false};  // it names more than kMaxIntroductions of them
  struct Held {
    Frame frame;
    Incoming in;
  };
  std::deque<Held> held_;
  // Whether held_ has frames, for the ticker: a peer lost while frames of
  // its are held has them delivered first, on the loop (loseOnLoop).
  std::atomic<bool> holding_{false};
  std::atomic<int64_t> losingSince_{0};  // ticks; when loseOnLoop posted (0: not yet)
  struct Introduction {
    enum State { kAsking, kConnecting, kDone, kFailed };
    State state{kAsking};
    caf::node_id node;
    std::vector<std::string> urls;
    size_t next{0};
    std::shared_ptr<Link> trying;
    std::string why;
  };
  // The held message's, by WHERE's request.
  std::map<uint64_t, Introduction> introductions_;
  uint64_t nextWhere_{1};
  // Nodes that could not be linked while frames stay held: not asked for
  // again until nothing is held (why, for the refusal).
  std::map<caf::node_id, std::string> failedNodes_;
  bool abandoning_{false};
  std::string abandonWhy_;
  // The hold's deadline (0: none) and the last one given; the ticker reads
  // holdDeadline_, and posts its expiry with the value it saw.
  int64_t deadline_{0};
  int64_t lastDeadline_{0};
  std::atomic<int64_t> holdDeadline_{0};

  std::deque<Queued> queue_;
  size_t queuedControl_{0};  // bytes of queue_ the window does not count
  bool writing_{false};  // a pipe write is in flight
  // BYE is written: the peer closes its end once it has read it (closing
  // ours first could fail the peer's own writes before it reads BYE, and it
  // would see a loss instead of a leave).
  bool byeWritten_{false};
};

} // namespace actorpipe::remote::detail
