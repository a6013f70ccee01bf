#pragma once
// A connection through two shared-memory rings (one per direction). Reads
// copy straight from the ring into the reader's memory; writes copy into the
// ring and complete once their bytes are there. The Unix socket that set the
// rings up stays open: it carries wake-ups, and its EOF tells of the peer's
// death (after which what the peer left in the ring is still delivered).
//
// The peer is not trusted (docs/security.md): the accepting side takes only
// sealed memfds of exactly the announced size (a peer that could shrink them
// would kill us with SIGBUS), refuses rings larger than its own context's,
// gives a silent peer kSetupTimeout to send its setup, and fails the
// connection with a ProtocolError when the peer breaks the ring's counter
// protocol (ring.h).
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <uv.h>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/context.h>
#include <actorpipe/transports/detail/connection_base.h>
#include <actorpipe/transports/shm/ring.h>

namespace actorpipe::transport::shm {

class ShmConnection final : public detail::ConnectionBase<ShmConnection>,
                            public detail::Loop::Poller {
 public:
  using ready_fn = std::function<void(const Error&, std::shared_ptr<ShmConnection>)>;

  // A fixed bound, not the context's handshakeTimeout: the setup is one
  // message that a live peer sends at once, and until it comes the
  // connection holds a descriptor that a silent peer could pile up.
  static constexpr std::chrono::milliseconds kSetupTimeout{5000};

  ShmConnection(detail::Loop& loop, std::string peer);
  ~ShmConnection() override;

  // Loop thread. The connecting side creates the rings and sends them; the
  // accepting side waits for them, then calls `ready`.
  void startAsClient(const std::string& name, size_t ringSize);
  // `maxRingSize`: the largest ring the peer may ask for (our context's own).
  void startAsServer(int fd, size_t maxRingSize, ready_fn ready);
  void failEarly(const Error& error) { closeInLoop(error); }
  // Accepting side, loop thread: closes us if our setup has not completed
  // (the listener closed; nobody would take us any more).
  bool ready() const { return ready_; }
  void abandonSetup(const Error& error) {
    if (!ready_ && !error_) failSetup(error);
  }

  // SO_PEERCRED: the process that connected (or listened), as the kernel saw it.
  std::optional<actorpipe::detail::PeerProcess> peerProcess() const override;
  bool readNow(void* ptr, size_t length) override;

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override;

 private:
  friend class detail::ConnectionBase<ShmConnection>;
  struct WriteOp {
    Slices slices;
    size_t slice{0};
    size_t offset{0};
    write_callback_fn fn;
  };

  void pumpReads() { serveReads(); }
  void prefault();
  void writeInLoop(Slices slices, write_callback_fn fn);
  void closeInLoop(const Error& reason);
  Error mapRings(int outFd, int inFd, size_t ringSize);
  void watchSocket();
  void onSocketEvent(int status, int events);
  void receiveSetup();
  void setupTimedOut();
  void failSetup(const Error& error);
  bool checkRings();
  void peerGone();
  bool serveReads();
  bool pumpedNow_{false};  // readNow() took bytes during this serveReads
  bool pushWrites();
  bool completeWrites();
  void kick();

  int fd_{-1};
  uv_poll_t* poll_{nullptr};
  void* outMap_{nullptr};
  void* inMap_{nullptr};
  size_t mapSize_{0};
  size_t maxRingSize_{0};
  detail::Loop::TimerId setupTimer_{0};  // 0: none pending
  Ring out_;
  Ring in_;
  bool ready_{false};
  bool peerGone_{false};
  bool polled_{false};
  ready_fn onReady_;
  std::shared_ptr<ShmConnection> self_;  // alive while the loop watches us

  size_t outFaulted_{0};  // bytes of each ring's data area faulted in (prefault)
  size_t inFaulted_{0};
  detail::Fifo<WriteOp> writes_;
  // Writes the ring took, completed on the next poll (two vectors swapped:
  // their capacity stays, so completing allocates nothing).
  std::vector<write_callback_fn> completed_;
  std::vector<write_callback_fn> completing_;
};

} // namespace actorpipe::transport::shm
