#include <actorpipe/transports/ibv/connection.h>

#include <actorpipe/transports/detail/in_loop.h>
#include <actorpipe/transports/ibv/error.h>
#include <actorpipe/runtime/detail/check.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace actorpipe::transport::ibv {
namespace {

constexpr uint32_t kMagic = 0x56425041;  // "APBV"
constexpr uint32_t kVersion = 1;
constexpr size_t kBuffers = 32;
constexpr size_t kChunk = 64 * 1024;

Error verbsError(const std::string& what, int error = errno) {
  return ACTORPIPE_ERROR(SystemError, what, error ? error : EIO);
}

}  // namespace

IbvConnection::IbvConnection(detail::Loop& loop, std::shared_ptr<Device> device,
                             std::shared_ptr<Connection> bootstrap, std::string peer)
    : ConnectionBase(loop, std::move(peer)), device_(std::move(device)), bootstrap_(std::move(bootstrap)) {}

IbvConnection::~IbvConnection() {
  if (qp_) ibv_destroy_qp(qp_);
  if (cq_) ibv_destroy_cq(cq_);
  if (recvMr_) ibv_dereg_mr(recvMr_);
  if (sendMr_) ibv_dereg_mr(sendMr_);
}

Error IbvConnection::createQueuePair() {
  recvPool_.resize(kBuffers * kChunk);
  sendPool_.resize(kBuffers * kChunk);
  recvMr_ = ibv_reg_mr(device_->pd, recvPool_.data(), recvPool_.size(), IBV_ACCESS_LOCAL_WRITE);
  sendMr_ = ibv_reg_mr(device_->pd, sendPool_.data(), sendPool_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!recvMr_ || !sendMr_) return verbsError("ibv_reg_mr");
  cq_ = ibv_create_cq(device_->context, 2 * kBuffers, this, device_->channel, 0);
  if (!cq_) return verbsError("ibv_create_cq");
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kBuffers;
  init.cap.max_recv_wr = kBuffers;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = ibv_create_qp(device_->pd, &init);
  if (!qp_) return verbsError("ibv_create_qp");
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device_->port;
  attr.qp_access_flags = 0;
  if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    return verbsError("ibv_modify_qp(INIT)", rc);
  }
  for (size_t i = 0; i < kBuffers; ++i) {
    if (auto e = postReceive(i)) return e;
    freeSend_.push_back(i);
  }
  mine_.magic = kMagic;
  mine_.version = kVersion;
  mine_.qpn = qp_->qp_num;
  mine_.psn = std::random_device{}() & 0xffffff;
  mine_.lid = device_->portAttr.lid;
  ibv_gid gid{};
  ibv_query_gid(device_->context, device_->port, 0, &gid);
  std::memcpy(mine_.gid, gid.raw, sizeof(mine_.gid));
  mine_.mtu = device_->portAttr.active_mtu;
  return Error();
}

Error IbvConnection::bringUp(const Coordinates& peer) {
  if (peer.magic != kMagic || peer.version != kVersion) {
    return ACTORPIPE_ERROR(ProtocolError, "not an actorpipe ibv peer (or another version)");
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min(peer.mtu, mine_.mtu));
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = peer.lid;
  attr.ah_attr.port_num = device_->port;
  if (peer.lid == 0) {  // RoCE: address by GID
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, sizeof(peer.gid));
    attr.ah_attr.grh.sgid_index = 0;
    attr.ah_attr.grh.hop_limit = 1;
  }
  if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    return verbsError("ibv_modify_qp(RTR)", rc);
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;  // retry without end while the receiver has no buffer: our flow control
  attr.sq_psn = mine_.psn;
  attr.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    return verbsError("ibv_modify_qp(RTS)", rc);
  }
  return Error();
}

void IbvConnection::start(std::function<void(const Error&)> ready) {
  // Closed before this posted start ran: as shm's startAsClient.
  if (error_) return ready(error_);
  self_ = shared_from_this();
  if (auto e = createQueuePair()) {
    closeInLoop(e);
    return ready(e);
  }
  auto self = shared_from_this();
  bootstrap_->write(&mine_, sizeof(mine_), [self](const Error& e) {
    if (e) self->closeInLoop(e);
  });
  bootstrap_->read(&theirs_, sizeof(theirs_), [self, ready](const Error& e) {
    Error error = e ? e : self->error_;
    if (!error) error = self->bringUp(self->theirs_);
    if (error) {
      self->closeInLoop(error);
      return ready(error);
    }
    self->ready_ = true;
    self->loop_.addPoller(self.get());
    self->polled_ = true;
    // From now on the bootstrap only tells of the peer's death.
    std::weak_ptr<IbvConnection> weak = self;
    self->bootstrap_->onPeerGone([weak](const Error& e) {
      auto me = weak.lock();
      if (!me) return;
      me->tellPeerGone(e);
      me->pollCompletions();
      me->serveReads();
      me->closeInLoop(e);
    });
    ready(Error());
  });
}

