#pragma once
// Channels across nodes: a dataflow::Channel<T> one node exports under a
// name, written, read and closed from other nodes with the same
// open -> closed -> drained semantics.
//
//   // node A: the channel lives here
//   dataflow::Channel<Tensor> raw(16);
//   remote::exportChannel(nodeA, raw, "raw");
//   // node B: writers and readers anywhere
//   auto raw = remote::RemoteChannel<Tensor>::open(nodeB, urlOfA, "raw");
//   raw->write(tensor);                       // waits while A's channel is full
//   while (auto r = raw->read()) use(*r.item);  // until A's channel is drained
//
// Each operation is one request to a typed actor on the owning node (its
// interface names T, so a RemoteChannel<int> on a channel of Tensors is
// refused at open with kBadInterface). The actor reads and writes with
// dataflow's readThen/writeThen: a read of an empty channel or a write to a
// full one parks there without holding a thread, and the remote caller
// waits for the answer, so a full channel holds its remote writers back
// exactly as it holds local ones. Items are handed over once: an item is
// taken from the channel only for a read that asked for it. One node parks
// at most NodeOptions::maxParkedPerPeer reads and writes at an owner, and
// writes of at most maxParkedBytesPerPeer; past that one that would wait is
// refused with kTooManyRequests, which RemoteChannel and importChannel take
// as "ask again in a while".
//
// Cascading close across nodes is what a stage does on its own node: it
// reads until DRAINED, then closes what it writes to, wherever that lives.
//
// When the owning node is lost or leaves, pending and later operations end
// at once as on a channel that is gone for good: reads DRAINED, writes
// CLOSED, and error() says why (kNodeLost or kNodeLeft, naming the node).
// An item the owner handed to a read whose reader's node died before the
// answer arrived is lost with that node (at most once, as torch-ipc's
// channels across processes). A read still parked at the owner when its
// reader goes (its node lost or left, its actor ended) is dropped there
// and takes no item.
//
// Inside an actor, do not call these blocking operations: request the
// owner() instead (channel_read_atom answers (Status byte, item)).
//
// Thread model: a RemoteChannel is a handle, copyable and usable from any
// thread; each call blocks its thread (a scoped actor per thread, kept
// while the handle lives) for one round trip, or until the read or write
// can happen. The actor system must outlive the handles. T must be a type the actor
// systems of both nodes have registered (Tensor is, by remote::configure).
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/spawn_options.hpp>
#include <caf/sec.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <actorpipe/actors/dataflow/actor_io.h>
#include <actorpipe/actors/dataflow/channel.h>
#include <actorpipe/actors/remote/detail/handoff.h>
#include <actorpipe/actors/remote/detail/parked.h>
#include <actorpipe/actors/remote/detail/peer_exits.h>
#include <actorpipe/actors/remote/node.h>
#include <actorpipe/runtime/detail/call_user.h>

namespace actorpipe::remote {

using channel_read_atom = caf::atom_constant<caf::atom("chread")>;
using channel_try_read_atom = caf::atom_constant<caf::atom("chtryread")>;
using channel_write_atom = caf::atom_constant<caf::atom("chwrite")>;
using channel_try_write_atom = caf::atom_constant<caf::atom("chtrywrite")>;
using channel_close_atom = caf::atom_constant<caf::atom("chclose")>;
using channel_status_atom = caf::atom_constant<caf::atom("chstatus")>;

// What a channel's owner answers; statuses travel as dataflow::Status bytes.
template <class T>
using ChannelActor = caf::typed_actor<
    typename caf::replies_to<channel_read_atom>::template with<uint8_t, T>,
    typename caf::replies_to<channel_try_read_atom>::template with<uint8_t, T>,
    typename caf::replies_to<channel_write_atom, T>::template with<uint8_t>,
    typename caf::replies_to<channel_try_write_atom, T>::template with<uint8_t>,
    typename caf::replies_to<channel_close_atom>::template with<uint8_t>,
    typename caf::replies_to<channel_status_atom>::template with<uint8_t>>;

namespace detail {

// Published names of channels live apart from actors' names.
inline std::string channelName(const std::string& name) { return "channel:" + name; }

// importChannel's reader asks the owner again.
using import_retry_atom = caf::atom_constant<caf::atom("chimretry")>;

// The requesters whose requests wait at an owner, each watched (monitored)
// once: its DOWN clears the flag its parked requests carry, so they are
// dropped unserved, and says the owner's ParkedBook may let them go.
// Keyed by the requester's handle here, not its address: CAF's addresses
// compare by id and node, and a peer's actor may come in another proxy
// once its last one is gone (which sends no DOWN). An entry with nothing
// parked goes at the next sweep, so there are never many more entries than
// parked requests. The owner actor's; the counts are dropped by tokens on
// any thread.
class Requesters {
 public:
  using Wanted = std::shared_ptr<std::atomic<bool>>;

