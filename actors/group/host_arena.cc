#include <actorpipe/actors/group/host_arena.h>

#include <actorpipe/transports/shm/socket.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x616e657261706170ULL;  // "papArena", little-endian
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 256;
constexpr size_t kPage = 4096;

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t ranks;
  uint64_t slotBytes;
  uint64_t totalBytes;
};

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futexes wait on the flags' own words");

size_t alignUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

size_t slotBytesOf(const ArenaOptions& options) {
  return alignUp(std::max(options.slotBytes, kPage), kPage);
}

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void futexWake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void futexWait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Not FUTEX_PRIVATE: the word is shared with the other ranks' processes.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Round numbers wrap; a word has reached `round` when it is not behind it.
inline bool reached(uint32_t value, uint32_t round) {
  return static_cast<int32_t>(value - round) >= 0;
}

uint64_t mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  return hash;
}

} // namespace

// Each rank's flags. Written only by that rank; the fields of round g live at
// [g % 2], because a fast rank may publish round g+1 while a slow one still
// reads round g (never g+2: that needs the slow rank's arrival at g+1).
struct HostArena::Control {
  alignas(64) std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> arrivedSleepers;
  uint32_t contributes[2];
  uint64_t signature[2];
  alignas(64) std::atomic<uint32_t> reduced;
  std::atomic<uint32_t> reducedSleepers;
};

// One round: elements [offset, offset + count) of one tensor.
struct HostArena::Round {
  uint32_t number;
  uint8_t* data;  // the caller's bytes for this round (input, then result)
  size_t count;
  DType dtype;
  const Reduction* reduction;
  bool contributes;
  uint64_t signature;
};

namespace {
constexpr size_t kControlBytes = 128;
size_t dataOffset(int ranks) { return alignUp(kHeaderBytes + ranks * kControlBytes, kPage); }
size_t totalBytes(int ranks, size_t slotBytes) {
  return dataOffset(ranks) + static_cast<size_t>(ranks) * 2 * slotBytes;
}
} // namespace

std::unique_ptr<HostArena> HostArena::create(int ranks, const ArenaOptions& options,
                                             std::string& name, std::string& why) {
  const size_t slotBytes = slotBytesOf(options);
  const size_t total = totalBytes(ranks, slotBytes);
  std::random_device random;
  char text[96];
  std::snprintf(text, sizeof(text), "/actorpipe-arena-%d-%08x%08x", static_cast<int>(::getpid()),
                random(), random());
  // TSan does not see shm_open create the descriptor (glibc opens it
  // internally) and would blame its close on the last user of that number.
  const int fd = transport::shm::seenBySanitizer(::shm_open(text, O_CREAT | O_EXCL | O_RDWR, 0600));
  if (fd < 0) {
    why = errnoText("shm_open");
    return nullptr;
  }
  // Reserve every page now: on a full /dev/shm a lazily touched page would
  // be a SIGBUS in the middle of a collective, this is an error up front.
  const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (reserved != 0) {
    why = std::string("reserving ") + std::to_string(total >> 20) + " MiB of shared memory: " +
          std::strerror(reserved);
    ::close(fd);
    ::shm_unlink(text);
    return nullptr;
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    why = errnoText("mmap");
    ::shm_unlink(text);
    return nullptr;
  }
  auto* header = static_cast<Header*>(base);
  header->magic = kMagic;
  header->version = kVersion;
  header->ranks = static_cast<uint32_t>(ranks);
  header->slotBytes = slotBytes;
  header->totalBytes = total;
  for (int r = 0; r < ranks; ++r) {
    new (static_cast<uint8_t*>(base) + kHeaderBytes + r * kControlBytes) Control{};
  }
  name = text;
  return std::unique_ptr<HostArena>(new HostArena(base, total, 0, ranks, options));
}

