// Recursive halving and doubling (Rabenseifner's all-reduce), for large calls
// among a power-of-two group of 4 or more on one host, over the recursive
// doubling partners (r xor 2^b).
//
// The chunks are dealt into N segments, as for the ring. Reduce-scatter, bit
// by bit from the highest: at the step for bit b, a rank keeps the half of
// its current segments whose bit b matches its own, sends the other half to
// its partner across b, and combines what the partner sends for the kept
// half, the block whose bit b is 0 first. After log2 N steps rank r holds
// segment r, computed once, by a fixed expression. All-gather, bit by bit
// from the lowest: each rank sends every final segment it holds to its
// partner across b, so the bytes spread until every rank has them all.
// Each rank moves the same bytes as on the ring in 2 log2 N steps instead
// of 2 (N - 1).
#include <actorpipe/actors/group/algorithm.h>

#include <actorpipe/actors/group/tree_core.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorpipe::group {

bool TreeCore::useHalving(size_t bytes) const {
  return plan.halving && !cube_.empty() && useRing(bytes);
}

namespace {

// The highest bit in which two ranks differ (they must differ).
int highestDifferingBit(int a, int b) {
  int bit = 0;
  for (int x = a ^ b; x > 1; x >>= 1) ++bit;
  return bit;
}

// Messages are numbered phaseStep * chunks + chunk: phaseStep k < L is the
// reduce-scatter step for bit L - 1 - k, L + b the all-gather step for bit b.
class Halving final : public Algorithm {
 public:
  using Algorithm::Algorithm;

  void begin() override {
    const int steps = static_cast<int>(cube().size());
    const size_t n = static_cast<size_t>(info().worldSize);
    const size_t chunks = op_.chunks.size();
    segmentOf_.resize(chunks);
    for (size_t c = 0; c < chunks; ++c) segmentOf_[c] = static_cast<int>(c * n / chunks);
    level_.assign(chunks, 0);
    theirs_.assign(steps, std::vector<int>(chunks, -1));
    expectedFrom_.assign(steps, 0);
    // What each partner sends: for the reduce-scatter step over bit b, the
    // chunks we keep through it; in the all-gather over bit b, the final
    // chunks whose owner differs from us first in bit b.
    for (size_t c = 0; c < chunks; ++c) {
      const int segment = segmentOf_[c];
      if (segment != info().rank) {
        const int bit = highestDifferingBit(segment, info().rank);
        ++expectedFrom_[bit];
        // Kept through the steps for bits above `bit`: received at each.
        for (int b = steps - 1; b > bit; --b) ++expectedFrom_[b];
      } else {
        for (int b = 0; b < steps; ++b) ++expectedFrom_[b];
      }
    }
    expected_ = 0;
    for (size_t count : expectedFrom_) expected_ += count;
    for (size_t c = 0; c < chunks; ++c) advance(c);
  }

  bool involves(const Link& link) const override { return link.cubeStep >= 0; }
  size_t expectedFrom(const Link& link) const override {
    return link.cubeStep >= 0 ? expectedFrom_[link.cubeStep] : 0;
  }
  bool accepts(const Link&, uint64_t index) const override {
    return index < 2 * cube().size() * op_.chunks.size();
  }

  void land(Link& link, uint64_t index, int contributors, Landing& landing) override {
    const size_t chunks = op_.chunks.size();
    const size_t step = index / chunks;
    const size_t c = index % chunks;
    const bool gathering = step >= cube().size();
    if (gathering || contributors > 0) landChunk(link, c, gathering, landing);
  }

  void onData(Link& link, uint64_t index, int contributors) override {
    const int steps = static_cast<int>(cube().size());
    const size_t chunks = op_.chunks.size();
    const int phaseStep = static_cast<int>(index / chunks);
    const size_t chunk = index % chunks;
    const int bit = phaseStep < steps ? steps - 1 - phaseStep : phaseStep - steps;
    if (bit != link.cubeStep) {
      fail(ACTORPIPE_ERROR(LogicError, "rank " + std::to_string(link.peer) +
                                           " sent a recursive-halving step for another partner"));
      return;
    }
    ++received_;
    if (phaseStep >= steps) {  // all-gather: final bytes, now in place
      op_.contributors = contributors;
      for (int b = bit + 1; b < steps; ++b) send(steps + b, b, chunk, contributors);
      return;
    }
    theirs_[phaseStep][chunk] = contributors;
    advance(chunk);
  }

  bool allIn() const override { return received_ == expected_; }

 private:
  void send(size_t phaseStep, int bit, size_t chunk, int contributors) {
    const bool gathering = phaseStep >= cube().size();
    Message message = chunkMessage(chunk, contributors, gathering || contributors > 0);
    message.metadata =
        encode(LinkFrame::data(op_.sequence, phaseStep * op_.chunks.size() + chunk, contributors));
    write(*cube()[bit], std::move(message));
  }

  // Takes `chunk` through every reduce-scatter step whose partner data is
  // in, sends it on when it leaves us, and starts its all-gather once it is
  // final.
  void advance(size_t chunk) {
    const int steps = static_cast<int>(cube().size());
    const int segment = segmentOf_[chunk];
    const int rank = info().rank;
    for (;;) {
      const int level = level_[chunk];
      if (level > steps) return;  // gone to a partner, or final and sent
      // Our partial count so far: ours plus every partner's combined before.
      int count = op_.contributes ? 1 : 0;
      for (int k = 0; k < level; ++k) count += theirs_[k][chunk];
      if (level == steps) {  // final here: finish it and spread it
        try {
          finishChunk(chunk, count);
        } catch (...) {
          reductionFailed();
          return;
        }
        for (int b = 0; b < steps; ++b) send(steps + b, b, chunk, count);
        level_[chunk] = steps + 1;
        return;
      }
      const int bit = steps - 1 - level;
      const bool kept = ((segment >> bit) & 1) == ((rank >> bit) & 1);
      if (!kept) {
        send(level, bit, chunk, count);
        level_[chunk] = steps + 1;
        return;
      }
      const int theirs = theirs_[level][chunk];
      if (theirs < 0) return;  // the partner's half has not arrived yet
      const bool lower = ((rank >> bit) & 1) == 0;  // our block comes first
      uint8_t* partial = cube()[bit]->scratch.get();
      try {
        for (const auto& piece : op_.chunks[chunk].segments) {
          if (theirs == 0) break;
          const TensorView& tensor = op_.tensors[piece.tensor];
          uint8_t* own = bytesOf(tensor) + piece.offset;
          uint8_t* other = partial + piece.packed;
          if (count == 0) {
            std::memcpy(own, other, piece.length);
          } else if (lower) {
            op_.reduction->apply(slice(tensor, piece, own), slice(tensor, piece, other));
          } else {
            op_.reduction->apply(slice(tensor, piece, other), slice(tensor, piece, own));
            std::memcpy(own, other, piece.length);
          }
        }
      } catch (...) {
        reductionFailed();
        return;
      }
      level_[chunk] = level + 1;
    }
  }

  std::vector<int> segmentOf_;  // chunk -> segment
  // Per chunk, how many reduce-scatter steps it went through; per step and
  // chunk the partner's contributor count once its data is in (-1 before).
  std::vector<int> level_;
  std::vector<std::vector<int>> theirs_;
  std::vector<size_t> expectedFrom_;  // per doubling partner (bit)
  size_t expected_{0};
  size_t received_{0};
};

} // namespace

std::unique_ptr<Algorithm> makeHalving(TreeCore& core, Operation& op) {
  return std::make_unique<Halving>(core, op);
}

} // namespace actorpipe::group
