#include <actorpipe/actors/group/plan.h>

#include <cstdlib>

#include <actorpipe/actors/group/tree.h>

namespace actorpipe::group {

namespace {

const char* const kNames[] = {
    "the ring (ACTORPIPE_GROUP_RING)",
    "the exchange (ACTORPIPE_GROUP_EXCHANGE)",
    "recursive doubling (ACTORPIPE_GROUP_DOUBLING)",
    "recursive halving (ACTORPIPE_GROUP_HALVING)",
    "the ring threshold (TreeOptions::ringThreshold, ACTORPIPE_RING_THRESHOLD)",
    "the doubling threshold (TreeOptions::doublingThreshold)",
    "the chunk size (TreeOptions::chunkBytes, ACTORPIPE_CHUNK_BYTES)",
    "the ring's chunk size (ACTORPIPE_RING_CHUNK_BYTES)",
};

class Settings {
 public:
  explicit Settings(const std::map<std::string, std::string>& overrides) : overrides_(overrides) {}

  void flag(const char* name, bool& value) {
    std::string text;
    if (!get(name, text)) return;
    if (text == "0" || text == "1") value = text == "1";
    else bad(name, text, "0 or 1");
  }
  void bytes(const char* name, size_t& value) {
    std::string text;
    if (!get(name, text)) return;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0' || n > (uint64_t{1} << 48)) bad(name, text, "a byte count");
    else value = static_cast<size_t>(n);
  }
  Error error() const { return error_; }

 private:
  bool get(const char* name, std::string& text) const {
    auto it = overrides_.find(name);
    if (it != overrides_.end()) {
      text = it->second;
      return true;
    }
    const char* value = std::getenv(name);
    if (value == nullptr) return false;
    text = value;
    return true;
  }
  void bad(const char* name, const std::string& text, const char* wanted) {
    if (!error_) {
      error_ = ACTORPIPE_ERROR(LogicError, std::string(name) + "=\"" + text + "\" is not " + wanted);
    }
  }
  const std::map<std::string, std::string>& overrides_;
  Error error_;
};

}  // namespace

std::vector<uint64_t> CollectivePlan::fields() const {
  return {ring, exchange, doubling, halving, ringThreshold, doublingThreshold, chunkBytes, ringChunkBytes};
}

std::string CollectivePlan::fieldName(size_t index) {
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "setting " + std::to_string(index);
}

Error makePlan(const TreeOptions& options, CollectivePlan& plan,
               const std::map<std::string, std::string>& overrides) {
  CollectivePlan p;
  p.ringThreshold = options.ringThreshold;
  p.doublingThreshold = options.doublingThreshold;
  p.chunkBytes = options.chunkBytes;
  Settings s(overrides);
  s.flag("ACTORPIPE_GROUP_RING", p.ring);
  s.flag("ACTORPIPE_GROUP_EXCHANGE", p.exchange);
  s.flag("ACTORPIPE_GROUP_DOUBLING", p.doubling);
  s.flag("ACTORPIPE_GROUP_HALVING", p.halving);
  s.bytes("ACTORPIPE_RING_THRESHOLD", p.ringThreshold);
  s.bytes("ACTORPIPE_RING_CHUNK_BYTES", p.ringChunkBytes);
  if (p.chunkBytes == 0) s.bytes("ACTORPIPE_CHUNK_BYTES", p.chunkBytes);
  if (options.chunkBytes != 0) p.ringChunkBytes = options.chunkBytes;
  if (Error error = s.error()) return error;
  plan = p;
  return Error::kSuccess;
}

}  // namespace actorpipe::group
