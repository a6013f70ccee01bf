#pragma once
// One opened RDMA device port, shared by every connection of a context: the
// verbs context, a protection domain, and one completion channel (one file
// descriptor for all of the context's connections).
#include <infiniband/verbs.h>

#include <memory>
#include <string>

namespace actorpipe::transport::ibv {

struct Device {
  ibv_context* context{nullptr};
  ibv_pd* pd{nullptr};
  ibv_comp_channel* channel{nullptr};
  uint8_t port{0};
  ibv_port_attr portAttr{};
  ~Device();
};

// The first device with an active port, opened; null with `why` otherwise.
std::shared_ptr<Device> openFirstActivePort(std::string& why);

} // namespace actorpipe::transport::ibv