std::unique_ptr<HostArena> HostArena::open(const std::string& name, int rank, int ranks,
                                           const ArenaOptions& options, std::string& why) {
  const size_t slotBytes = slotBytesOf(options);
  const size_t total = totalBytes(ranks, slotBytes);
  const int fd = transport::shm::seenBySanitizer(::shm_open(name.c_str(), O_RDWR, 0));
  if (fd < 0) {
    why = errnoText(("shm_open " + name).c_str());
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != total) {
    why = name + " is not the size this rank expects (ranks or slot sizes differ)";
    ::close(fd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    why = errnoText("mmap");
    return nullptr;
  }
  const auto* header = static_cast<const Header*>(base);
  if (header->magic != kMagic || header->version != kVersion ||
      header->ranks != static_cast<uint32_t>(ranks) || header->slotBytes != slotBytes) {
    why = name + " does not describe this group";
    ::munmap(base, total);
    return nullptr;
  }
  return std::unique_ptr<HostArena>(new HostArena(base, total, rank, ranks, options));
}

void HostArena::unlink(const std::string& name) {
  if (!name.empty()) ::shm_unlink(name.c_str());
}

HostArena::HostArena(void* base, size_t bytes, int rank, int ranks, const ArenaOptions& options)
    : base_(static_cast<uint8_t*>(base)), bytes_(bytes), rank_(rank), ranks_(ranks),
      options_(options) {
  options_.slotBytes = slotBytesOf(options);
}

HostArena::~HostArena() { ::munmap(base_, bytes_); }

HostArena::Control& HostArena::control(int rank) const {
  static_assert(sizeof(Control) <= kControlBytes, "one control block per 128 bytes");
  return *reinterpret_cast<Control*>(base_ + kHeaderBytes + rank * kControlBytes);
}

uint8_t* HostArena::slot(int rank, uint32_t round) const {
  return base_ + dataOffset(ranks_) + (static_cast<size_t>(rank) * 2 + (round & 1)) * options_.slotBytes;
}

std::string HostArena::describe() const {
  return "host arena: " + std::to_string(ranks_) + " ranks, 2 x " +
         std::to_string(options_.slotBytes >> 10) + " KiB slots each, spin " +
         std::to_string(options_.spin.count()) + " us" +
         (options_.oversubscribed ? " yielding (more ranks than CPUs)" : "");
}

void HostArena::interrupt() {
  interrupted_.store(true);
  for (int r = 0; r < ranks_; ++r) {
    futexWake(control(r).arrived);
    futexWake(control(r).reduced);
  }
}

void HostArena::publish(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                        uint32_t value) {
  // seq_cst on both sides: either a waiter sees the new value, or we see it
  // counted itself as sleeping and wake it.
  word.store(value, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futexWake(word);
}

ArenaOutcome::Status HostArena::await(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                                      uint32_t round) {
  using Status = ArenaOutcome::Status;
  if (reached(word.load(std::memory_order_acquire), round)) return Status::kDone;
  // Spin first: the other rank is usually microseconds away, and a sleeping
  // rank costs a wake-up worth many small collectives.
  const auto spinUntil = Clock::now() + options_.spin;
  const uint32_t clockEvery = options_.oversubscribed ? 4 : 256;
  for (uint32_t turn = 1;; ++turn) {
    if (reached(word.load(std::memory_order_acquire), round)) return Status::kDone;
    if (interrupted_.load(std::memory_order_relaxed)) return Status::kInterrupted;
    if (options_.oversubscribed) {
      ::sched_yield();
    } else {
      cpuRelax();
    }
    if (turn % clockEvery == 0 && Clock::now() >= spinUntil) break;
  }
  // Then sleep, in slices: a failure elsewhere interrupts us, and the
  // deadline is checked at least every slice.
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    const auto now = Clock::now();
    if (!reached(seen, round) && !interrupted_.load() && now < deadline_) {
      futexWait(word, seen,
                std::min<std::chrono::nanoseconds>(deadline_ - now, std::chrono::milliseconds(10)));
    }
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(word.load(std::memory_order_acquire), round)) return Status::kDone;
    if (interrupted_.load()) return Status::kInterrupted;
    if (Clock::now() >= deadline_) return Status::kTimedOut;
  }
}

ArenaOutcome HostArena::allReduce(const std::vector<TensorView>& tensors, const Reduction& reduction,
                                  bool contributes, uint64_t call, Clock::time_point deadline) {
  deadline_ = deadline;
  ArenaOutcome outcome;
  bool first = true;
  auto runOne = [&](Round round) {
    round.number = ++round_;
    ArenaOutcome result = runRound(round);
    if (first || result.status != ArenaOutcome::Status::kDone) outcome = result;
    first = false;
    return result.status == ArenaOutcome::Status::kDone;
  };
  for (size_t t = 0; t < tensors.size(); ++t) {
    const TensorView& tensor = tensors[t];
    const size_t element = dtypeSize(tensor.dtype);
    const size_t perRound = options_.slotBytes / element;
    for (size_t offset = 0; offset < tensor.count; offset += perRound) {
      Round round{};
      round.data = static_cast<uint8_t*>(tensor.data) + offset * element;
      round.count = std::min(perRound, tensor.count - offset);
      round.dtype = tensor.dtype;
      round.reduction = &reduction;
      round.contributes = contributes;
      uint64_t signature = mix(mix(mix(call, t), tensor.count), offset);
      signature = mix(mix(signature, static_cast<uint64_t>(tensor.dtype)),
                      static_cast<uint64_t>(reduction.kind()));
      round.signature = signature;
      if (!runOne(round)) return outcome;
    }
  }
  if (first) {  // nothing to reduce (a barrier): still one round, so everyone meets
    Round round{};
    round.reduction = &reduction;
    round.contributes = contributes;
    round.signature = mix(call, 0xba77);
    runOne(round);
  }
  return outcome;
}

