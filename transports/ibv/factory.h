#pragma once
// The ibv transport: RDMA (InfiniBand or RoCE) through rdma-core's
// libibverbs. A connection is a reliable-connected queue pair; a TCP
// connection bootstraps it (queue pair numbers, LIDs, GIDs) and then only
// watches for the peer's death. Addresses are the bootstrap's: "host:port".
//
// Offered only where a device has an active port: elsewhere the context is
// simply not viable (no hang, no crash, no slow start) and says why.
// Data transfer over ibv has not been run on RDMA hardware yet: see
// docs/architecture.md.
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/transports/context.h>

namespace actorpipe::transport::ibv {

std::shared_ptr<Context> create();

// What rdma-core reports about this host's devices and their ports.
struct PortInfo {
  std::string device;
  int port{0};
  bool active{false};
  std::string state;      // "active", "down", ...
  std::string linkLayer;  // "InfiniBand", "Ethernet"
  int lid{0};
  int activeMtu{0};       // bytes
};
// Empty, with `why` filled, when there is nothing to list.
std::vector<PortInfo> listPorts(std::string* why = nullptr);

// Empty when a context made now would be viable; otherwise why not.
std::string whyNotViable();

} // namespace actorpipe::transport::ibv