  // The flag for `sender`'s requests and a token to keep with one that
  // parks (its entry stays while it holds one).
  template <class Self>
  std::pair<Wanted, ParkedBook::Token> watch(Self* self, const caf::strong_actor_ptr& sender) {
    auto it = entries_.find(sender.get());
    if (it == entries_.end()) {
      if (entries_.size() >= sweepAt_) sweep(self);
      Entry entry{caf::weak_actor_ptr(sender.get()), std::make_shared<std::atomic<bool>>(true),
                  std::make_shared<std::atomic<size_t>>(0)};
      it = entries_.emplace(sender.get(), std::move(entry)).first;
      self->monitor(sender);
    }
    auto parked = it->second.parked;
    parked->fetch_add(1, std::memory_order_relaxed);
    return {it->second.wanted,
            ParkedBook::Token(parked.get(), [parked](void*) { parked->fetch_sub(1, std::memory_order_relaxed); })};
  }

  // Its DOWN: true if it was watched.
  bool gone(const caf::actor_addr& who) {
    auto it = entries_.find(who.get());
    if (it == entries_.end()) return false;
    it->second.wanted->store(false, std::memory_order_release);
    entries_.erase(it);
    return true;
  }

 private:
  struct Entry {
    caf::weak_actor_ptr who;  // keeps the key's memory from being reused
    Wanted wanted;
    std::shared_ptr<std::atomic<size_t>> parked;
  };

  template <class Self>
  void sweep(Self* self) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.parked->load(std::memory_order_relaxed) != 0) {
        ++it;
        continue;
      }
      if (auto who = it->second.who.lock()) self->demonitor(caf::actor_cast<caf::actor_addr>(who));
      it = entries_.erase(it);
    }
    sweepAt_ = std::max<size_t>(64, 2 * entries_.size());
  }

  std::map<caf::actor_control_block*, Entry> entries_;
  size_t sweepAt_ = 64;
};

