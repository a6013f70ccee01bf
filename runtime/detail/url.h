#pragma once
// URLs name a transport and an address: "tcp://127.0.0.1:80", "shm://name".
#include <string>

namespace actorpipe::detail {

// "tcp://127.0.0.1:80" -> ("tcp", "127.0.0.1:80"); false without "://" or
// without a scheme. The address is the transport's to parse.
bool splitUrl(const std::string& url, std::string& scheme, std::string& address);

} // namespace actorpipe::detail
