// What every algorithm shares (algorithm.h), the tree's own steps (an
// all-reduce's contributions climb to rank 0 and results descend; broadcast
// and scatter only descend), and when a call is done.
#include <actorpipe/actors/group/algorithm.h>

#include <actorpipe/actors/group/tree_core.h>
#include <actorpipe/runtime/detail/log.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorpipe::group {

// --- what the algorithms share ----------------------------------------------

const RankInfo& Algorithm::info() const { return core_.info; }
const TreeNode& Algorithm::me() const { return core_.me(); }
const std::vector<TreeNode>& Algorithm::tree() const { return core_.tree; }
const std::vector<std::unique_ptr<Link>>& Algorithm::links() const { return core_.links_; }
Link& Algorithm::ringNext() const { return *core_.ringNext_; }
Link& Algorithm::ringPrev() const { return *core_.ringPrev_; }
const std::vector<Link*>& Algorithm::cube() const { return core_.cube_; }

void Algorithm::write(Link& link, Message message, std::function<void()> sent) {
  core_.write(link, std::move(message), std::move(sent));
}

Message Algorithm::chunkMessage(size_t chunk, int contributors, bool withTensors) const {
  return core_.chunkMessage(chunk, contributors, withTensors);
}

void Algorithm::fail(Error error) { core_.fail(std::move(error)); }

void Algorithm::reductionFailed() {
  fail(ACTORPIPE_ERROR(LogicError, "the reduction failed: " + ::actorpipe::detail::describeThrown()));
}

void Algorithm::finishChunk(size_t chunk, int contributors) {
  for (const auto& segment : op_.chunks[chunk].segments) {
    const TensorView& tensor = op_.tensors[segment.tensor];
    TensorView result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
    if (contributors == 0) {
      op_.reduction->fillIdentity(result);
    } else {
      op_.reduction->finish(result, contributors);
    }
  }
  op_.contributors = contributors;
}

uint8_t* Algorithm::scratch(Link& link, size_t bytes) {
  bytes = std::max(bytes, op_.scratchBytes);
  if (link.scratchBytes < bytes) {
    link.scratch.reset(new uint8_t[bytes]);
    link.scratchBytes = bytes;
  }
  return link.scratch.get();
}

void Algorithm::landChunk(Link& link, size_t chunk, bool inPlace, Landing& landing) {
  uint8_t* packed = inPlace ? nullptr : scratch(link, op_.totalBytes);
  for (const auto& segment : op_.chunks[chunk].segments) {
    landing.add(inPlace ? bytesOf(op_.tensors[segment.tensor]) + segment.offset
                        : packed + segment.packed,
                segment.length);
  }
}

Message TreeCore::chunkMessage(size_t chunk, int contributors, bool withTensors) const {
  const Operation& op = *operation_;
  Message message;
  message.metadata = encode(LinkFrame::data(op.sequence, chunk, contributors));
  if (withTensors) {
    for (const auto& segment : op.chunks[chunk].segments) {
      message.tensors.push_back(
          outgoing(bytesOf(op.tensors[segment.tensor]) + segment.offset, segment.length));
    }
  }
  return message;
}

void TreeCore::write(Link& link, Message message, std::function<void()> sent) {
  std::shared_ptr<Operation> op = operation_;
  ++op->pendingWrites;
  std::weak_ptr<TreeCore> weak = shared_from_this();
  Link* target = &link;
  link.pipe->write(std::move(message), [weak, target, op, sent](const Error& error) {
    auto self = weak.lock();
    if (!self) return;
    self->dispatch([self, target, op, sent, error] {
      --op->pendingWrites;
      if (self->closing_) return;
      if (error) {
        // The peer may have failed the group and told us so on this link's
        // other direction: when a descriptor is on its way, let it decide
        // whom to blame (the abort notice, or the connection's end).
        if (target->readingDescriptor) return;
        self->failLink(*target, error);
        return;
      }
      if (op != self->operation_) return;
      if (sent && !op->error) sent();
      self->checkFinished();
    });
  });
}

void TreeCore::checkFinished() {
  if (!operation_) return;
  Operation& op = *operation_;
  if (op.finished || op.error) return;
  if (op.algorithm->allIn() && op.pendingWrites == 0) op.finished = true;  // afterEvent() ends the call
}

// --- the tree ---------------------------------------------------------------

namespace {

class TreeSteps final : public Algorithm {
 public:
  using Algorithm::Algorithm;

  void begin() override {
    const size_t chunks = op_.chunks.size();
    switch (op_.kind) {
      case Operation::Kind::kAllReduce:
        childrenDelivered_.assign(chunks, 0);
        childContributors_.assign(me().children.size(), std::vector<int>(chunks, 0));
        if (me().children.empty()) {
          while (!op_.error && climbed_ < chunks) climb(climbed_++);
        }
        break;
      case Operation::Kind::kBroadcast:
        if (me().parent < 0) {
          for (size_t c = 0; c < chunks; ++c) descend(c);
          final_ = chunks;
        }
        break;
      case Operation::Kind::kScatter:
        beginScatter();
        break;
    }
  }

  bool involves(const Link& link) const override { return link.toParent || link.childIndex >= 0; }

  size_t expectedFrom(const Link& link) const override {
    if (!involves(link)) return 0;
    switch (op_.kind) {
      case Operation::Kind::kAllReduce: return op_.chunks.size();
      case Operation::Kind::kBroadcast: return link.toParent ? op_.chunks.size() : 0;
      case Operation::Kind::kScatter: return link.toParent ? 1 : 0;
    }
    return 0;
  }

