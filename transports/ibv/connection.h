#pragma once
// A reliable-connected queue pair carrying a byte stream. Each side keeps
// receive buffers posted; the sender copies into registered send buffers and
// posts sends. The queue pair retries without end while the receiver has no
// buffer posted (rnr_retry 7), which is the flow control: no credits to
// count. The bootstrap TCP connection stays open only to learn of the peer's
// death.
#include <infiniband/verbs.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/context.h>
#include <actorpipe/transports/detail/connection_base.h>
#include <actorpipe/transports/ibv/device.h>

namespace actorpipe::transport::ibv {

class IbvConnection final : public detail::ConnectionBase<IbvConnection>,
                            public detail::Loop::Poller {
 public:
  IbvConnection(detail::Loop& loop, std::shared_ptr<Device> device,
                std::shared_ptr<Connection> bootstrap, std::string peer);
  ~IbvConnection() override;

  // Loop thread: make the queue pair, trade its coordinates over the
  // bootstrap, bring it up; then `ready`.
  void start(std::function<void(const Error&)> ready);
  // Loop thread: the completion channel fired for our completion queue.
  void onCompletionEvent() { notified_ = false; }
  ibv_cq* cq() const { return cq_; }

  bool poll() override;
  bool prepareToSleep() override;
  void awake() override {}

 private:
  struct Coordinates {
    uint32_t magic;
    uint32_t version;
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;
    uint8_t gid[16];
    uint32_t mtu;
  } __attribute__((packed));

  friend class detail::ConnectionBase<IbvConnection>;
  struct WriteOp {
    Slices slices;
    size_t slice{0};
    size_t offset{0};
    write_callback_fn fn;
  };

  Error createQueuePair();
  Error bringUp(const Coordinates& peer);
  Error postReceive(size_t index);
  bool pollCompletions();
  bool serveReads();
  bool pushWrites();
  bool completeWrites();
  void pumpReads() { serveReads(); }
  void writeInLoop(Slices slices, write_callback_fn fn);
  void closeInLoop(const Error& reason);

  std::shared_ptr<Device> device_;
  std::shared_ptr<Connection> bootstrap_;
  ibv_cq* cq_{nullptr};
  ibv_qp* qp_{nullptr};
  ibv_mr* recvMr_{nullptr};
  ibv_mr* sendMr_{nullptr};
  std::vector<uint8_t> recvPool_;
  std::vector<uint8_t> sendPool_;
  std::vector<size_t> freeSend_;
  std::deque<std::pair<size_t, size_t>> received_;  // buffer, length
  size_t receivedOffset_{0};                        // into received_.front()
  Coordinates mine_{};
  Coordinates theirs_{};
  bool ready_{false};
  bool notified_{false};
  bool polled_{false};
  std::shared_ptr<IbvConnection> self_;

  std::deque<WriteOp> writes_;
  std::deque<write_callback_fn> completed_;
};

} // namespace actorpipe::transport::ibv
