#include <actorpipe/actors/remote/detail/message_codec.h>

#include <cstring>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/detail/ieee_754.hpp>
#include <caf/detail/network_order.hpp>
#include <caf/downstream_msg.hpp>
#include <caf/error.hpp>
#include <caf/system_messages.hpp>
#include <caf/upstream_msg.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

namespace actorpipe {
namespace {

// The tensors of the message being encoded or decoded on this thread: a
// Tensor is only ever (de)serialized inside encodeMessage/decodeMessage,
// which set these for the duration of the call.
thread_local std::vector<Tensor>* tOutgoing = nullptr;
thread_local std::vector<Tensor>* tIncoming = nullptr;
thread_local std::vector<bool>* tIncomingUsed = nullptr;

constexpr uint32_t kNoTensor = 0xffffffffu;

} // namespace

caf::error inspect(caf::serializer& f, Tensor& x) {
  if (tOutgoing == nullptr) {
    return caf::make_error(caf::sec::runtime_error,
                           "a Tensor is serialized only by actorpipe's remote actors");
  }
  uint32_t index = kNoTensor;
  if (x.defined()) {
    if (tOutgoing->size() >= kNoTensor) return caf::make_error(caf::sec::invalid_argument);
    index = static_cast<uint32_t>(tOutgoing->size());
    tOutgoing->push_back(x);
  }
  return f(index);
}

caf::error inspect(caf::deserializer& f, Tensor& x) {
  if (tIncoming == nullptr) {
    return caf::make_error(caf::sec::runtime_error,
                           "a Tensor is deserialized only by actorpipe's remote actors");
  }
  uint32_t index = 0;
  if (auto err = f(index)) return err;
  if (index == kNoTensor) {
    x = Tensor();
    return caf::none;
  }
  if (index >= tIncoming->size() || (*tIncomingUsed)[index]) {
    return caf::make_error(caf::sec::invalid_argument,
                           "tensor index " + std::to_string(index) + " unknown or used twice");
  }
  (*tIncomingUsed)[index] = true;
  x = std::move((*tIncoming)[index]);
  return caf::none;
}

std::string to_string(const Tensor& x) { return x.toString(); }

namespace remote::detail {
namespace {

// CAF's binary format, read with every count and length checked against the
// bytes that remain before anything is allocated or copied.
class BoundedDeserializer final : public caf::deserializer {
 public:
  BoundedDeserializer(caf::execution_unit* unit, const char* data, size_t size)
      : caf::deserializer(unit), p_(data), end_(data + size) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  caf::error begin_object(uint16_t& typenr, std::string& name) override {
    if (auto err = apply_impl(typenr)) return err;
    if (typenr != 0) return caf::none;
    return apply_impl(name);
  }
  caf::error end_object() override { return caf::none; }

  // At most 5 varint bytes (a 32-bit count). A count is at most 8 elements
  // per remaining byte: every element but a bit of a vector<bool> takes at
  // least one byte, and CAF resizes byte vectors to the count before it
  // reads them, so this bounds that allocation by the message's own size.
  caf::error begin_sequence(size_t& count) override {
    uint64_t value = 0;
    for (int i = 0;; ++i) {
      if (i == 5) return caf::make_error(caf::sec::invalid_argument, "varint longer than 5 bytes");
      uint8_t byte = 0;
      if (auto err = apply_raw(1, &byte)) return err;
      value |= uint64_t(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) break;
    }
    if (value > 8 * uint64_t(remaining()) + 8) {
      return caf::make_error(caf::sec::invalid_argument,
                             "sequence of " + std::to_string(value) + " elements in " +
                                 std::to_string(remaining()) + " bytes");
    }
    count = static_cast<size_t>(value);
    return caf::none;
  }
  caf::error end_sequence() override { return caf::none; }

  caf::error apply_raw(size_t n, void* out) override {
    if (n > remaining()) return caf::sec::end_of_stream;
    if (n > 0) std::memcpy(out, p_, n);
    p_ += n;
    return caf::none;
  }

 protected:
  caf::error apply_impl(int8_t& x) override { return apply_raw(1, &x); }
  caf::error apply_impl(uint8_t& x) override { return apply_raw(1, &x); }
  caf::error apply_impl(int16_t& x) override { return integer(x); }
  caf::error apply_impl(uint16_t& x) override { return integer(x); }
  caf::error apply_impl(int32_t& x) override { return integer(x); }
  caf::error apply_impl(uint32_t& x) override { return integer(x); }
  caf::error apply_impl(int64_t& x) override { return integer(x); }
  caf::error apply_impl(uint64_t& x) override { return integer(x); }
  caf::error apply_impl(float& x) override { return floating(x); }
  caf::error apply_impl(double& x) override { return floating(x); }
  caf::error apply_impl(long double& x) override {
    // CAF writes a long double as its decimal text.
    std::string text;
    if (auto err = apply_impl(text)) return err;
    std::istringstream in(text);
    in >> x;
    return caf::none;
  }
  caf::error apply_impl(std::string& x) override {
    size_t n = 0;
    if (auto err = begin_sequence(n)) return err;
    if (n > remaining()) return caf::sec::end_of_stream;
    x.assign(p_, n);
    p_ += n;
    return caf::none;
  }
  caf::error apply_impl(std::u16string& x) override { return wide<uint16_t>(x); }
  caf::error apply_impl(std::u32string& x) override { return wide<uint32_t>(x); }

