#pragma once
// A TCP connection on a libuv loop. Reads go through a small staging buffer
// (so many small frames cost one system call) except large reads, which land
// straight in the caller's memory. Writes are gathered into one writev,
// tried at once while none is queued (see issueWrite).
#include <deque>
#include <memory>
#include <vector>

#include <uv.h>

#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/transports/context.h>
#include <actorpipe/transports/detail/connection_base.h>

namespace actorpipe::transport::uv {

class UvConnection final : public detail::ConnectionBase<UvConnection> {
 public:
  // Takes a handle already connected (accepted), or none yet (connecting).
  UvConnection(detail::Loop& loop, std::string peer);
  ~UvConnection() override;

  // Loop thread: adopt an accepted socket / start an outgoing connection.
  void adopt(uv_tcp_t* handle);
  void startConnect(const sockaddr* addr);
  // Loop thread: fail at once (e.g. the address did not parse).
  void failConnect(const Error& error);
  // From the staging buffer, inside pumpReads only (which then decides
  // whether to keep reading ahead).
  bool readNow(void* ptr, size_t length) override;


 private:
  friend class detail::ConnectionBase<UvConnection>;
  struct WriteOp;

  void pumpReads();
  void writeInLoop(Slices slices, write_callback_fn fn);
  void closeInLoop(const Error& reason);
  void issueWrite(WriteOp* op);
  void recycle(WriteOp* op);
  void completeTakenWrites();
  void scheduleTakenWrites();
  void onConnected(int status);
  void peerGone();
  void updateReading();

  static void onAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onWrite(uv_write_t* req, int status);

  uv_tcp_t* handle_{nullptr};
  bool connected_{false};
  bool reading_{false};
  bool directRead_{false};
  bool peerGone_{false};
  // Keeps us alive while libuv holds our handle.
  std::shared_ptr<UvConnection> self_;

  std::vector<uint8_t> staging_;
  size_t stagingBegin_{0};
  size_t stagingEnd_{0};
  std::vector<WriteOp*> writesBeforeConnect_;
  static constexpr size_t kSpareWrites = 4;
  std::vector<std::unique_ptr<WriteOp>> spareWrites_;  // finished, for reuse
  size_t queuedWrites_{0};  // handed to uv_write, callback not yet run
  // Writes the socket took at once, in order, their callbacks not yet run,
  // and whether a task to run them is posted (see issueWrite).
  std::vector<write_callback_fn> takenWrites_;
  std::vector<write_callback_fn> completing_;
  bool takenPosted_{false};
  bool completingTaken_{false};
  static constexpr size_t kTryWriteAtMost = 256 * 1024;
};

} // namespace actorpipe::transport::uv
