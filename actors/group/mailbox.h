#pragma once
// What Server and Client share: a set of peers (pipes), each with at most
// one descriptor held while its data waits on the wire, and an inbox of
// messages already read (those a tag-filtered receive skipped).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <actorpipe/actors/group/client_server.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe::group {

// `secret` empty: none (ContextOptions::secret).
std::shared_ptr<Context> makeMessagingContext(const std::string& name, const std::string& secret);

class Mailbox : public std::enable_shared_from_this<Mailbox> {
 public:
  explicit Mailbox(std::shared_ptr<Context> context) : context_(std::move(context)) {}
  ~Mailbox();

  // Starts reading from `pipe`, known as peer `id`.
  void add(int id, std::shared_ptr<Pipe> pipe);
  std::vector<int> peers() const;
  Error waitForPeers(size_t count, Timeout timeout);

  Error send(const std::vector<int>& to, const Outgoing& message);
  // peer < 0 with `any`: fair choice among all peers.
  Error receive(int peer, bool any, const std::string& tag, const std::vector<TensorView>& into,
                Received& message, Timeout timeout);

  // close(), then waits for every callback; on the owner's thread (a pipe
  // callback may briefly hold the last reference, and a Context must not
  // be joined from its own callbacks).
  void shutdown();
  TrafficStats stats(int peer, bool all) const;
  // Messages of `peer` that a receive would get without waiting.
  size_t ready(int peer) const;
  void close();
  Context& context() { return *context_; }

 private:
  struct Peer {
    int id{-1};
    std::shared_ptr<Pipe> pipe;
    bool readingDescriptor{false};
    bool holding{false};
    bool readingData{false};
    Descriptor held;
    std::deque<Received> inbox;
    Error dead;
    bool deathReported{false};
    TrafficStats stats;
    uint64_t nextId{1};
  };

  void readNext(Peer& peer);
  // Reads the held descriptor's data into `into` (or allocated storage);
  // `done` fires under the lock.
  void readHeld(Peer& peer, const std::vector<TensorView>& into, std::shared_ptr<Received> target,
                std::shared_ptr<Error> result, std::shared_ptr<bool> finished);
  static bool tagMatches(const std::string& wanted, const std::string& tag) {
    return wanted.empty() || wanted == tag;
  }
  static Error parseHeader(const std::string& metadata, std::string& tag, uint64_t& id);

  std::shared_ptr<Context> context_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, Peer> peers_;
  int cursor_{0};  // receiveAny starts after the peer it served last
  bool closed_{false};
  std::atomic<bool> shutDown_{false};
};

} // namespace actorpipe::group