 private:
  template <class T>
  caf::error integer(T& x) {
    typename std::make_unsigned<T>::type raw = 0;
    if (auto err = apply_raw(sizeof(raw), &raw)) return err;
    x = static_cast<T>(caf::detail::from_network_order(raw));
    return caf::none;
  }
  template <class T>
  caf::error floating(T& x) {
    typename caf::detail::ieee_754_trait<T>::packed_type packed = 0;
    if (auto err = integer(packed)) return err;
    x = caf::detail::unpack754(packed);
    return caf::none;
  }
  template <class Unit, class String>
  caf::error wide(String& x) {
    size_t n = 0;
    if (auto err = begin_sequence(n)) return err;
    if (n > remaining() / sizeof(Unit)) return caf::sec::end_of_stream;
    x.clear();
    for (size_t i = 0; i < n; ++i) {
      Unit unit = 0;
      if (auto err = integer(unit)) return err;
      x.push_back(static_cast<typename String::value_type>(unit));
    }
    return caf::none;
  }

  const char* p_;
  const char* end_;
};

} // namespace

bool isSystemMessage(const caf::message& m) {
  if (m.size() != 1) return false;
  return m.match_element<caf::exit_msg>(0) || m.match_element<caf::down_msg>(0) ||
         m.match_element<caf::group_down_msg>(0) || m.match_element<caf::timeout_msg>(0) ||
         m.match_element<caf::open_stream_msg>(0) || m.match_element<caf::upstream_msg>(0) ||
         m.match_element<caf::downstream_msg>(0);
}

namespace {

std::string describe(caf::actor_system& system, const caf::error& err) {
  return system.render(err);
}

} // namespace

std::string encodeNodeId(caf::actor_system& system, const caf::node_id& id) {
  std::vector<char> bytes;
  caf::binary_serializer sink(system, bytes);
  if (sink(const_cast<caf::node_id&>(id))) return std::string();
  return std::string(bytes.begin(), bytes.end());
}

Error decodeNodeId(caf::actor_system& system, const std::string& bytes, caf::node_id& out) {
  BoundedDeserializer source(system.dummy_execution_unit(), bytes.data(), bytes.size());
  caf::node_id id;
  if (auto err = source(id)) {
    return ACTORPIPE_ERROR(ProtocolError, "undecodable node id: " + describe(system, err));
  }
  if (source.remaining() != 0 || !id) {
    return ACTORPIPE_ERROR(ProtocolError, "a bad node id");
  }
  out = std::move(id);
  return Error();
}

Error encodeMessage(caf::actor_system& system, const caf::message& message, EncodedMessage& out) {
  out.bytes.clear();
  // CAF's serializer grows the vector as it writes (a small message grew it
  // four times: four allocations per message sent); one for a small one.
  out.bytes.reserve(128);
  out.tensors.clear();
  caf::binary_serializer sink(system, out.bytes);
  tOutgoing = &out.tensors;
  caf::error err;
  std::string thrown;
  try {
    err = message.save(sink);
  } catch (const std::exception& e) {
    thrown = e.what();
  }
  tOutgoing = nullptr;
  if (!thrown.empty()) {
    return ACTORPIPE_ERROR(LogicError, "cannot send this message to a remote actor: CAF threw " + thrown);
  }
  if (err) {
    return ACTORPIPE_ERROR(LogicError, "cannot send this message to a remote actor (" +
                                           describe(system, err) +
                                           "): is every type in it registered with "
                                           "add_message_type?");
  }
  return Error();
}

Error decodeMessage(caf::actor_system& system, const char* data, size_t size,
                    std::vector<Tensor> tensors, caf::message& out, caf::execution_unit* unit) {
  BoundedDeserializer source(unit != nullptr ? unit : system.dummy_execution_unit(), data, size);
  std::vector<bool> used(tensors.size(), false);
  tIncoming = &tensors;
  tIncomingUsed = &used;
  caf::message result;
  caf::error err;
  // CAF throws on some malformed input (a variant's type index out of range,
  // in config_value's inspect; found by fuzzing): a peer's bytes must never
  // end the process.
  std::string thrown;
  try {
    err = result.load(source);
  } catch (const std::exception& e) {
    thrown = e.what();
  } catch (...) {
    thrown = "an exception";
  }
  tIncoming = nullptr;
  tIncomingUsed = nullptr;
  if (!thrown.empty()) {
    return ACTORPIPE_ERROR(ProtocolError, "undecodable actor message: CAF threw " + thrown);
  }
  if (err) {
    return ACTORPIPE_ERROR(ProtocolError, "undecodable actor message: " + describe(system, err));
  }
  if (source.remaining() != 0) {
    return ACTORPIPE_ERROR(ProtocolError, "actor message with " +
                                              std::to_string(source.remaining()) +
                                              " trailing bytes");
  }
  if (isSystemMessage(result)) {
    return ACTORPIPE_ERROR(ProtocolError, "a peer sent a system message (" +
                                              caf::to_string(result).substr(0, 80) +
                                              "): peers send only user messages");
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      return ACTORPIPE_ERROR(ProtocolError, "actor message leaves tensor " + std::to_string(i) +
                                                " of " + std::to_string(used.size()) + " unused");
    }
  }
  out = std::move(result);
  return Error();
}

} // namespace remote::detail
} // namespace actorpipe
