#pragma once
// A pipe's state machine. It lives on its transport's loop thread and is
// driven by two sources only: its actor's mailbox (the user's operations)
// and its connection's callbacks (bytes arriving, writes finishing). Both
// run on that one thread, so the state needs no locks.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include <actorpipe/runtime/detail/arrivals.h>
#include <actorpipe/runtime/detail/fifo.h>
#include <actorpipe/runtime/detail/wire.h>
#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/options.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::channel {
class Endpoint;
class Stager;
}

namespace actorpipe::detail {

class ContextCore;
class JoinRegistry;
struct TransportEntry;
class Loop;

class PipeCore : public std::enable_shared_from_this<PipeCore> {
 public:
  using ready_fn = std::function<void(const Error&, std::shared_ptr<PipeCore>)>;

  // The connecting side: connects, says hello, waits for the welcome.
  static std::shared_ptr<PipeCore> connect(const std::shared_ptr<ContextCore>& context,
                                           std::shared_ptr<const TransportEntry> transport,
                                           const std::string& url, const std::string& address,
                                           const PipeOptions& options);
  // A pipe that failed before it began (unknown scheme, closed context).
  static std::shared_ptr<PipeCore> failed(const std::shared_ptr<ContextCore>& context,
                                          Error error);
  // The accepting side: waits for the hello, answers, then calls `ready`
  // (on the loop) with the outcome of the handshake.
  // `hello` is the body of the connector's HELLO frame, already read.
  static std::shared_ptr<PipeCore> accept(const std::shared_ptr<ContextCore>& context,
                                          std::shared_ptr<const TransportEntry> transport,
                                          std::shared_ptr<transport::Connection> connection,
                                          const std::vector<uint8_t>& hello,
                                          std::shared_ptr<JoinRegistry> registry, ready_fn ready);
  // Loop thread: the connection of a pipe that moved to a better transport
  // arrived there (its JOIN frame named this pipe).
  void adoptJoin(std::shared_ptr<const TransportEntry> transport,
                 std::shared_ptr<transport::Connection> connection);
  Loop* loop() const { return loop_; }

  PipeCore(std::shared_ptr<ContextCore> context, Loop* loop);
  ~PipeCore();

  const caf::actor& actor() const { return actor_; }
  const std::string& remoteName() const { return remoteName_; }
  // Any thread: how often the peer's bytes have arrived, over the
  // connection and the channels together, since the pipe was established
  // (runtime/detail/arrivals.h). A count that moves is a peer alive.
  uint64_t arrivals() const { return arrivals_->count(); }
  // Any thread.
  PipeInfo info() const {
    std::lock_guard<std::mutex> guard(infoMutex_);
    return info_;
  }

  // Any thread: through the actor's mailbox; on the pipe's own loop thread,
  // straight to the loop's queue behind it (postNext).
  void write(Message message, Pipe::write_callback_fn fn);
  void readDescriptor(Pipe::read_descriptor_callback_fn fn);
  void read(Allocation allocation, Pipe::read_callback_fn fn);
  void close(Error reason);

  // Loop thread: the operations themselves.
  void doWrite(Message message, Pipe::write_callback_fn fn);
  void doReadDescriptor(Pipe::read_descriptor_callback_fn fn);
  void doRead(Allocation allocation, Pipe::read_callback_fn fn);
  void fail(Error error);
  // The peer closed its end or died: writes can no longer complete, what it
  // sent before can still be read.
  void onPeerGone(const Error& error);

 private:
  template <class Op>
  void postNext(Op op);

  enum class State {
    kConnecting,   // connector: hello sent, waiting for welcome or reject
    kAccepting,    // acceptor: answering the hello
    kAwaitingJoin, // acceptor: welcome sent, waiting for the connector on a better transport
    kEstablished,  // messages flow both ways
    kClosed,       // error_ says why; every operation fails with it
  };
  // The reading half, once established. A message is read in two steps
  // because the user allocates in between: the descriptor (header + frame)
  // when readDescriptor() asks, the data when read() brings the allocation.
  enum class ReadState {
    kIdle,                 // no readDescriptor() waiting
    kReadingHeader,        // 8 bytes
    kReadingFrame,         // the descriptor frame's body
    kAwaitingAllocation,   // descriptor delivered; the data waits on the wire
    kReadingData,          // payloads then inline tensors, into the allocation
  };