ArenaOutcome HostArena::runRound(const Round& round) {
  using Status = ArenaOutcome::Status;
  const uint32_t g = round.number;
  const uint32_t parity = g & 1;
  const size_t element = dtypeSize(round.dtype);
  const size_t bytes = round.count * element;
  const bool whole = bytes <= options_.wholeBytes;
  // Ranks configured with other thresholds would run different steps: the
  // signature tells them apart, and they fail instead of mixing bytes.
  const uint64_t signature = mix(round.signature, whole ? 1 : 2);
  // In "split", rank j folds elements [part(j), part(j + 1)).
  auto part = [&](int j) { return round.count * static_cast<size_t>(j) / ranks_ * element; };
  Control& mine = control(rank_);
  uint8_t* mySlot = slot(rank_, g);

  // 1-2: my contribution, then my arrival.
  if (round.contributes && bytes > 0) {
    if (whole) {
      std::memcpy(mySlot, round.data, bytes);
    } else {
      for (int j = 0; j < ranks_; ++j) {
        if (j != rank_) std::memcpy(mySlot + part(j), round.data + part(j), part(j + 1) - part(j));
      }
    }
  }
  mine.contributes[parity] = round.contributes ? 1 : 0;
  mine.signature[parity] = signature;
  publish(mine.arrived, mine.arrivedSleepers, g);

  // 3-4: fold, in rank order, as the others arrive: the first two
  // contributions in one pass (applyInto), then one more per contributor.
  // `into` is where the fold accumulates: the caller's bytes, unless (split)
  // my own input there still waits for its turn in the order, or a custom
  // reduction would have to write over its second operand: then my slot.
  const size_t from = whole ? 0 : part(rank_);
  const size_t length = whole ? bytes : part(rank_ + 1) - from;
  const size_t count = length / element;
  uint8_t* const myRange = round.data + from;
  const uint8_t* pending = nullptr;  // the first contribution, until the second arrives
  uint8_t* into = nullptr;
  int contributors = 0;
  bool mineFolded = !round.contributes;
  ArenaOutcome outcome;
  auto view = [&](const uint8_t* at) { return TensorView{const_cast<uint8_t*>(at), count, round.dtype}; };
  for (int j = 0; j < ranks_; ++j) {
    Control& theirs = control(j);
    if (j != rank_) {
      const Status status = await(theirs.arrived, theirs.arrivedSleepers, g);
      if (status != Status::kDone) {
        outcome.status = status;
        outcome.rank = j;
        return outcome;
      }
      if (theirs.signature[parity] != signature) {
        outcome.status = Status::kMismatch;
        outcome.rank = j;
        return outcome;
      }
    }
    if (!theirs.contributes[parity]) continue;
    ++contributors;
    if (length == 0) continue;
    // Rank j's bytes for my range: my own input where it still is.
    const uint8_t* source = (j == rank_ && !whole) ? myRange : slot(j, g) + from;
    if (j == rank_) mineFolded = true;
    if (!pending && !into) {
      pending = source;
    } else if (!into) {
      const bool overwritesSecond = source == myRange && pending != myRange;
      into = whole || (mineFolded && !(overwritesSecond && round.reduction->isCustom()))
                 ? myRange
                 : mySlot + from;
      round.reduction->applyInto(view(into), view(pending), view(source));
    } else {
      round.reduction->apply(view(into), view(source));
    }
  }
  if (length > 0) {
    if (!into) {
      into = myRange;  // one contribution at most: mine is already in place, or unused
      if (pending && pending != myRange) std::memcpy(into, pending, length);
      if (!pending) round.reduction->fillIdentity(view(into));
    }
    round.reduction->finish(view(into), contributors);
  }
  outcome.contributors = contributors;
  if (whole) return outcome;

  // 5-6: my part to the others, theirs to me.
  if (length > 0) {
    if (into == myRange) {
      std::memcpy(mySlot + from, into, length);
    } else {
      std::memcpy(myRange, into, length);
    }
  }
  publish(mine.reduced, mine.reducedSleepers, g);
  for (int j = 0; j < ranks_; ++j) {
    if (j == rank_) continue;
    Control& theirs = control(j);
    const Status status = await(theirs.reduced, theirs.reducedSleepers, g);
    if (status != Status::kDone) {
      outcome.status = status;
      outcome.rank = j;
      return outcome;
    }
    std::memcpy(round.data + part(j), slot(j, g) + part(j), part(j + 1) - part(j));
  }
  return outcome;
}

} // namespace actorpipe::group
