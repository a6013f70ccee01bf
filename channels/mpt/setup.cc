#include <actorpipe/channels/mpt/setup.h>

#include <charconv>

namespace actorpipe::channel::mpt {

std::string formatSetup(uint64_t token, const std::vector<std::string>& addresses) {
  std::string setup = std::to_string(token);
  for (const auto& a : addresses) setup += ";" + a;
  return setup;
}

Error parseSetup(const std::string& setup, size_t lanes, uint64_t& token, std::vector<std::string>& addresses) {
  auto bad = [&] {
    return ACTORPIPE_ERROR(ProtocolError, "bad mpt setup '" + setup.substr(0, 200) + "' for " +
                                              std::to_string(lanes) + " lanes");
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = setup.find(';', start);
    parts.push_back(setup.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    if (parts.size() > lanes) return bad();  // more fields than lanes: stop reading
    start = end + 1;
  }
  if (parts.size() != lanes + 1) return bad();
  const std::string& digits = parts[0];
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 10);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) return bad();
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].empty()) return bad();
  }
  token = value;
  addresses.assign(parts.begin() + 1, parts.end());
  return Error();
}

} // namespace actorpipe::channel::mpt
