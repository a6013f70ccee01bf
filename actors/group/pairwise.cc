// Algorithms where partners swap data and both compute the same expression:
// the exchange (two ranks) and recursive doubling (power-of-two groups).
#include <actorpipe/actors/group/algorithm.h>

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

namespace {

// Messages are numbered by chunk, in order, on the one link.
class Exchange final : public Algorithm {
 public:
  using Algorithm::Algorithm;

  void begin() override {
    const size_t chunks = op_.chunks.size();
    sent_.assign(chunks, 0);
    received_.assign(chunks, 0);
    theirs_.assign(chunks, 0);
    const int mine = op_.contributes ? 1 : 0;
    for (size_t c = 0; c < chunks && !op_.error; ++c) {
      write(peer(), chunkMessage(c, mine, mine > 0), [this, c] {
        sent_[c] = 1;
        settle(c);
      });
    }
  }

  bool involves(const Link& link) const override { return link.toParent || link.childIndex >= 0; }
  size_t expectedFrom(const Link& link) const override {
    return involves(link) ? op_.chunks.size() : 0;
  }
  bool accepts(const Link& link, uint64_t index) const override { return index == link.consumed; }

  void land(Link& link, uint64_t index, int contributors, Landing& landing) override {
    if (contributors > 0) landChunk(link, index, false, landing);
  }

  void onData(Link&, uint64_t chunk, int contributors) override {
    received_[chunk] = 1;
    theirs_[chunk] = contributors;
    settle(chunk);
  }

  bool allIn() const override { return final_ == op_.chunks.size(); }

 private:
  Link& peer() const { return *links().front(); }

  // Once ours left (the peer has pulled it: our memory is ours again) and
  // theirs is in.
  void settle(size_t chunk) {
    if (!sent_[chunk] || !received_[chunk] || op_.error) return;
    const int mine = op_.contributes ? 1 : 0;
    const int theirs = theirs_[chunk];
    const bool first = info().rank == 0;  // whose data is the accumulator
    uint8_t* scratch = peer().scratch.get();
    try {
      for (const auto& segment : op_.chunks[chunk].segments) {
        const TensorView& tensor = op_.tensors[segment.tensor];
        uint8_t* own = bytesOf(tensor) + segment.offset;
        uint8_t* other = theirs > 0 ? scratch + segment.packed : nullptr;
        if (theirs > 0 && mine == 0) {
          std::memcpy(own, other, segment.length);
        } else if (theirs > 0 && first) {
          op_.reduction->apply(slice(tensor, segment, own), slice(tensor, segment, other));
        } else if (theirs > 0) {
          op_.reduction->apply(slice(tensor, segment, other), slice(tensor, segment, own));
          std::memcpy(own, other, segment.length);
        }
        TensorView result = slice(tensor, segment, own);
        if (mine + theirs == 0) {
          op_.reduction->fillIdentity(result);
        } else {
          op_.reduction->finish(result, mine + theirs);
        }
      }
    } catch (...) {
      reductionFailed();
      return;
    }
    op_.contributors = mine + theirs;
    ++final_;
  }

  std::vector<char> sent_;
  std::vector<char> received_;
  std::vector<int> theirs_;
  size_t final_{0};
};

} // namespace

std::unique_ptr<Algorithm> makeExchange(TreeCore& core, Operation& op) {
  return std::make_unique<Exchange>(core, op);
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

namespace {

// One chunk; the message of step k, numbered k, comes from partner k.
class Doubling final : public Algorithm {
 public:
  using Algorithm::Algorithm;

  void begin() override {
    const size_t steps = cube().size();
    sent_.assign(steps, 0);
    received_.assign(steps, 0);
    theirs_.assign(steps, 0);
    count_ = op_.contributes ? 1 : 0;
    send(0);
  }

  bool involves(const Link& link) const override { return link.cubeStep >= 0; }
  size_t expectedFrom(const Link& link) const override { return link.cubeStep >= 0 ? 1 : 0; }
  bool accepts(const Link& link, uint64_t index) const override {
    return index == static_cast<uint64_t>(link.cubeStep);
  }

  void land(Link& link, uint64_t, int contributors, Landing& landing) override {
    if (contributors > 0) landChunk(link, 0, false, landing);
  }

  void onData(Link&, uint64_t step, int contributors) override {
    received_[step] = 1;
    theirs_[step] = contributors;
    advance();
  }

  bool allIn() const override { return done_; }

 private:
  void send(size_t step) {
    Message message = chunkMessage(0, count_, count_ > 0);
    message.metadata = encode(LinkFrame::data(op_.sequence, step, count_));
    write(*cube()[step], std::move(message), [this, step] {
      sent_[step] = 1;
      advance();
    });
  }

  void advance() {
    const size_t steps = cube().size();
    while (!op_.error && at_ < steps && sent_[at_] && received_[at_]) {
      const size_t step = at_;
      const int theirs = theirs_[step];
      const bool lower = (info().rank & (1 << step)) == 0;  // our block comes first
      uint8_t* scratch = cube()[step]->scratch.get();
      try {
        for (const auto& segment : op_.chunks[0].segments) {
          const TensorView& tensor = op_.tensors[segment.tensor];
          uint8_t* own = bytesOf(tensor) + segment.offset;
          uint8_t* other = theirs > 0 ? scratch + segment.packed : nullptr;
          if (theirs == 0) continue;
          if (count_ == 0) {
            std::memcpy(own, other, segment.length);
          } else if (lower) {
            op_.reduction->apply(slice(tensor, segment, own), slice(tensor, segment, other));
          } else {
            op_.reduction->apply(slice(tensor, segment, other), slice(tensor, segment, own));
            std::memcpy(own, other, segment.length);
          }
        }
        count_ += theirs;
        ++at_;
        if (at_ == steps) {
          finishChunk(0, count_);
          done_ = true;
        }
      } catch (...) {
        reductionFailed();
        return;
      }
      if (at_ < steps) send(at_);
    }
  }

  // Per step: whether our send is done and the partner's data is in.
  std::vector<char> sent_;
  std::vector<char> received_;
  std::vector<int> theirs_;
  size_t at_{0};
  int count_{0};  // contributors in our partial result
  bool done_{false};
};

} // namespace

std::unique_ptr<Algorithm> makeDoubling(TreeCore& core, Operation& op) {
  return std::make_unique<Doubling>(core, op);
}

} // namespace actorpipe::group
