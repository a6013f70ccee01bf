// What a peer node sends (actors/remote/detail/): node frames, batches of
// them (a pipe message's metadata), and the CAF-encoded part of a message
// with its tensors. The first byte chooses, by its remainder mod 3: 0, a
// frame (whatever decodes must encode back to the same bytes; a HELLO's
// node id is decoded too); 1, a message
// with (byte / 3) % 4 tensors received beside it; 2, a batch (likewise).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <actorpipe/actors/remote/detail/frames.h>
#include <actorpipe/actors/remote/detail/message_codec.h>

using namespace actorpipe;
using namespace actorpipe::remote::detail;

namespace {

caf::actor_system& system() {
  static caf::actor_system_config* config = [] {
    auto* c = new caf::actor_system_config;
    c->add_message_type<Tensor>("actorpipe::Tensor");
    c->add_message_type<std::vector<Tensor>>("std::vector<actorpipe::Tensor>");
    c->set("scheduler.max-threads", 1);
    return c;
  }();
  static caf::actor_system* s = new caf::actor_system(*config);
  return *s;
}

void frame(const std::string& bytes) {
  Frame f;
  if (decodeFrame(bytes, f)) return;
  if (f.name.size() > kMaxNameLength || f.identity.size() > kMaxIdentityLength ||
      f.reason.size() > kMaxReasonLength || f.interface.size() > kMaxInterfaceEntries ||
      f.urls.size() > kMaxUrls) {
    std::abort();
  }
  if (encodeFrame(f) != bytes) std::abort();
  for (const auto& url : f.urls) {
    if (!isPlainName(url, kMaxUrlLength)) std::abort();
  }
  if (f.kind == Frame::Kind::kWhere && (f.node.empty() || f.node.size() > kMaxNodeIdLength)) {
    std::abort();
  }
  if (f.kind == Frame::Kind::kHello) {
    if (f.node.empty() || f.node.size() > kMaxNodeIdLength) std::abort();
    caf::node_id id;
    if (!decodeNodeId(system(), f.node, id) && !id) std::abort();  // a HELLO's node id: CAF's bytes
  }
}

void batch(const std::string& bytes) {
  std::vector<BatchEntry> entries;
  if (decodeBatch(bytes, entries)) return;
  if (entries.empty() || entries.size() > kMaxBatchFrames) std::abort();
  std::vector<std::pair<std::string, uint32_t>> frames;
  for (const auto& e : entries) {
    if (e.frame.kind != Frame::Kind::kMessage && e.tensors != 0) std::abort();
    frames.emplace_back(encodeFrame(e.frame), e.tensors);
  }
  if (encodeBatch(frames) != bytes) std::abort();
}

void message(const std::string& bytes, size_t tensors) {
  std::vector<Tensor> received;
  for (size_t i = 0; i < tensors; ++i) received.push_back(Tensor::zeros({int64_t(i + 1)}, DType::kUint8));
  caf::message out;
  if (decodeMessage(system(), bytes.data(), bytes.size(), received, out)) return;
  if (isSystemMessage(out)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: frame(bytes); break;
    case 1: message(bytes, (data[0] / 3) % 4); break;
    default: batch(bytes); break;
  }
  return 0;
}