template <class T>
typename ChannelActor<T>::behavior_type channelOwner(typename ChannelActor<T>::pointer self,
                                                     dataflow::Channel<T> channel,
                                                     const NodeOptions& options) {
  using dataflow::ReadResult;
  using dataflow::Status;
  serveEveryNode(self);
  // A read or write that must wait parks here for its requester, which is
  // watched (Requesters): one whose requester went (its actor ended, its
  // node was lost or left) must not take an item, since the answer would
  // go nowhere and the item be lost to every other reader; nor hold one,
  // or its node's share of what may park here (ParkedBook).
  struct Book {
    Requesters requesters;
    ParkedBook parked;
  };
  auto book = std::make_shared<Book>(
      Book{Requesters(), ParkedBook(options.maxParkedPerPeer, options.maxParkedBytesPerPeer)});
  self->set_down_handler([book](caf::down_msg& down) {
    if (book->requesters.gone(down.source)) book->parked.departed();
  });
  // The flag and tokens for one of `sender`'s requests that must wait
  // (holding `bytes`), or a null flag: its peer (link) has its share
  // parked.
  auto park = [self, book, channel](const caf::strong_actor_ptr& sender, size_t bytes)
      -> std::pair<Requesters::Wanted, std::vector<ParkedBook::Token>> {
    auto share = book->parked.take(peerLinkOf(sender), bytes,
                                   [&] { channel.state()->forgetDepartedWaiters(); });
    if (!share) return {};
    auto [wanted, entry] = book->requesters.watch(self, sender);
    return {std::move(wanted), {std::move(share), std::move(entry)}};
  };
  auto tooMany = [perNode = options.maxParkedPerPeer] {
    return makeError(RemoteError::kTooManyRequests,
                     "this node has its share of requests (maxParkedPerPeer " + std::to_string(perNode) +
                         ", or maxParkedBytesPerPeer) waiting at the channel's owner already");
  };
  auto anonymous = [] {
    return caf::make_error(caf::sec::invalid_argument,
                           "a channel's read, or a write that must wait, needs a sender to answer");
  };
  return {
      [=](channel_read_atom) {
        // Before the promise, which takes the sender out of the message.
        auto sender = self->current_sender();
        auto promise = self->template make_response_promise<uint8_t, T>();
        // An anonymous read would take an item for nobody.
        if (!sender) {
          promise.deliver(anonymous());
          return promise;
        }
        auto now = channel.tryRead();
        if (now.status == Status::kEmpty) {
          auto [wanted, tokens] = park(sender, 0);
          if (!wanted) {
            promise.deliver(tooMany());
            return promise;
          }
          dataflow::readThen(
              self, channel,
              [promise, tokens = std::move(tokens), wanted,
               state = std::weak_ptr(channel.state())](ReadResult<T> read) mutable {
                // Its requester's DOWN came between the item's hand-over
                // and this: the item goes back for the others. (Weak: the
                // channel holds this while the read is parked.)
                if (!wanted->load(std::memory_order_acquire)) {
                  auto held = state.lock();
                  if (read.item && held) held->unread(std::move(*read.item));
                  return;
                }
                promise.deliver(static_cast<uint8_t>(read.status), read.item ? std::move(*read.item) : T());
              },
              wanted);
          return promise;
        }
        promise.deliver(static_cast<uint8_t>(now.status), now.item ? std::move(*now.item) : T());
        return promise;
      },
      [=](channel_try_read_atom) -> caf::result<uint8_t, T> {
        auto read = channel.tryRead();
        return {static_cast<uint8_t>(read.status), read.item ? std::move(*read.item) : T()};
      },
      [=](channel_write_atom, T& item) {
        auto sender = self->current_sender();
        auto bytes = peerMessageBytes(self->current_mailbox_element());
        auto promise = self->template make_response_promise<uint8_t>();
        // A refused write leaves the item as it was.
        auto now = channel.tryWrite(std::move(item));
        if (now != Status::kFull) {
          promise.deliver(static_cast<uint8_t>(now));
          return promise;
        }
        if (!sender) {
          promise.deliver(anonymous());
          return promise;
        }
        auto [wanted, tokens] = park(sender, bytes);
        if (!wanted) {
          promise.deliver(tooMany());
          return promise;
        }
        dataflow::writeThen(
            self, channel, std::move(item),
            [promise, tokens = std::move(tokens)](Status status) mutable {
              promise.deliver(static_cast<uint8_t>(status));
            },
            std::move(wanted));
        return promise;
      },
      [=](channel_try_write_atom, T& item) {
        return static_cast<uint8_t>(channel.tryWrite(std::move(item)));
      },
      [=](channel_close_atom) {
        channel.close();
        return static_cast<uint8_t>(channel.status());
      },
      [=](channel_status_atom) { return static_cast<uint8_t>(channel.status()); },
  };
}

} // namespace detail

// Lets nodes that reach `node` read, write and close `channel` as `name`
// (the rules of Node::publish). The channel stays reachable until
// unexportChannel or the node's end.
template <class T>
Error exportChannel(Node& node, const dataflow::Channel<T>& channel, const std::string& name) {
  auto owner = node.system().spawn(detail::channelOwner<T>, channel, node.options());
  // Its handlers never block (a full or empty channel parks the request):
  // it runs where its peers' requests are read (Node::runOnLoop).
  node.runOnLoop(owner);
  node.endOnLeave(owner);
  Error error = node.publish(owner, detail::channelName(name));
  if (error) caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  return error;
}

inline void unexportChannel(Node& node, const std::string& name) {
  node.unpublish(detail::channelName(name));
}

template <class T>
class RemoteChannel {
 public:
  // The channel exported as `name` by the node at `url`.
  static caf::expected<RemoteChannel> open(Node& node, const std::string& url,
                                           const std::string& name) {
    auto owner = node.remoteActor<ChannelActor<T>>(url, detail::channelName(name));
    if (!owner) return std::move(owner.error());
    return RemoteChannel(node.system(), std::move(*owner));
  }

