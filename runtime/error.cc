#include <actorpipe/runtime/error.h>

#include <cstring>

namespace tensorpipe {

const Error Error::kSuccess = Error();

std::string Error::what() const {
  if (!error_) {
    return "success";
  }
  return error_->what() + " (raised at " + file_ + ":" + std::to_string(line_) + ")";
}

}  // namespace tensorpipe

namespace actorpipe {

std::string SystemError::what() const {
  return syscall_ + ": " + std::strerror(error_) + " (errno " + std::to_string(error_) + ")";
}

std::string UnknownTransportError::what() const {
  auto pos = url_.find("://");
  std::string scheme = pos == std::string::npos ? url_ : url_.substr(0, pos);
  return "unknown transport '" + scheme + "' in URL '" + url_ +
         "': register a transport under that name first";
}

} // namespace actorpipe
