#pragma once
// The endpoint of channels where the receiver pulls: xth (same process,
// memcpy) and cma (same host, process_vm_readv). The sender only describes
// its bytes; the receiver copies them straight into its allocation, then
// acknowledges the transfer's sequence number in the sender's
// acknowledgement word, and only then reports its read done. So a receiver
// that exits right after its read never makes the sender's write fail.
//
// The sender learns of acknowledgements by polling the word: every turn of
// its loop while busy, and every millisecond while transfers are pending and
// the loop sleeps. No extra socket, no extra round trip.
//
// What a hostile peer can do (docs/security.md, "Pull channels"):
// - xth: nothing. Descriptors name no address: the receiver looks the
//   sequence number up in the table of its *linked* sender, an endpoint of
//   this process paired through an unguessable token (xth/context.cc). An
//   endpoint with no linked sender (the peer is not in this process, whatever
//   its domain string said) fails every read with a ProtocolError. An entry
//   serves one read, of its own length.
// - cma: descriptors name addresses in the sender's address space, never a
//   pid. The receiver reads from, and acknowledges into, only the process
//   the kernel says is at the other end of the pipe's connection, and only
//   if it runs as our own user (it could ptrace us anyway); a pidfd taken at
//   the first read tells if that process is gone (its pid may be reused).
//   So a peer can make us read or write only its own memory.
//
// cma copies large transfers from both ends at once: the receiver takes
// pieces from the front, the sender's helper thread from the back, writing
// them into the receiver's memory (cma_assist.h states that protocol and
// what each side may do to the other).
//
// Thread model (with a loop attached; without one, as in unit tests, the
// caller makes one call at a time): send() and close() from any thread
// (send() offers help with large cma transfers only on the loop thread,
// where the pipe calls it); recv(), poll() and the Poller hooks on the loop
// thread; the cma sender's helper thread holds the endpoint while it runs
// and retires when no large transfer is pending. The receiver of xth copies
// while holding its sender's mutex, so the sender cannot fail (and free) a
// transfer that is being read; a cma sender does not complete a transfer its
// helper is writing from, and a close does not wait for the helper
// (cma_assist.h: what it may still read then).
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <actorpipe/channels/context.h>
#include <actorpipe/channels/detail/cma_assist.h>
#include <actorpipe/channels/detail/pull_descriptor.h>
#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::channel::detail {

class PullEndpoint final : public Endpoint,
                           public actorpipe::detail::Loop::Poller,
                           public std::enable_shared_from_this<PullEndpoint> {
 public:
  PullEndpoint(PullFormat format, std::string channel, size_t inlineBelow);
  ~PullEndpoint() override;

  // xth: `a` and `b` read from each other. Both in this process.
  static void link(const std::shared_ptr<PullEndpoint>& a, const std::shared_ptr<PullEndpoint>& b);

  std::string send(const void* ptr, size_t length, done_fn done) override;
  void recv(const std::string& descriptor, void* ptr, size_t length, done_fn done) override;
  void close(const Error& reason) override;
  void attach(actorpipe::detail::Loop& loop) override;
  void flush() override { poll(); }
  size_t inlineBelow() const override { return inlineBelow_; }
  void setPeerProcess(actorpipe::detail::PeerProcessLookup lookup) override;
  void countArrivals(std::shared_ptr<actorpipe::detail::Arrivals> arrivals) override { arrivals_ = std::move(arrivals); }

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override;

 private:
  struct Pending {
    uint64_t seq;
    const void* ptr;
    size_t length;
    bool read;
    done_fn done;
    bool assisting{false};  // cma: the helper writes from it now
    bool assisted{false};   // cma: helped once already (a peer gets one offer per transfer)
  };

  void closeInLoop(const Error& reason);
  // cma, sender: the assist page's fd + 1 for a transfer of `length`, or 0.
  uint64_t offerAssist(size_t length);
  void serveAssists();
  enum class Assisted { kWrote, kFailed, kRefused };
  // The helper's part of one offer it claimed, `lock` (on mutex_) held on
  // entry and on return. kRefused: the offer is none an honest receiver
  // makes (no such transfer pending, another length, a second offer of one).
  Assisted assist(AssistPage& page, std::unique_lock<std::mutex>& lock);
  bool assistWanted() const;  // under mutex_
  // cma, receiver.
  AssistPage* peerAssistPage(uint64_t fd);
  Error readAssisted(AssistPage& page, const PullDescriptor& d, void* ptr, size_t length);
  Error readLinked(const PullDescriptor& d, void* ptr, size_t length);
  Error readPeerProcess(const PullDescriptor& d, void* ptr, size_t length);
  Error bindPeerProcess();

  const PullFormat format_;
  const std::string channel_;
  const size_t inlineBelow_;
  actorpipe::detail::Loop* loop_{nullptr};
  // Written by the peer (another thread, or another process). Never freed:
  // a cma peer that acknowledges late must not write into reused memory.
  std::atomic<uint64_t>* acked_;

  std::mutex mutex_;  // guards the sender's state below: send() and close() come from any thread
  uint64_t nextSeq_{1};
  std::deque<Pending> pending_;
  Error error_;
  int assistFd_{-1};
  AssistPage* assistPage_{nullptr};
  bool helperRunning_{false};
  // The peer made an offer no honest receiver makes: no more help for it
  // (it could keep the helper thread busy for as long as it offers).
  bool assistRefused_{false};
  std::atomic<bool> closing_{false};    // the helper stops between pieces

  // Receiver's state, loop thread only.
  uint64_t expectedSeq_{1};  // the peer's transfers arrive in order, each once
  // The pipe's count (set once established): a piece of a copy counts.
  std::shared_ptr<actorpipe::detail::Arrivals> arrivals_;
  std::mutex peerMutex_;     // link() may run on another pipe's loop
  std::weak_ptr<PullEndpoint> peer_;
  bool linked_{false};
  actorpipe::detail::PeerProcessLookup lookup_;
  bool bound_{false};
  Error bindError_;
  pid_t peerPid_{0};
  int pidfd_{-1};
  AssistPage* peerAssist_{nullptr};
  uint64_t peerAssistFd_{0};
  bool peerAssistTried_{false};

  bool polled_{false};
  uint64_t wakeTimer_{0};
};

} // namespace actorpipe::channel::detail