  // As dataflow::Channel's: OPEN when written; CLOSED or DRAINED when the
  // channel was closed first (or is gone: see error()).
  dataflow::Status write(T item) const {
    return askStatus(dataflow::Status::kClosed, channel_write_atom::value, std::move(item));
  }
  // FULL instead of waiting.
  dataflow::Status tryWrite(T item) const {
    return askStatus(dataflow::Status::kClosed, channel_try_write_atom::value, std::move(item));
  }
  // (OPEN or CLOSED, item), or DRAINED once nothing will ever come out.
  dataflow::ReadResult<T> read() const { return askItem(channel_read_atom::value); }
  // EMPTY instead of waiting.
  dataflow::ReadResult<T> tryRead() const { return askItem(channel_try_read_atom::value); }
  // Closes the owner's channel: readers everywhere drain what it holds.
  dataflow::Status close() const {
    return askStatus(dataflow::Status::kDrained, channel_close_atom::value);
  }
  dataflow::Status status() const {
    return askStatus(dataflow::Status::kDrained, channel_status_atom::value);
  }
  // The owner's typed actor, for actors: they `request` it themselves and
  // never block a scheduler thread (a read parks at the owner until an
  // item comes; the answer is a Status byte and the item).
  const ChannelActor<T>& owner() const { return owner_; }

  // Why the channel behaves as gone (its node was lost or left, or it
  // answered what no channel answers); no error while it works.
  caf::error error() const {
    std::lock_guard<std::mutex> guard(state_->mutex);
    return state_->error;
  }

 private:
  struct State {
    std::mutex mutex;
    caf::error error;
    // One scoped actor per calling thread, kept: a fresh one per call would
    // be a new sender to the owner's node each time (a proxy made there,
    // a DOWN frame at its end), three times the cost of the round trip.
    std::unordered_map<std::thread::id, std::unique_ptr<caf::scoped_actor>> actors;
  };

  caf::scoped_actor& actor() const {
    std::lock_guard<std::mutex> guard(state_->mutex);
    auto& slot = state_->actors[std::this_thread::get_id()];
    if (!slot) slot = std::make_unique<caf::scoped_actor>(*system_);
    return *slot;
  }

  RemoteChannel(caf::actor_system& system, ChannelActor<T> owner)
      : system_(&system), owner_(std::move(owner)), state_(std::make_shared<State>()) {}

  // Statuses are peer bytes: anything but a Status is refused.
  bool valid(uint8_t status) const {
    if (status <= static_cast<uint8_t>(dataflow::Status::kFull)) return true;
    fail(caf::make_error(caf::sec::unexpected_response,
                         "a remote channel answered status " + std::to_string(status)));
    return false;
  }

  void fail(caf::error error) const {
    std::lock_guard<std::mutex> guard(state_->mutex);
    if (!state_->error) state_->error = std::move(error);
  }

  bool gone() const {
    std::lock_guard<std::mutex> guard(state_->mutex);
    return static_cast<bool>(state_->error);
  }

  template <class... Ts>
  dataflow::Status askStatus(dataflow::Status ifGone, Ts&&... xs) const {
    if (gone()) return ifGone;
    dataflow::Status result = ifGone;
    // Built once and shared by the attempts (sent again, not copied again,
    // to a remote owner); the callers above pass ChannelActor's types.
    auto message = caf::make_message(std::forward<Ts>(xs)...);
    for (auto backoff = std::chrono::milliseconds(1);;) {
      caf::error refused;
      actor()->request(caf::actor_cast<caf::actor>(owner_), caf::infinite, message)
          .receive(
              [&](uint8_t status) {
                if (valid(status)) result = static_cast<dataflow::Status>(status);
              },
              [&](caf::error& error) { refused = std::move(error); });
      if (!refused || !detail::waitIfBusy(refused, backoff)) {
        if (refused) fail(std::move(refused));
        return result;
      }
    }
  }

  template <class Atom>
  dataflow::ReadResult<T> askItem(Atom atom) const {
    for (auto backoff = std::chrono::milliseconds(1);;) {
      caf::error refused;
      auto result = askItemOnce(atom, refused);
      if (!refused || !detail::waitIfBusy(refused, backoff)) {
        if (refused) fail(std::move(refused));
        return result;
      }
    }
  }

