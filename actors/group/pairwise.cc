// Algorithms where partners swap data and both compute the same expression:
// the exchange (two ranks) and recursive doubling (power-of-two groups).
#include <actorpipe/actors/group/tree_core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorpipe::group {

// --- the exchange (two ranks, small calls) ----------------------------------
//
// One trip instead of the tree's two: both ranks send their data at once and
// both compute rank 0's data op rank 1's data, the same expression in the
// same order, so the results are bit-identical.

bool TreeCore::useExchange(size_t bytes) const {
  if (!plan.exchange || info.worldSize != 2 || links_.size() != 1) return false;
  return !useRing(bytes);
}

void TreeCore::beginExchange() {
  Operation& op = *operation_;
  const size_t chunks = op.chunks.size();
  op.exchangeSent.assign(chunks, 0);
  op.exchangeReceived.assign(chunks, 0);
  op.exchangeTheirs.assign(chunks, 0);
  const int mine = op.contributes ? 1 : 0;
  for (size_t c = 0; c < chunks && !op.error; ++c) {
    write(*links_.front(), chunkMessage(c, mine, mine > 0), [this, c] {
      operation_->exchangeSent[c] = 1;
      settleExchange(c);
    });
  }
}

void TreeCore::settleExchange(size_t chunk) {
  Operation& op = *operation_;
  if (!op.exchangeSent[chunk] || !op.exchangeReceived[chunk] || op.error) return;
  const int mine = op.contributes ? 1 : 0;
  const int theirs = op.exchangeTheirs[chunk];
  const bool first = info.rank == 0;  // whose data is the accumulator
  uint8_t* scratch = links_.front()->scratch.get();
  try {
    for (const auto& segment : op.chunks[chunk].segments) {
      const TensorView& tensor = op.tensors[segment.tensor];
      uint8_t* own = bytesOf(tensor) + segment.offset;
      uint8_t* other = theirs > 0 ? scratch + segment.packed : nullptr;
      if (theirs > 0 && mine == 0) {
        std::memcpy(own, other, segment.length);
      } else if (theirs > 0 && first) {
        op.reduction->apply(slice(tensor, segment, own), slice(tensor, segment, other));
      } else if (theirs > 0) {
        op.reduction->apply(slice(tensor, segment, other), slice(tensor, segment, own));
        std::memcpy(own, other, segment.length);
      }
      TensorView result = slice(tensor, segment, own);
      if (mine + theirs == 0) {
        op.reduction->fillIdentity(result);
      } else {
        op.reduction->finish(result, mine + theirs);
      }
    }
  } catch (const std::exception& e) {
    fail(ACTORPIPE_ERROR(LogicError, std::string("the reduction failed: ") + e.what()));
    return;
  }
  op.contributors = mine + theirs;
  ++op.chunksFinal;
}

// --- recursive doubling (power-of-two ranks on one host, small calls) -------
//
// log2 N exchanges instead of the tree's 2 log2 N hops. At step k, rank r
// swaps its partial result with r xor 2^k, and both compute the lower
// block's partial op the higher block's: the same expression in the same
// order on both, so after the last step every rank holds bytes identical to
// every other's.

// Above a few tens of KiB, sending the whole call at every step costs more
// than the hops it saves (docs/benchmarks-groups.md).
bool TreeCore::useDoubling(size_t bytes, size_t chunks) const {
  return plan.doubling && !cube_.empty() && chunks == 1 && bytes <= plan.doublingThreshold;
}

void TreeCore::beginDoubling() {
  Operation& op = *operation_;
  const size_t steps = cube_.size();
  op.cubeSent.assign(steps, 0);
  op.cubeReceived.assign(steps, 0);
  op.cubeTheirs.assign(steps, 0);
  op.cubeAt = 0;
  op.cubeCount = op.contributes ? 1 : 0;
  sendCube(0);
}

void TreeCore::sendCube(size_t step) {
  Operation& op = *operation_;
  Message message = chunkMessage(0, op.cubeCount, op.cubeCount > 0);
  message.metadata = encode(LinkFrame::data(op.sequence, step, op.cubeCount));
  write(*cube_[step], std::move(message), [this, step] {
    operation_->cubeSent[step] = 1;
    advanceCube();
  });
}

void TreeCore::advanceCube() {
  Operation& op = *operation_;
  const size_t steps = cube_.size();
  while (!op.error && op.cubeAt < steps && op.cubeSent[op.cubeAt] && op.cubeReceived[op.cubeAt]) {
    const size_t step = op.cubeAt;
    const int theirs = op.cubeTheirs[step];
    const bool lower = (info.rank & (1 << step)) == 0;  // our block comes first
    uint8_t* scratch = cube_[step]->scratch.get();
    try {
      for (const auto& segment : op.chunks[0].segments) {
        const TensorView& tensor = op.tensors[segment.tensor];
        uint8_t* own = bytesOf(tensor) + segment.offset;
        uint8_t* other = theirs > 0 ? scratch + segment.packed : nullptr;
        if (theirs == 0) continue;
        if (op.cubeCount == 0) {
          std::memcpy(own, other, segment.length);
        } else if (lower) {
          op.reduction->apply(slice(tensor, segment, own), slice(tensor, segment, other));
        } else {
          op.reduction->apply(slice(tensor, segment, other), slice(tensor, segment, own));
          std::memcpy(own, other, segment.length);
        }
      }
      op.cubeCount += theirs;
      ++op.cubeAt;
      if (op.cubeAt == steps) {
        for (const auto& segment : op.chunks[0].segments) {
          const TensorView& tensor = op.tensors[segment.tensor];
          TensorView result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
          if (op.cubeCount == 0) {
            op.reduction->fillIdentity(result);
          } else {
            op.reduction->finish(result, op.cubeCount);
          }
        }
        op.contributors = op.cubeCount;
        op.chunksFinal = 1;
      }
    } catch (const std::exception& e) {
      fail(ACTORPIPE_ERROR(LogicError, std::string("the reduction failed: ") + e.what()));
      return;
    }
    if (op.cubeAt < steps) sendCube(op.cubeAt);
  }
}

} // namespace actorpipe::group
