#include <actorpipe/actors/group/algorithm.h>

#include <actorpipe/actors/group/tree_core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorpipe::group {

// --- the ring all-reduce ----------------------------------------------------
//
// For large calls on one host. The chunks are dealt into N segments; in
// N - 1 reduce-scatter steps each rank adds its data to the partial sum it
// receives and passes it on, so rank r ends with the final value of
// segment r + 1, computed once, in one fixed order; in N - 1 all-gather
// steps the final segments travel round as bytes. Every rank moves
// 2 (N - 1) / N of the data and reduces 1 / N of it, all ranks at once,
// where the tree's root reduces everything. Results are bit-identical on
// every rank, as with the tree (each value is computed by one rank only).

bool TreeCore::useRing(size_t bytes) const {
  return plan.ring && ringNext_ != nullptr && bytes >= plan.ringThreshold;
}

size_t TreeCore::ringChunkBytes(size_t bytes) const {
  if (plan.ringChunkBytes) return plan.ringChunkBytes;
  // Each segment in about four pieces, so that steps overlap, of 256 KiB to
  // 1 MiB: smaller pieces pay the per-message cost too often, larger ones
  // overlap too little (docs/benchmarks-groups.md).
  const size_t n = static_cast<size_t>(info.worldSize);
  const size_t target = std::clamp<size_t>(bytes / (n * 4), size_t{256} << 10, size_t{1} << 20);
  const size_t perSegment = std::max<size_t>(1, (bytes / n + target - 1) / target);
  return std::max<size_t>(8, (bytes + n * perSegment - 1) / (n * perSegment));
}

namespace {

// Messages are numbered step * chunks + chunk.
class Ring final : public Algorithm {
 public:
  using Algorithm::Algorithm;

  void begin() override {
    const size_t n = static_cast<size_t>(info().worldSize);
    const size_t chunks = op_.chunks.size();
    const size_t mine = static_cast<size_t>(info().rank);
    segmentOf_.resize(chunks);
    size_t inMine = 0, inFinal = 0;
    for (size_t c = 0; c < chunks; ++c) {
      segmentOf_[c] = static_cast<int>(c * n / chunks);
      inMine += segmentOf_[c] == static_cast<int>(mine);
      inFinal += segmentOf_[c] == static_cast<int>((mine + 1) % n);
    }
    // Reduce-scatter brings every segment but ours, all-gather every final
    // segment but the one we finish.
    expected_ = (chunks - inMine) + (chunks - inFinal);
    const int contributors = op_.contributes ? 1 : 0;
    for (size_t c = 0; c < chunks; ++c) {
      if (segmentOf_[c] == static_cast<int>(mine)) send(0, c, contributors);
    }
  }

  bool involves(const Link& link) const override { return link.ringNext || link.ringPrev; }
  size_t expectedFrom(const Link& link) const override { return link.ringPrev ? expected_ : 0; }

  // Messages may overtake each other across steps.
  bool accepts(const Link&, uint64_t index) const override {
    const size_t steps = 2 * static_cast<size_t>(info().worldSize) - 2;
    return index < steps * op_.chunks.size();
  }

  void land(Link& link, uint64_t index, int contributors, Landing& landing) override {
    const size_t chunks = op_.chunks.size();
    const size_t step = index / chunks;
    const size_t c = index % chunks;
    const bool gathering = step + 1 >= static_cast<size_t>(info().worldSize);
    if (gathering || contributors > 0) landChunk(link, c, gathering, landing);
  }

  void onData(Link&, uint64_t index, int contributors) override {
    const size_t n = static_cast<size_t>(info().worldSize);
    const size_t chunks = op_.chunks.size();
    const size_t step = index / chunks;
    const size_t chunk = index % chunks;
    const size_t r = static_cast<size_t>(info().rank);
    // Which segment this step must bring: a check that both ends agree.
    const size_t expectedSegment =
        step + 1 < n ? (r + 2 * n - step - 1) % n : (r + 2 * n - (step - (n - 1))) % n;
    if (static_cast<size_t>(segmentOf_[chunk]) != expectedSegment) {
      fail(ACTORPIPE_ERROR(LogicError, "rank " + std::to_string(ringPrev().peer) +
                                           " sent chunk " + std::to_string(chunk) + " at ring step " +
                                           std::to_string(step) + ": ranks disagree on the ring"));
      return;
    }
    ++received_;
    if (step + 1 >= n) {  // all-gather: the final bytes are in place
      op_.contributors = contributors;
      if (step + 1 < 2 * n - 2) send(step + 1, chunk, contributors);
      return;
    }
    int count = op_.contributes ? 1 : 0;
    try {
      for (const auto& segment : op_.chunks[chunk].segments) {
        const TensorView& tensor = op_.tensors[segment.tensor];
        uint8_t* mine = bytesOf(tensor) + segment.offset;
        uint8_t* incoming = ringPrev().scratch.get() + segment.packed;
        if (contributors == 0) break;
        if (count == 0) {
          std::memcpy(mine, incoming, segment.length);
        } else {
          op_.reduction->apply(slice(tensor, segment, mine), slice(tensor, segment, incoming));
        }
      }
      count += contributors;
      if (step + 2 == n) {  // this rank finishes the chunk
        finishChunk(chunk, count);
        send(step + 1, chunk, count);
        return;
      }
    } catch (...) {
      reductionFailed();
      return;
    }
    send(step + 1, chunk, count);
  }

  bool allIn() const override { return received_ == expected_; }

 private:
  void send(size_t step, size_t chunk, int contributors) {
    // Partial sums without any contribution travel empty; final values always.
    const bool gathering = step + 1 >= static_cast<size_t>(info().worldSize);
    Message message = chunkMessage(chunk, contributors, gathering || contributors > 0);
    message.metadata = encode(LinkFrame::data(op_.sequence, step * op_.chunks.size() + chunk, contributors));
    write(ringNext(), std::move(message));
  }

  std::vector<int> segmentOf_;  // chunk -> segment
  size_t expected_{0};          // messages from the ring's previous rank
  size_t received_{0};
};

} // namespace

std::unique_ptr<Algorithm> makeRing(TreeCore& core, Operation& op) {
  return std::make_unique<Ring>(core, op);
}

} // namespace actorpipe::group