  // Pending operations of one kind, oldest first, numbered in order.
  // Finished ones are kept for reuse: a steady exchange allocates none, and
  // a write's frame buffer keeps its capacity. Callbacks name an operation
  // by its number, never by pointer, so one that comes after its operation
  // finished finds nothing. Loop thread only.
  template <class Op>
  class Operations {
   public:
    bool empty() const { return pending_.empty(); }
    size_t size() const { return pending_.size(); }
    Op& front() { return *pending_.front(); }
    Op& add() {
      std::unique_ptr<Op> op;
      if (spare_.empty()) {
        op = std::make_unique<Op>();
      } else {
        op = std::move(spare_.back());
        spare_.pop_back();
      }
      op->seq = next_++;
      Op& ref = *op;
      pending_.push_back(std::move(op));
      return ref;
    }
    Op* find(uint64_t seq) {
      if (pending_.empty()) return nullptr;
      const uint64_t first = pending_.front()->seq;
      if (seq < first || seq - first >= pending_.size()) return nullptr;
      return pending_[seq - first].get();
    }
    // The oldest leaves the queue: `fn(op)` finishes it, after it went back
    // to the spares (reset: a callback that asks for the next operation may
    // take it).
    template <class Fn>
    void finishFront(Fn&& fn) {
      std::unique_ptr<Op> op = pending_.takeFront();
      auto callback = std::move(op->fn);
      Error error = std::move(op->error);
      const uint64_t deadline = op->deadline;
      // An operation finished before its transport was done with it (the
      // pipe failed and closed the connection while it was queued) is
      // kept, whatever the bound, as long as the pipe lives (the
      // connection's callbacks hold the pipe).
      const bool held = op->held();
      op->reset();
      if (spare_.size() < kSpare || held) spare_.push_back(std::move(op));
      fn(callback, error, deadline);
    }
    template <class Fn>
    void forEach(Fn&& fn) {
      pending_.forEach([&](std::unique_ptr<Op>& op) { fn(*op); });
    }

   private:
    static constexpr size_t kSpare = 8;
    Fifo<std::unique_ptr<Op>> pending_;
    std::vector<std::unique_ptr<Op>> spare_;
    uint64_t next_{1};
  };

  struct WriteOp {
    uint64_t seq{0};
    Message message;
    Pipe::write_callback_fn fn;
    uint64_t deadline{0};  // timer, 0 if none
    std::string frame;
    size_t pending{0};  // the frame's write plus each out-of-band send
    bool sent{false};
    // Its frame (and inline data) is queued on the connection; for a staged
    // write, from its first chunk's copy to its last write's callback.
    bool onWire{false};
    bool done{false};
    Error error;
    // The connection may still read its frame (only once the connection
    // closed: a write is never finished while on the wire otherwise).
    bool held() const { return onWire; }
    // For reuse. The frame keeps its memory: nothing writes it before the
    // next sendWrite, which a pipe whose frame may still be queued on the
    // connection (one that failed, or whose peer left) never makes.
    void reset() {
      message = Message();
      deadline = 0;
      pending = 0;
      sent = onWire = done = false;
      error = Error();
    }
  };
  // A tensor that an out-of-band channel moves.
  struct OutOfBand {
    channel::Endpoint* endpoint;
    size_t route;
    const void* ptr;
    size_t length;
    const Buffer* buffer;  // the message's (lives in the WriteOp); for tensors not on the CPU
  };
  // A tensor staged through host memory (cuda_basic): slice `slice` of the
  // write stands for it (pipe_staging.cc).
  struct StagedTensor {
    size_t slice;
    const Buffer* buffer;  // the message's
    size_t length;
    channel::Stager* stager;
  };
  struct StagedStep;
  struct StagedSend;
  struct StagedRead;
  struct ReadOp {
    uint64_t seq{0};
    Pipe::read_callback_fn fn;
    uint64_t deadline{0};
    bool done{false};
    Error error;
    bool held() const { return false; }  // reads fill the user's memory only
    void reset() {
      deadline = 0;
      done = false;
      error = Error();
    }
  };

  void spawnActor();
  void startConnector();
  void sayHello();
  void armHandshakeTimer();
  void onHello(const uint8_t* body, size_t length);
  void onWelcome(const uint8_t* body, size_t length);
  void reject(const std::string& reason);
  void establish();

