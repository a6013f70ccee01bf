#include <actorpipe/transports/ibv/device.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <actorpipe/transports/ibv/factory.h>

namespace actorpipe::transport::ibv {
namespace {

const char* stateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    default: return "other";
  }
}

int mtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

}  // namespace

Device::~Device() {
  if (channel) ibv_destroy_comp_channel(channel);
  if (pd) ibv_dealloc_pd(pd);
  if (context) ibv_close_device(context);
}

std::vector<PortInfo> listPorts(std::string* why) {
  std::vector<PortInfo> ports;
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr) {
    if (why) *why = std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return ports;
  }
  for (int i = 0; i < count; ++i) {
    ibv_context* ctx = ibv_open_device(devices[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) != 0) continue;
        PortInfo info;
        info.device = ibv_get_device_name(devices[i]);
        info.port = p;
        info.active = pa.state == IBV_PORT_ACTIVE;
        info.state = stateName(pa.state);
        info.linkLayer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        info.lid = pa.lid;
        info.activeMtu = mtuBytes(pa.active_mtu);
        ports.push_back(info);
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(devices);
  if (ports.empty() && why) *why = count == 0 ? "no RDMA device on this host" : "no RDMA port could be queried";
  return ports;
}

std::string whyNotViable() {
  std::string why;
  auto ports = listPorts(&why);
  for (const auto& p : ports) {
    if (p.active) return std::string();
  }
  return ports.empty() ? why : "no RDMA port is active (" + std::to_string(ports.size()) + " found)";
}

std::shared_ptr<Device> openFirstActivePort(std::string& why) {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr || count == 0) {
    why = "no RDMA device on this host";
    if (devices) ibv_free_device_list(devices);
    return nullptr;
  }
  std::shared_ptr<Device> found;
  for (int i = 0; i < count && !found; ++i) {
    auto device = std::make_shared<Device>();
    device->context = ibv_open_device(devices[i]);
    if (device->context == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(device->context, &attr) != 0) continue;
    for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
      if (ibv_query_port(device->context, p, &device->portAttr) == 0 &&
          device->portAttr.state == IBV_PORT_ACTIVE) {
        device->port = p;
        break;
      }
    }
    if (device->port == 0) continue;
    device->pd = ibv_alloc_pd(device->context);
    device->channel = ibv_create_comp_channel(device->context);
    if (device->pd == nullptr || device->channel == nullptr) {
      why = std::string("cannot set up the RDMA device: ") + std::strerror(errno);
      continue;
    }
    // The loop drains completion events without blocking.
    int flags = ::fcntl(device->channel->fd, F_GETFL);
    ::fcntl(device->channel->fd, F_SETFL, flags | O_NONBLOCK);
    found = device;
  }
  ibv_free_device_list(devices);
  if (!found && why.empty()) why = "no RDMA port is active";
  return found;
}

} // namespace actorpipe::transport::ibv
