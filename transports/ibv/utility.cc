// Built with or without rdma-core: finding an address needs no RDMA device.
#include <actorpipe/transports/ibv/utility.h>

#include <actorpipe/transports/detail/interfaces.h>
#include <actorpipe/transports/ibv/error.h>

namespace actorpipe::transport::ibv {
namespace {

std::tuple<Error, std::string> answer(actorpipe::detail::Lookup found) {
  if (found.error) return {found.error, ""};
  if (found.gaiError != 0) return {ACTORPIPE_ERROR(GetaddrinfoError, found.gaiError), ""};
  if (!found.notFound.empty()) return {ACTORPIPE_ERROR(NoAddrFoundError, found.notFound), ""};
  return {Error(), found.address};
}

}  // namespace

std::tuple<Error, std::string> lookupAddrForIface(std::string iface) {
  return answer(actorpipe::detail::addressOfInterface(iface));
}

std::tuple<Error, std::string> lookupAddrForHostname() { return answer(actorpipe::detail::addressOfHostname()); }

} // namespace actorpipe::transport::ibv