  template <class Atom>
  dataflow::ReadResult<T> askItemOnce(Atom atom, caf::error& refused) const {
    using dataflow::Status;
    dataflow::ReadResult<T> result(Status::kDrained);
    if (gone()) return result;
    actor()->request(owner_, caf::infinite, atom)
        .receive(
            [&](uint8_t status, T& item) {
              detail::acquireHandoff();
              if (!valid(status)) return;
              auto s = static_cast<Status>(status);
              if (s == Status::kOpen || s == Status::kClosed) {
                result = dataflow::ReadResult<T>(s, std::move(item));
              } else {
                result = dataflow::ReadResult<T>(s);
              }
            },
            [&](caf::error& error) { refused = std::move(error); });
    return result;
  }

  caf::actor_system* system_;
  ChannelActor<T> owner_;
  std::shared_ptr<State> state_;
};

// A local Channel of `capacity` fed from `remote`, for what takes local
// channels (a dataflow::Dag stage, a Channel's readers): an actor of
// `node`'s system reads the remote channel one item at a time, without
// blocking a thread, and writes each into the local one, waiting while it
// is full; it takes the next remote item only once the last is written, so
// it holds at most capacity + 1 of them. The local channel is closed when
// the remote one is drained, or gone (its node lost or left: `onEnd` gets
// the reason; no error when drained). Closing the local channel stops the
// reading (the remote channel stays open for its other readers).
template <class T>
dataflow::Channel<T> importChannel(Node& node, const RemoteChannel<T>& remote, size_t capacity = 0,
                                   std::function<void(caf::error)> onEnd = nullptr) {
  using dataflow::Status;
  dataflow::Channel<T> local(capacity);
  // Hidden: the actor system's shutdown does not wait for a reader parked
  // on a remote channel that never drains.
  node.system().spawn<caf::hidden>(
      [local, owner = remote.owner(), onEnd](caf::event_based_actor* self) -> caf::behavior {
        // Its requests name it to the owner's node: a peer's LINK and DOWN
        // must not end it (the local channel would never close).
        detail::serveEveryNode(self);
        auto next = std::make_shared<std::function<void()>>();
        auto retrying = std::make_shared<bool>(false);
        // The cycle through the closure (it holds itself) ends, and the
        // actor with it, before the user's onEnd runs: one that throws is
        // logged (callUser) and leaks nothing.
        auto finish = [self, local, next, onEnd](caf::error error) mutable {
          local.close();
          *next = nullptr;
          self->quit();
          if (onEnd) actorpipe::detail::callUser("an importChannel's onEnd", onEnd, std::move(error));
        };
        *next = [self, local, owner, next, retrying, finish]() mutable {
          self->request(owner, caf::infinite, channel_read_atom::value)
              .then(
                  [self, local, next, finish](uint8_t status, T& item) mutable {
                    detail::acquireHandoff();
                    auto s = static_cast<Status>(status);
                    if (s == Status::kDrained) return finish(caf::error());
                    if (s != Status::kOpen && s != Status::kClosed) {
                      return finish(caf::make_error(caf::sec::unexpected_response,
                                                    "a remote channel answered status " +
                                                        std::to_string(status)));
                    }
                    dataflow::writeThen(self, local, std::move(item),
                                        [next, finish](Status written) mutable {
                                          if (written == Status::kOpen) (*next)();
                                          else finish(caf::error());  // closed here
                                        });
                  },
                  [self, retrying, finish](caf::error& error) mutable {
                    // Other readers of this node wait at the owner already
                    // (maxParkedPerPeer): ask again in a while.
                    if (isError(error, RemoteError::kTooManyRequests)) {
                      *retrying = true;
                      self->delayed_send(self, std::chrono::milliseconds(20),
                                         detail::import_retry_atom::value);
                      return;
                    }
                    finish(std::move(error));
                  });
        };
        (*next)();
        // Nothing to handle but its own requests' answers and its retries;
        // it ends with finish().
        // Only when a retry is due: a peer can send it this atom too, and
        // a second read in flight would break the order and the bound.
        return {[next, retrying, local, finish](detail::import_retry_atom) mutable {
          if (!*retrying || !*next) return;
          *retrying = false;
          // Closed here meanwhile: an item taken now would be dropped.
          if (local.status() != Status::kOpen) return finish(caf::error());
          (*next)();
        }};
      });
  return local;
}

} // namespace actorpipe::remote
