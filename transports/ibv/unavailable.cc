// Built when rdma-core's libibverbs is absent: the transport exists, is
// never viable, and says why.
#include <actorpipe/transports/ibv/factory.h>

#include <actorpipe/transports/ibv/not_viable.h>

namespace actorpipe::transport::ibv {

std::vector<PortInfo> listPorts(std::string* why) {
  if (why) *why = "actorpipe was built without rdma-core (libibverbs-dev)";
  return {};
}

std::string whyNotViable() { return "actorpipe was built without rdma-core (libibverbs-dev)"; }

std::shared_ptr<Context> create() { return std::make_shared<NotViableContext>(whyNotViable()); }

} // namespace actorpipe::transport::ibv