Error IbvConnection::postReceive(size_t index) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recvPool_.data() + index * kChunk), static_cast<uint32_t>(kChunk),
              recvMr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_, &wr, &bad)) return verbsError("ibv_post_recv", rc);
  return Error();
}

bool IbvConnection::pollCompletions() {
  if (!cq_ || error_) return false;
  ibv_wc wc[16];
  bool progress = false;
  int n;
  while ((n = ibv_poll_cq(cq_, 16, wc)) > 0) {
    progress = true;
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        closeInLoop(ACTORPIPE_ERROR(IbvError, std::string("completion: ") + ibv_wc_status_str(wc[i].status)));
        return true;
      }
      if (wc[i].opcode == IBV_WC_RECV) {
        received_.emplace_back(wc[i].wr_id, wc[i].byte_len);
        noteArrival();
      } else {
        freeSend_.push_back(wc[i].wr_id);
      }
    }
  }
  if (n < 0) closeInLoop(verbsError("ibv_poll_cq"));
  return progress;
}

bool IbvConnection::serveReads() {
  bool progress = false;
  pumping_ = true;
  while (!reads_.empty() && !received_.empty() && !error_) {
    ReadOp& op = reads_.front();
    auto& chunk = received_.front();
    size_t n = std::min(op.length - op.done, chunk.second - receivedOffset_);
    std::memcpy(op.ptr + op.done, recvPool_.data() + chunk.first * kChunk + receivedOffset_, n);
    op.done += n;
    receivedOffset_ += n;
    progress = true;
    if (receivedOffset_ == chunk.second) {
      size_t index = chunk.first;
      received_.pop_front();
      receivedOffset_ = 0;
      if (auto e = postReceive(index)) {
        closeInLoop(e);
        break;
      }
    }
    if (op.done == op.length) {
      auto fn = std::move(op.fn);
      reads_.popFront();
      fn(Error());
    }
  }
  // Zero-length reads complete at once.
  while (!reads_.empty() && reads_.front().length == 0 && !error_) {
    auto fn = std::move(reads_.front().fn);
    reads_.popFront();
    fn(Error());
  }
  pumping_ = false;
  return progress;
}

bool IbvConnection::pushWrites() {
  bool progress = false;
  while (!writes_.empty() && !freeSend_.empty() && !error_) {
    WriteOp& op = writes_.front();
    size_t index = freeSend_.back();
    uint8_t* buffer = sendPool_.data() + index * kChunk;
    size_t filled = 0;
    while (op.slice < op.slices.size() && filled < kChunk) {
      const Slice& s = op.slices[op.slice];
      size_t n = std::min(kChunk - filled, s.length - op.offset);
      std::memcpy(buffer + filled, static_cast<const uint8_t*>(s.ptr) + op.offset, n);
      filled += n;
      op.offset += n;
      if (op.offset == s.length) {
        ++op.slice;
        op.offset = 0;
      }
    }
    if (filled > 0) {
      freeSend_.pop_back();
      ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), static_cast<uint32_t>(filled), sendMr_->lkey};
      ibv_send_wr wr{};
      wr.wr_id = index;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      if (int rc = ibv_post_send(qp_, &wr, &bad)) {
        closeInLoop(verbsError("ibv_post_send", rc));
        break;
      }
      progress = true;
    }
    if (op.slice == op.slices.size()) {
      completed_.push_back(std::move(op.fn));
      writes_.pop_front();
    }
  }
  return progress;
}

bool IbvConnection::completeWrites() {
  if (completed_.empty()) return false;
  auto done = std::move(completed_);
  completed_.clear();
  for (auto& fn : done) fn(Error());
  return true;
}

bool IbvConnection::poll() {
  if (!ready_ || error_) return false;
  bool progress = pollCompletions();
  progress = serveReads() || progress;
  progress = pushWrites() || progress;
  progress = completeWrites() || progress;
  return progress;
}

bool IbvConnection::prepareToSleep() {
  if (!ready_ || error_) return true;
  if (!completed_.empty()) return false;
  if (!notified_) {
    ibv_req_notify_cq(cq_, 0);
    notified_ = true;
  }
  // A completion that arrived before the request would never be signalled.
  return !pollCompletions();
}

void IbvConnection::writeInLoop(Slices slices, write_callback_fn fn) {
  ACTORPIPE_DCHECK(loop_.ownsState());
  if (refuseWrite(fn, error_)) return;
  WriteOp op;
  op.slices = std::move(slices);
  op.fn = std::move(fn);
  writes_.push_back(std::move(op));
  pushWrites();
}

void IbvConnection::closeInLoop(const Error& reason) {
  if (!startClosing(reason)) return;
  if (polled_) {
    loop_.removePoller(this);
    polled_ = false;
  }
  if (qp_) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
  }
  bootstrap_->close(error_);
  auto reads = takeReads();
  auto writes = std::move(writes_);
  auto completed = std::move(completed_);
  auto keep = std::move(self_);
  for (auto& fn : completed) fn(Error());
  failReads(reads);
  for (auto& op : writes) op.fn(error_);
}

} // namespace actorpipe::transport::ibv
