#pragma once
// The ranks of one host all-reduce through one shared-memory segment, on the
// caller's own thread, instead of through their pipes.
//
// Why: a pipe message costs a hand-off between the caller and its loop
// thread and a wake-up on the receiving side (~40 µs each way across vCPUs,
// docs/machine.md). A collective on one host needs neither: every rank
// maps the same segment, copies its contribution into its own slot, raises a
// flag, and spins briefly on the others' flags (then sleeps on a futex, so an
// idle group costs nothing). The pipes stay up: they formed the group, they
// carry the segment's name, and their failures (a dead rank) interrupt any
// wait here (TreeCore::fail → interrupt()).
//
// Layout: a header, one control block per rank (its flags on their own cache
// lines), then two slots per rank (rounds alternate between them, so round
// g+1's copy-in never overwrites what a slower rank still reads from round g).
//
// A call is cut into rounds of at most slotBytes per tensor. Per round g:
//
//   whole (small rounds)          split (large rounds)
//   1 copy mine into my slot      1 copy the parts others own into my slot
//   2 arrived[me] = g             2 arrived[me] = g
//   3 wait arrived[j] >= g, all   3 wait arrived[j] >= g, all
//   4 fold every slot, in rank    4 fold my part from every slot, in rank
//     order, into my tensor         order, and put it in my slot
//                                 5 reduced[me] = g
//                                 6 wait reduced[j] >= g, copy j's part out
//
// No step waits for a slot to be free: a rank that raised arrived = g+1 has
// finished round g-1, and every rank reaches round g+1's copy only after
// seeing all arrivals of round g. Results are bit-identical on every rank:
// in "whole" every rank folds the same bytes in the same order; in "split"
// each part is folded by exactly one rank and copied as bytes.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/actors/group/tensor.h>

namespace actorpipe::group {

struct ArenaOptions {
  size_t slotBytes{size_t{1} << 20};   // per rank and slot; rounds are at most this long
  size_t wholeBytes{size_t{16} << 10}; // rounds up to this size are folded by every rank
  // How long a wait spins before it sleeps on a futex. More ranks than CPUs:
  // the spin yields the CPU at each turn (the rank it waits for may need it).
  std::chrono::microseconds spin{100};
  bool oversubscribed{false};
};

// What one allReduce on the arena came to.
struct ArenaOutcome {
  enum class Status { kDone, kInterrupted, kTimedOut, kMismatch };
  Status status{Status::kDone};
  int rank{-1};         // kTimedOut: the rank waited for; kMismatch: the rank that differs
  int contributors{0};  // kDone
};

class HostArena {
 public:
  // Rank 0 creates the segment (a fresh POSIX shared-memory name); the others
  // open it by that name. Both fail with a readable reason, never abort.
  static std::unique_ptr<HostArena> create(int ranks, const ArenaOptions& options,
                                           std::string& name, std::string& why);
  static std::unique_ptr<HostArena> open(const std::string& name, int rank, int ranks,
                                         const ArenaOptions& options, std::string& why);
  // Removes the name (rank 0, once every rank has it mapped): the memory
  // then lives exactly as long as the last mapping.
  static void unlink(const std::string& name);

  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // Every rank calls this with the same shapes, reduction and `call` number.
  ArenaOutcome allReduce(const std::vector<TensorView>& tensors, const Reduction& reduction,
                         bool contributes, uint64_t call,
                         std::chrono::steady_clock::time_point deadline);
  // From any thread: ends the current and every later wait (the group failed).
  void interrupt();

  std::string describe() const;

 private:
  struct Control;
  struct Round;
  HostArena(void* base, size_t bytes, int rank, int ranks, const ArenaOptions& options);
  Control& control(int rank) const;
  uint8_t* slot(int rank, uint32_t round) const;
  ArenaOutcome runRound(const Round& round);
  void publish(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, uint32_t value);
  ArenaOutcome::Status await(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                             uint32_t round);

  uint8_t* base_;
  size_t bytes_;
  int rank_;
  int ranks_;
  ArenaOptions options_;
  uint32_t round_{0};  // the last round this rank took part in
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<bool> interrupted_{false};
};

} // namespace actorpipe::group
