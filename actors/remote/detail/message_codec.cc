#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/runtime/detail/log.h>

#include <cstring>
#include <optional>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/detail/ieee_754.hpp>
#include <caf/detail/network_order.hpp>
#include <caf/downstream_msg.hpp>
#include <caf/error.hpp>
#include <caf/message_builder.hpp>
#include <caf/type_nr.hpp>
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

// How deep a peer's objects and sequences may nest (a message, a vector of
// vectors, a config_value list of lists, ...): far past what actors send,
// far below what a loop thread's stack holds.
constexpr int kMaxDecodeDepth = 64;

// CAF's binary format, read with every count and length checked against the
// bytes that remain before anything is allocated or copied, and its nesting
// bounded.
class BoundedDeserializer final : public caf::deserializer {
 public:
  BoundedDeserializer(caf::execution_unit* unit, const char* data, size_t size)
      : caf::deserializer(unit), p_(data), end_(data + size) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  // Objects and sequences nest: each level is a recursion in CAF's reader,
  // and again in the destructor of what it built. A peer's list of lists,
  // two bytes a level, overflowed the loop thread's stack (SIGSEGV, which
  // nothing catches) at a few tens of thousands of levels.
  caf::error begin_object(uint16_t& typenr, std::string& name) override {
    if (auto err = enter()) return err;
    if (auto err = apply_impl(typenr)) return err;
    if (typenr != 0) return caf::none;
    return apply_impl(name);
  }
  caf::error end_object() override { return leave(); }

  // At most 5 varint bytes (a 32-bit count). A count is at most 8 elements
  // per remaining byte: every element but a bit of a vector<bool> takes at
  // least one byte, and CAF resizes byte vectors to the count before it
  // reads them, so this bounds that allocation by the message's own size.
  caf::error begin_sequence(size_t& count) override {
    if (auto err = enter()) return err;
    return readCount(count);
  }
  caf::error end_sequence() override { return leave(); }

  caf::error apply_raw(size_t n, void* out) override {
    if (n > remaining()) return caf::sec::end_of_stream;
    if (n > 0) std::memcpy(out, p_, n);
    p_ += n;
    return caf::none;
  }

