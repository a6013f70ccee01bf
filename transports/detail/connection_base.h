#pragma once
// What every transport's connection does the same way (uv, shm, ibv), so
// that they behave alike and each file holds only what its medium needs:
//
//  - read(), write(), close() may be called from any thread; they hop onto
//    the connection's loop (not when the caller is on it already) and are
//    refused with ContextClosedError once the loop has stopped;
//  - reads queue in the order they were asked for; a read or write asked of
//    a failed connection fails with the connection's error on the loop's
//    next turn, never inside the call that asked;
//  - closing happens once: the first reason sticks (EOF when none is
//    given), the peer-gone notice fires (once, before anything else is
//    failed), and every queued read then fails with that reason, in order.
//
// Derived (CRTP) provides, all on the loop thread:
//   void pumpReads();                                    serve reads_ (not re-entered: see pumping_)
//   void writeInLoop(Slices, write_callback_fn);
//   void closeInLoop(const Error& reason);               startClosing(), release, failReads()
// and befriends ConnectionBase<Derived> for them.
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/fifo.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/context.h>
#include <actorpipe/transports/detail/in_loop.h>

namespace actorpipe::detail {

template <typename Derived>
class ConnectionBase : public transport::Connection, public std::enable_shared_from_this<Derived> {
 public:
  using Connection = transport::Connection;
  using Slice = transport::Slice;
  using Slices = transport::Slices;
  using Connection::close;
  using Connection::write;

  // On the loop already (a pipe's reads and writes always are), the
  // callback is moved straight into the operation: no closure, no copies of
  // it (each may allocate). `self` keeps us alive through callbacks that
  // drop the caller's reference, as the closure did.
  void read(void* ptr, size_t length, read_callback_fn fn) final {
    auto self = this->shared_from_this();
    if (loop_.inLoop()) return self->readInLoop({static_cast<uint8_t*>(ptr), length, 0, std::move(fn)});
    inLoop(
        loop_, [self, ptr, length, fn] { self->readInLoop({static_cast<uint8_t*>(ptr), length, 0, fn}); }, fn);
  }
  void write(Slices slices, write_callback_fn fn) final {
    auto self = this->shared_from_this();
    if (loop_.inLoop()) return self->writeInLoop(std::move(slices), std::move(fn));
    inLoop(
        loop_, [self, slices = std::move(slices), fn]() mutable { self->writeInLoop(std::move(slices), fn); }, fn);
  }
  void close(Error reason) final {
    auto self = this->shared_from_this();
    inLoop(loop_, [self, reason] { self->closeInLoop(reason); }, [](const Error&) {});
  }
  std::string peerAddress() const final { return peer_; }
  void onPeerGone(std::function<void(const Error&)> fn) final { peerGoneFn_ = std::move(fn); }
  void countArrivals(std::shared_ptr<Arrivals> arrivals) final {
    auto self = this->shared_from_this();
    if (loop_.inLoop()) return void(arrivals_ = std::move(arrivals));
    inLoop(loop_, [self, arrivals] { self->arrivals_ = arrivals; }, [](const Error&) {});
  }

 protected:
  struct ReadOp {
    uint8_t* ptr;
    size_t length;
    size_t done;
    read_callback_fn fn;
  };

  ConnectionBase(Loop& loop, std::string peer)
      : keepLoop_(loop.weak_from_this().lock()), loop_(loop), peer_(std::move(peer)) {}

  void readInLoop(ReadOp op) {
    ACTORPIPE_DCHECK(loop_.ownsState());
    if (error_) return failLater(std::move(op.fn), error_);
    reads_.push_back(std::move(op));
    // A read asked from a read's callback is served by the pump running it.
    if (!pumping_) derived().pumpReads();
  }

  // A write on a failed connection: fails it on the next turn; true if so.
  bool refuseWrite(write_callback_fn& fn, const Error& why) {
    if (!why) return false;
    failLater(std::move(fn), why);
    return true;
  }

  // The first step of every closeInLoop: false if the connection was closed
  // already (then do nothing). Sets the error and gives the peer-gone notice.
  bool startClosing(const Error& reason) {
    ACTORPIPE_DCHECK(loop_.ownsState());
    if (error_) return false;
    error_ = reason ? reason : ACTORPIPE_ERROR(EOFError);
    tellPeerGone(error_);
    return true;
  }

  // The peer closed its end or died: tell whoever asked, once.
  void tellPeerGone(const Error& why) {
    if (!peerGoneFn_) return;
    auto fn = std::move(peerGoneFn_);
    peerGoneFn_ = nullptr;
    fn(why);
  }

  // A read brought some of the peer's bytes (loop thread).
  void noteArrival() {
    if (arrivals_) arrivals_->note();
  }

  // The queued reads, taken out before a close releases anything, and
  // failed with the connection's error after.
  Fifo<ReadOp> takeReads() { return std::exchange(reads_, Fifo<ReadOp>()); }
  void failReads(Fifo<ReadOp>& reads) {
    reads.drain([this](ReadOp op) { op.fn(error_); });
  }

  // The loop outlives us: a handle dropped after its context closed still
  // posts its close here (refused: the loop has finished).
  const std::shared_ptr<Loop> keepLoop_;
  Loop& loop_;
  const std::string peer_;
  Error error_;
  bool pumping_{false};  // Derived::pumpReads is running
  Fifo<ReadOp> reads_;
  std::shared_ptr<Arrivals> arrivals_;  // the pipe's, once established

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }

 protected:
  template <typename Fn>
  void failLater(Fn fn, Error why) {
    // Made only if the loop takes it: on a finished loop (a connection used
    // after its context is gone) the callback still runs, here.
    if (!loop_.postMade([&] { return [fn = std::move(fn), why] { fn(why); }; })) fn(why);
  }

 private:
  std::function<void(const Error&)> peerGoneFn_;
};

}  // namespace actorpipe::detail