  void sendWrite(WriteOp& op);
  // Writes not sent yet go out, in order, unless a staged write holds the
  // connection (staging_).
  void sendUnsent();
  Error buildFrame(const WriteOp& op, wire::MessageFrame& frame, transport::Slices& inlineData,
                   std::vector<OutOfBand>& outOfBand, std::vector<StagedTensor>& staged);
  // One part of write `seq` finished (its connection write, or one
  // out-of-band send); the connection is done with its bytes (wireDone).
  void writePartDone(uint64_t seq, const Error& e);
  void wireDone(uint64_t seq, const Error& e);
  // pipe_staging.cc: a write whose tensors are staged goes out chunk by
  // chunk; a read of one comes in the same way.
  void sendStaged(WriteOp& op, const transport::Slices& slices, const std::vector<StagedTensor>& staged);
  void pumpSend(std::shared_ptr<StagedSend> send);  // by value: the member activeSend_ may be reset inside
  void stepSend(const std::shared_ptr<StagedSend>& send);
  static std::shared_ptr<StagedRead> newStagedRead(uint64_t seq);
  // A plain region (`stager` null: `length` bytes into `cpu`) or a staged
  // tensor (its chunks, into `buffer`), in the connection's order.
  static void addStagedStep(StagedRead& read, void* cpu, size_t length, Buffer buffer, channel::Stager* stager);
  static size_t stagedParts(const StagedRead& read);  // what readPartDone counts down
  void readStaged(uint64_t seq, std::shared_ptr<StagedRead> read);
  void pumpRead(std::shared_ptr<StagedRead> read);
  void stepRead(const std::shared_ptr<StagedRead>& read);
  channel::Endpoint* endpointFor(const std::string& channel) const;
  void closeEndpoints();
  void flushWrites();
  bool writesOnWire();

  void advanceReads();
  void onHeader(std::shared_ptr<PipeCore> self);
  void onFrame();
  Error checkAllocation(const Allocation& allocation) const;
  void flushReads();
  void readPartDone(uint64_t seq, const Error& e);
  void finishRead(uint64_t seq);
  // Loop thread: a timer that fails the pipe if `what` is still pending
  // when the operation timeout has passed; 0 when there is no timeout.
  uint64_t armDeadline(const char* what);
  void disarm(uint64_t& timer);
  Error admit(size_t pending, const char* what) const;

  std::shared_ptr<ContextCore> context_;
  Loop* loop_;
  caf::actor actor_;
  std::shared_ptr<const TransportEntry> transport_;
  std::shared_ptr<transport::Connection> connection_;
  const std::shared_ptr<Arrivals> arrivals_{std::make_shared<Arrivals>()};
  std::string url_;
  std::string remoteName_;
  static uint64_t newPipeId();
  const uint64_t id_{newPipeId()};  // "pipe 7" in log lines: this process's 7th pipe

  State state_{State::kClosed};
  Error error_;
  Error writeError_;  // set once the peer is gone; later writes fail with it
  // Armed when the peer left with writes still on the wire: past it, the
  // pipe fails (closing the connection) rather than wait for ever on a peer
  // that shut its side and reads no more.
  uint64_t lingerTimer_{0};
  ready_fn ready_;
  std::shared_ptr<JoinRegistry> registry_;
  uint64_t joinToken_{0};
  uint64_t joinTimer_{0};
  uint64_t handshakeTimer_{0};
  std::chrono::milliseconds handshakeTimeout_{0};
  std::chrono::milliseconds operationTimeout_{0};
  std::vector<std::string> notes_;
  // device type -> channel chosen in the handshake
  std::map<std::string, std::string> channels_;
  // channel name -> this pipe's endpoint, for out-of-band channels
  std::map<std::string, std::shared_ptr<channel::Endpoint>> endpoints_;

  Operations<WriteOp> writes_;
  // A staged write is still issuing its bytes to the connection: later
  // writes wait their turn (their bytes must not come between its chunks).
  bool staging_{false};
  std::shared_ptr<StagedSend> activeSend_;  // that write
  // The stager's host slots in use, per direction (a bit each): they
  // outlive one operation (a write's last chunks may still wait on the
  // connection while the next write copies its first).
  unsigned outSlots_{0};
  unsigned inSlots_{0};

  ReadState readState_{ReadState::kIdle};
  struct DescriptorOp {
    Pipe::read_descriptor_callback_fn fn;
    uint64_t deadline{0};
  };
  Fifo<DescriptorOp> descriptorReads_;
  Operations<ReadOp> reads_;
  uint8_t header_[wire::kHeaderSize];
  std::vector<uint8_t> frameBody_;
  size_t lastFrameBody_{0};  // the body size frame_ was decoded from
  wire::MessageFrame frame_;
  size_t dataReadsLeft_{0};

  mutable std::mutex infoMutex_;
  PipeInfo info_;
};

} // namespace actorpipe::detail
