#include <actorpipe/transports/uv/utility.h>

#include <actorpipe/transports/detail/interfaces.h>
#include <actorpipe/transports/uv/error.h>

namespace actorpipe::transport::uv {
namespace {

std::tuple<Error, std::string> answer(detail::Lookup found) {
  if (found.error) return {found.error, ""};
  if (!found.notFound.empty()) return {ACTORPIPE_ERROR(NoAddrFoundError, found.notFound), ""};
  return {Error(), found.address};
}

}  // namespace

std::tuple<Error, std::string> lookupAddrForIface(std::string iface) {
  return answer(detail::addressOfInterface(iface));
}

std::tuple<Error, std::string> lookupAddrForHostname() { return answer(detail::addressOfHostname()); }

std::tuple<Error, std::string> lookupAddrLikeNccl(optional<sa_family_t> familyFilter) {
  return answer(detail::addressLikeNccl(familyFilter));
}

} // namespace actorpipe::transport::uv
