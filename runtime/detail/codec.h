#pragma once
// The codec under actorpipe's wire format (runtime/detail/wire.cc) and every
// other encoding of ours that a peer feeds us (a group's link frames,
// actors/group/frames.cc). Integers are little endian, strings a u32 length
// and bytes. A Reader checks each length against the bytes that remain
// before it copies anything; its first failure sticks, every later read
// returns a zero value, and the decoder asks finish() once at the end.
#include <cstdint>
#include <cstring>
#include <string>

#include <actorpipe/runtime/device.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::wire {

class Writer {
 public:
  Writer() = default;
  // Starts with `prefix` zero bytes (a frame header to fill in once the body
  // is known) and room for `reserve` bytes, so a small frame is built in one
  // allocation.
  Writer(size_t prefix, size_t reserve) {
    out_.reserve(reserve);
    out_.assign(prefix, '\0');
  }
  // The same, building in `reuse`'s memory (a caller that encodes often
  // keeps one buffer: no allocation once it is large enough).
  Writer(std::string&& reuse, size_t prefix) : out_(std::move(reuse)) { out_.assign(prefix, '\0'); }
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  // Whole integers at once: one capacity check per field, not one per byte
  // (a small message's frame is mostly these).
  void u32(uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_.append(b, 4);
  }
  void u64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_.append(b, 8);
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void device(const Device& d) {
    str(d.type);
    u32(static_cast<uint32_t>(d.index));
  }
  std::string take() { return std::move(out_); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// The same vocabulary, for a frame built in two passes (wire.cc's message
// frames): SizeCounter adds up what the fields take, SpanWriter writes them
// into memory sized from that count. No capacity check and no library call
// per field; a small message's frame is built in about a third of the
// instructions the appending Writer took.
class SizeCounter {
 public:
  void u8(uint8_t) { n_ += 1; }
  void u32(uint32_t) { n_ += 4; }
  void u64(uint64_t) { n_ += 8; }
  void i64(int64_t) { n_ += 8; }
  void str(const std::string& s) { n_ += 4 + s.size(); }
  void device(const Device& d) {
    str(d.type);
    u32(0);
  }
  size_t size() const { return n_; }

 private:
  size_t n_{0};
};

class SpanWriter {
 public:
  // `p` has room for what a SizeCounter counted for the same fields.
  explicit SpanWriter(char* p) : p_(p) {}
  void u8(uint8_t v) { *p_++ = static_cast<char>(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) p_[i] = static_cast<char>(v >> (8 * i));
    p_ += 4;
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) p_[i] = static_cast<char>(v >> (8 * i));
    p_ += 8;
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void device(const Device& d) {
    str(d.type);
    u32(static_cast<uint32_t>(d.index));
  }
  char* end() const { return p_; }

 private:
  char* p_;
};

// Reads bounded fields; the first failure sticks and every later read
// returns a zero value, so decoders check `error()` once at the end.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  uint8_t u8() {
    if (!need(1, "u8")) return 0;
    return *p_++;
  }
  uint32_t u32() {
    if (!need(4, "u32")) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p_[i]) << (8 * i);
    p_ += 4;
    return v;
  }
  uint64_t u64() {
    if (!need(8, "u64")) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p_[i]) << (8 * i);
    p_ += 8;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string str(const char* what) {
    std::string s;
    str(s, what);
    return s;
  }
  // Into `out`, in its memory where it is large enough (a decoder that
  // keeps its frame between messages allocates nothing for small strings
  // or for ones no longer than last time).
  void str(std::string& out, const char* what) {
    uint32_t n = u32();
    if (!need(n, what)) {
      out.clear();
      return;
    }
    out.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
  }
  // `n` bytes where they are (valid while the input is); nullptr once failed.
  const uint8_t* view(size_t n, const char* what) {
    if (!need(n, what)) return nullptr;
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  Device device() {
    Device d;
    device(d);
    return d;
  }
  void device(Device& d) {
    str(d.type, "device type");
    d.index = static_cast<int>(u32());
  }
  // A count of entries each at least `minEntry` bytes long: refuses counts
  // the remaining bytes could not hold, so no reserve() can be abused.
  uint32_t count(size_t minEntry, size_t limit, const char* what) {
    uint32_t n = u32();
    if (failed_) return 0;
    if (n > limit || size_t(n) * minEntry > size_t(end_ - p_)) {
      fail(std::string("implausible ") + what + " count " + std::to_string(n));
      return 0;
    }
    return n;
  }
  void fail(std::string reason) {
    if (!failed_) {
      failed_ = true;
      reason_ = std::move(reason);
    }
  }
  Error finish(const char* frame) {
    if (!failed_ && p_ != end_) {
      fail(std::to_string(end_ - p_) + " trailing bytes");
    }
    if (failed_) {
      return ACTORPIPE_ERROR(ProtocolError, std::string("bad ") + frame + " frame: " + reason_);
    }
    return Error();
  }
  bool failed() const { return failed_; }

 private:
  bool need(size_t n, const char* what) {
    if (failed_) return false;
    if (size_t(end_ - p_) < n) {
      fail(std::string("truncated ") + what);
      return false;
    }
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  bool failed_{false};
  std::string reason_;
};

}  // namespace actorpipe::wire