 private:
  caf::error enter() {
    if (++depth_ > kMaxDecodeDepth) {
      return caf::make_error(caf::sec::invalid_argument,
                             "data nested deeper than " + std::to_string(kMaxDecodeDepth) + " levels");
    }
    return caf::none;
  }
  caf::error leave() {
    if (depth_ > 0) --depth_;
    return caf::none;
  }
  // A sequence's count, or a string's length (a string is no level).
  caf::error readCount(size_t& count) {
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
    if (auto err = readCount(n)) return err;
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
    if (auto err = readCount(n)) return err;
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
  int depth_{0};
};

// The compact form: a message of at most kMaxCompactElements elements, each
// a bool, a fixed-width integer, a float, a double, a std::string or an
// atom, which is most of what actors send. CAF's own form writes each
// message's type names as text ("@<>+@i64") and reads them back by name
// through a type registry, and its serializers return an error object per
// value: ~140 ns to encode and ~270 ns to decode an int64 here, more than
// the pipe's own per-message cost. This one writes a tag per element and
// the values in place (little endian), and builds the message directly.
//
//   0xA5, count (1..kMaxCompactElements), count x (tag, value)
//
// CAF's form starts with its type number 0 (two zero bytes), so the first
// byte tells the two apart. Decoding is strict: known tags, a bool is 0 or
// 1, a string's length fits in what remains, nothing after the last value.
constexpr uint8_t kCompactMagic = 0xA5;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the compact form copies values in the host's byte order, little endian on the wire");
constexpr size_t kMaxCompactElements = 16;

enum class Tag : uint8_t {
  kBool = 0,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kFloat,
  kDouble,
  kString,
  kAtom,
};

template <class T>
void putFixed(std::vector<char>& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little endian: every platform we build for
  out.insert(out.end(), raw, raw + sizeof(T));
}

template <class T>
bool putElement(const caf::message& m, size_t i, Tag tag, std::vector<char>& out) {
  out.push_back(static_cast<char>(tag));
  putFixed(out, m.get_as<T>(i));
  return true;
}

bool encodeCompact(const caf::message& m, std::vector<char>& out) {
  size_t n = m.size();
  if (n == 0 || n > kMaxCompactElements) return false;
  for (size_t i = 0; i < n; ++i) {
    switch (m.type(i).first) {
      case caf::type_nr<bool>::value:
      case caf::type_nr<int8_t>::value:
      case caf::type_nr<int16_t>::value:
      case caf::type_nr<int32_t>::value:
      case caf::type_nr<int64_t>::value:
      case caf::type_nr<uint8_t>::value:
      case caf::type_nr<uint16_t>::value:
      case caf::type_nr<uint32_t>::value:
      case caf::type_nr<uint64_t>::value:
      case caf::type_nr<float>::value:
      case caf::type_nr<double>::value:
      case caf::type_nr<std::string>::value:
      case caf::type_nr<caf::atom_value>::value:
        break;
      default:
        return false;
    }
  }
  out.push_back(static_cast<char>(kCompactMagic));
  out.push_back(static_cast<char>(n));
  for (size_t i = 0; i < n; ++i) {
    switch (m.type(i).first) {
      case caf::type_nr<bool>::value:
        out.push_back(static_cast<char>(Tag::kBool));
        out.push_back(m.get_as<bool>(i) ? 1 : 0);
        break;
      case caf::type_nr<int8_t>::value: putElement<int8_t>(m, i, Tag::kI8, out); break;
      case caf::type_nr<int16_t>::value: putElement<int16_t>(m, i, Tag::kI16, out); break;
      case caf::type_nr<int32_t>::value: putElement<int32_t>(m, i, Tag::kI32, out); break;
      case caf::type_nr<int64_t>::value: putElement<int64_t>(m, i, Tag::kI64, out); break;
      case caf::type_nr<uint8_t>::value: putElement<uint8_t>(m, i, Tag::kU8, out); break;
      case caf::type_nr<uint16_t>::value: putElement<uint16_t>(m, i, Tag::kU16, out); break;
      case caf::type_nr<uint32_t>::value: putElement<uint32_t>(m, i, Tag::kU32, out); break;
      case caf::type_nr<uint64_t>::value: putElement<uint64_t>(m, i, Tag::kU64, out); break;
      case caf::type_nr<float>::value: putElement<float>(m, i, Tag::kFloat, out); break;
      case caf::type_nr<double>::value: putElement<double>(m, i, Tag::kDouble, out); break;
      case caf::type_nr<caf::atom_value>::value:
        out.push_back(static_cast<char>(Tag::kAtom));
        putFixed(out, static_cast<uint64_t>(m.get_as<caf::atom_value>(i)));
        break;
      case caf::type_nr<std::string>::value: {
        const auto& text = m.get_as<std::string>(i);
        if (text.size() > UINT32_MAX) {
          out.clear();
          return false;
        }
        out.push_back(static_cast<char>(Tag::kString));
        putFixed(out, static_cast<uint32_t>(text.size()));
        out.insert(out.end(), text.begin(), text.end());
        break;
      }
    }
  }
  return true;
}

class CompactReader {
 public:
  CompactReader(const char* data, size_t size) : p_(data), end_(data + size) {}
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  template <class T>
  bool fixed(T& out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&out, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool text(std::string& out) {
    uint32_t n = 0;
    if (!fixed(n) || n > remaining()) return false;  // before anything is copied
    out.assign(p_, n);
    p_ += n;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

Error decodeCompact(const char* data, size_t size, caf::message& out) {
  CompactReader r(data, size);
  uint8_t magic = 0, count = 0;
  if (!r.fixed(magic) || !r.fixed(count) || magic != kCompactMagic || count == 0 ||
      count > kMaxCompactElements) {
    return ACTORPIPE_ERROR(ProtocolError, "bad compact actor message header");
  }
  // One element: made as a local send makes it (a builder allocates its
  // storage even when unused).
  std::optional<caf::message_builder> builder;
  if (count > 1) builder.emplace();
  caf::message single;
  auto add = [&](auto value) {
    if (builder) {
      builder->append(std::move(value));
    } else {
      single = caf::make_message(std::move(value));
    }
    return true;
  };
  for (uint8_t i = 0; i < count; ++i) {
    uint8_t tag = 0;
    if (!r.fixed(tag)) {
      return ACTORPIPE_ERROR(ProtocolError, "bad compact actor message: element " +
                                                std::to_string(i) + " of " +
                                                std::to_string(count) + " missing");
    }
    bool ok = true;
    switch (Tag(tag)) {
      case Tag::kBool: {
        uint8_t v = 0;
        ok = r.fixed(v) && v <= 1 && add(v == 1);
        break;
      }
#define ACTORPIPE_COMPACT_FIXED(TAG, TYPE) \
      case Tag::TAG: {                      \
        TYPE v{};                           \
        ok = r.fixed(v) && add(v);          \
        break;                              \
      }
      ACTORPIPE_COMPACT_FIXED(kI8, int8_t)
      ACTORPIPE_COMPACT_FIXED(kI16, int16_t)
      ACTORPIPE_COMPACT_FIXED(kI32, int32_t)
      ACTORPIPE_COMPACT_FIXED(kI64, int64_t)
      ACTORPIPE_COMPACT_FIXED(kU8, uint8_t)
      ACTORPIPE_COMPACT_FIXED(kU16, uint16_t)
      ACTORPIPE_COMPACT_FIXED(kU32, uint32_t)
      ACTORPIPE_COMPACT_FIXED(kU64, uint64_t)
      ACTORPIPE_COMPACT_FIXED(kFloat, float)
      ACTORPIPE_COMPACT_FIXED(kDouble, double)
#undef ACTORPIPE_COMPACT_FIXED
      case Tag::kAtom: {
        uint64_t v = 0;
        ok = r.fixed(v) && add(static_cast<caf::atom_value>(v));
        break;
      }
      case Tag::kString: {
        std::string v;
        ok = r.text(v) && add(std::move(v));
        break;
      }
      default:
        ok = false;
    }
    if (!ok) {
      return ACTORPIPE_ERROR(ProtocolError, "bad compact actor message: element " +
                                                std::to_string(i) + " of " + std::to_string(count) +
                                                " (tag " + std::to_string(tag) + ")");
    }
  }
  if (r.remaining() != 0) {
    return ACTORPIPE_ERROR(ProtocolError, "compact actor message with " +
                                              std::to_string(r.remaining()) + " trailing bytes");
  }
  out = builder ? builder->move_to_message() : std::move(single);
  return Error();
}

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
  if (encodeCompact(message, out.bytes)) return Error();
  caf::binary_serializer sink(system, out.bytes);
  tOutgoing = &out.tensors;
  caf::error err;
  bool threw = false;
  std::string thrown;
  try {
    err = message.save(sink);
  } catch (...) {  // a user type's inspect may throw anything
    threw = true;
    thrown = ::actorpipe::detail::describeThrown();
  }
  tOutgoing = nullptr;
  if (threw) {
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
  if (size > 0 && static_cast<uint8_t>(data[0]) == kCompactMagic) {
    if (!tensors.empty()) {
      return ACTORPIPE_ERROR(ProtocolError, "a compact actor message came with " +
                                                std::to_string(tensors.size()) + " tensors");
    }
    return decodeCompact(data, size, out);
  }
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
