#pragma once
// An ibv context on a host where ibv cannot work: not viable (so never
// offered to peers), and every direct use fails with the reason.
#include <actorpipe/transports/detail/loop_holder.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::transport::ibv {

class NotViableContext final : public Context {
 public:
  explicit NotViableContext(std::string why) : why_(std::move(why)) {}

  std::shared_ptr<Connection> connect(std::string addr) override;
  std::shared_ptr<Listener> listen(std::string addr) override;
  bool isViable() const override { return false; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string) override {}
  void close() override {}
  void join() override { loop_.stopIfOwned(); }
  detail::Loop& loop() override { return loop_.get(); }
  bool adoptLoop(std::shared_ptr<detail::Loop> loop) override { return loop_.adopt(std::move(loop)); }
  void shutdown(const Error&) override {}

 private:
  std::string why_;
  std::string domain_{"ibv/none"};
  actorpipe::detail::LoopHolder loop_{"ibv"};
};

} // namespace actorpipe::transport::ibv
