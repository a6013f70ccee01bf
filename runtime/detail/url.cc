#include <actorpipe/runtime/detail/url.h>

namespace actorpipe::detail {

bool splitUrl(const std::string& url, std::string& scheme, std::string& address) {
  auto pos = url.find("://");
  if (pos == std::string::npos || pos == 0) {
    return false;
  }
  scheme = url.substr(0, pos);
  address = url.substr(pos + 3);
  return true;
}

} // namespace actorpipe::detail
