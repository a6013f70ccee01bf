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

} // namespace

// Messages are numbered phaseStep * chunks + chunk: phaseStep k < L is the
// reduce-scatter step for bit L - 1 - k, L + b the all-gather step for bit b.
void TreeCore::beginHalving() {
  Operation& op = *operation_;
  const int steps = static_cast<int>(cube_.size());
  const size_t n = static_cast<size_t>(info.worldSize);
  const size_t chunks = op.chunks.size();
  op.segmentOf.resize(chunks);
  for (size_t c = 0; c < chunks; ++c) op.segmentOf[c] = static_cast<int>(c * n / chunks);
  op.halvingLevel.assign(chunks, 0);
  op.halvingTheirs.assign(steps, std::vector<int>(chunks, -1));
  op.halvingExpectedFrom.assign(steps, 0);
  // What each partner sends: for the reduce-scatter step over bit b, the
  // chunks we keep through it; in the all-gather over bit b, the final chunks
  // whose owner differs from us first in bit b.
  for (size_t c = 0; c < chunks; ++c) {
    const int segment = op.segmentOf[c];
    if (segment != info.rank) {
      const int bit = highestDifferingBit(segment, info.rank);
      ++op.halvingExpectedFrom[bit];
      // Kept through the steps for bits above `bit`: received at each.
      for (int b = steps - 1; b > bit; --b) ++op.halvingExpectedFrom[b];
    } else {
      for (int b = 0; b < steps; ++b) ++op.halvingExpectedFrom[b];
    }
  }
  op.ringExpected = 0;
  for (size_t count : op.halvingExpectedFrom) op.ringExpected += count;
  for (size_t c = 0; c < chunks; ++c) advanceHalving(c);
}

void TreeCore::sendHalving(size_t phaseStep, int bit, size_t chunk, int contributors) {
  const Operation& op = *operation_;
  const bool gathering = phaseStep >= cube_.size();
  Message message = chunkMessage(chunk, contributors, gathering || contributors > 0);
  message.metadata = encode(LinkFrame::data(op.sequence, phaseStep * op.chunks.size() + chunk, contributors));
  write(*cube_[bit], std::move(message));
}

// Takes `chunk` through every reduce-scatter step whose partner data is in,
// sends it on when it leaves us, and starts its all-gather once it is final.
void TreeCore::advanceHalving(size_t chunk) {
  Operation& op = *operation_;
  const int steps = static_cast<int>(cube_.size());
  const int segment = op.segmentOf[chunk];
  for (;;) {
    const int level = op.halvingLevel[chunk];
    if (level > steps) return;  // gone to a partner, or final and sent
    // Our partial count so far: ours plus every partner's combined before.
    int count = op.contributes ? 1 : 0;
    for (int k = 0; k < level; ++k) count += op.halvingTheirs[k][chunk];
    if (level == steps) {  // final here: finish it and spread it
      for (const auto& piece : op.chunks[chunk].segments) {
        const TensorView& tensor = op.tensors[piece.tensor];
        TensorView result = slice(tensor, piece, bytesOf(tensor) + piece.offset);
        if (count == 0) {
          op.reduction->fillIdentity(result);
        } else {
          op.reduction->finish(result, count);
        }
      }
      op.contributors = count;
      for (int b = 0; b < steps; ++b) sendHalving(steps + b, b, chunk, count);
      op.halvingLevel[chunk] = steps + 1;
      return;
    }
    const int bit = steps - 1 - level;
    const bool kept = ((segment >> bit) & 1) == ((info.rank >> bit) & 1);
    if (!kept) {
      sendHalving(level, bit, chunk, count);
      op.halvingLevel[chunk] = steps + 1;
      return;
    }
    const int theirs = op.halvingTheirs[level][chunk];
    if (theirs < 0) return;  // the partner's half has not arrived yet
    const bool lower = ((info.rank >> bit) & 1) == 0;  // our block comes first
    uint8_t* scratch = cube_[bit]->scratch.get();
    try {
      for (const auto& piece : op.chunks[chunk].segments) {
        if (theirs == 0) break;
        const TensorView& tensor = op.tensors[piece.tensor];
        uint8_t* own = bytesOf(tensor) + piece.offset;
        uint8_t* other = scratch + piece.packed;
        if (count == 0) {
          std::memcpy(own, other, piece.length);
        } else if (lower) {
          op.reduction->apply(slice(tensor, piece, own), slice(tensor, piece, other));
        } else {
          op.reduction->apply(slice(tensor, piece, other), slice(tensor, piece, own));
          std::memcpy(own, other, piece.length);
        }
      }
    } catch (const std::exception& e) {
      fail(ACTORPIPE_ERROR(LogicError, std::string("the reduction failed: ") + e.what()));
      return;
    }
    op.halvingLevel[chunk] = level + 1;
  }
}

void TreeCore::onHalvingData(const Link& link, size_t index, int contributors) {
  Operation& op = *operation_;
  const int steps = static_cast<int>(cube_.size());
  const size_t chunks = op.chunks.size();
  const int phaseStep = static_cast<int>(index / chunks);
  const size_t chunk = index % chunks;
  const int bit = phaseStep < steps ? steps - 1 - phaseStep : phaseStep - steps;
  if (bit != link.cubeStep) {
    fail(ACTORPIPE_ERROR(LogicError, "rank " + std::to_string(link.peer) +
                                         " sent a recursive-halving step for another partner"));
    return;
  }
  ++op.ringReceived;
  if (phaseStep >= steps) {  // all-gather: final bytes, now in place
    op.contributors = contributors;
    const int arrivedAt = bit;
    for (int b = arrivedAt + 1; b < steps; ++b) sendHalving(steps + b, b, chunk, contributors);
    return;
  }
  op.halvingTheirs[phaseStep][chunk] = contributors;
  advanceHalving(chunk);
}

} // namespace actorpipe::group