  // Tree messages come in chunk order.
  bool accepts(const Link& link, uint64_t index) const override { return index == link.consumed; }

  void land(Link& link, uint64_t index, int contributors, Landing& landing) override {
    if (op_.kind == Operation::Kind::kScatter) {
      const size_t share = op_.tensors[0].bytes();
      uint8_t* rest = scratch(link, share * subtree_.size());
      for (size_t i = 0; i < subtree_.size(); ++i) {
        landing.add(i == 0 ? op_.tensors[0].data : rest + (i - 1) * share, share);
      }
    } else if (link.toParent || contributors > 0) {
      landChunk(link, index, link.toParent, landing);
    }
  }

  void onData(Link& link, uint64_t chunk, int contributors) override {
    switch (op_.kind) {
      case Operation::Kind::kAllReduce:
        if (!link.toParent) {
          ++childrenDelivered_[chunk];
          childContributors_[link.childIndex][chunk] = contributors;
          const int children = static_cast<int>(me().children.size());
          while (!op_.error && climbed_ < op_.chunks.size() &&
                 childrenDelivered_[climbed_] == children) {
            climb(climbed_++);
          }
        } else {
          op_.contributors = contributors;
          descend(chunk);
          ++final_;
        }
        break;
      case Operation::Kind::kBroadcast:
        descend(chunk);
        ++final_;
        break;
      case Operation::Kind::kScatter: {
        const size_t share = op_.tensors[0].bytes();
        for (auto& child : links()) {
          if (child->childIndex < 0) continue;
          Message message;
          message.metadata = encode(LinkFrame::data(op_.sequence, 0, 0));
          for (int rank : subtreeOf(tree(), child->peer)) {
            size_t index = 0;
            while (subtree_[index] != rank) ++index;
            message.tensors.push_back(outgoing(link.scratch.get() + (index - 1) * share, share));
          }
          write(*child, std::move(message));
        }
        ++final_;
        break;
      }
    }
  }

  bool allIn() const override {
    return final_ == (op_.kind == Operation::Kind::kScatter ? 1 : op_.chunks.size());
  }

 private:
  // This rank's data for `chunk`, combined with its children's in child
  // order, goes up (or, at the root, becomes the result and goes down).
  void climb(size_t chunk) {
    int contributors = op_.contributes ? 1 : 0;
    try {
      for (const auto& link : links()) {
        if (link->childIndex < 0) continue;
        const int theirs = childContributors_[link->childIndex][chunk];
        if (theirs == 0) continue;
        for (const auto& segment : op_.chunks[chunk].segments) {
          const TensorView& tensor = op_.tensors[segment.tensor];
          uint8_t* mine = bytesOf(tensor) + segment.offset;
          uint8_t* incoming = link->scratch.get() + segment.packed;
          if (contributors == 0) {
            std::memcpy(mine, incoming, segment.length);
          } else {
            op_.reduction->apply(slice(tensor, segment, mine), slice(tensor, segment, incoming));
          }
        }
        contributors += theirs;
      }
      if (me().parent < 0) finishChunk(chunk, contributors);
    } catch (...) {
      reductionFailed();
      return;
    }
    if (me().parent < 0) {
      descend(chunk);
      ++final_;
    } else {
      write(*links().front(), chunkMessage(chunk, contributors, contributors > 0));
    }
  }

  void descend(size_t chunk) {
    for (auto& link : links()) {
      if (link->childIndex >= 0) write(*link, chunkMessage(chunk, op_.contributors, true));
    }
  }

  void beginScatter() {
    subtree_ = subtreeOf(tree(), info().rank);
    if (me().parent >= 0) return;  // waits for its share from the parent
    const TensorView& mine = op_.tensors[0];
    if (op_.perRank.size() != static_cast<size_t>(info().worldSize)) {
      fail(ACTORPIPE_ERROR(LogicError, "scatter at rank 0 needs one tensor per rank (" +
                                           std::to_string(info().worldSize) + "), got " +
                                           std::to_string(op_.perRank.size())));
      return;
    }
    for (const auto& tensor : op_.perRank) {
      if (tensor.bytes() != mine.bytes()) {
        fail(ACTORPIPE_ERROR(LogicError, "scatter's tensors must all be shaped like the receiving one"));
        return;
      }
    }
    if (op_.perRank[0].data != mine.data) std::memcpy(mine.data, op_.perRank[0].data, mine.bytes());
    for (auto& link : links()) {
      if (link->childIndex < 0) continue;
      Message message;
      message.metadata = encode(LinkFrame::data(op_.sequence, 0, 0));
      for (int rank : subtreeOf(tree(), link->peer)) {
        message.tensors.push_back(outgoing(op_.perRank[rank].data, mine.bytes()));
      }
      write(*link, std::move(message));
    }
    final_ = 1;
  }

  // All-reduce, climbing: per chunk, how many children delivered it, and
  // each child's contributor count for it.
  std::vector<int> childrenDelivered_;
  std::vector<std::vector<int>> childContributors_;
  size_t climbed_{0};
  size_t final_{0};  // chunks whose result is in place here
  std::vector<int> subtree_;  // scatter: this rank's subtree, itself first
};

} // namespace

std::unique_ptr<Algorithm> makeTreeSteps(TreeCore& core, Operation& op) {
  return std::make_unique<TreeSteps>(core, op);
}

} // namespace actorpipe::group
