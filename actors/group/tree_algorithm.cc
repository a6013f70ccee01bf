// The tree's steps (contributions climb to rank 0, results descend;
// broadcast and scatter only descend), and what every algorithm shares:
// begin() picks the algorithm's first step, write() counts what is in
// flight, checkFinished() says when a call is done.
#include <actorpipe/actors/group/tree_core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace actorpipe::group {

// --- the collectives' steps -------------------------------------------------

void TreeCore::onData(Link& link, size_t chunk, int contributors) {
  if (!operation_ || operation_->error) return;
  Operation& op = *operation_;
  if (op.ring) {
    onRingData(chunk, contributors);
    checkFinished();
    return;
  }
  if (op.halving) {
    onHalvingData(link, chunk, contributors);
    checkFinished();
    return;
  }
  if (op.doubling) {
    op.cubeReceived[chunk] = 1;
    op.cubeTheirs[chunk] = contributors;
    advanceCube();
    checkFinished();
    return;
  }
  if (op.exchange) {
    op.exchangeReceived[chunk] = 1;
    op.exchangeTheirs[chunk] = contributors;
    settleExchange(chunk);
    checkFinished();
    return;
  }
  switch (op.kind) {
    case Operation::Kind::kAllReduce:
      if (!link.toParent) {
        ++op.childrenDelivered[chunk];
        op.childContributors[link.childIndex][chunk] = contributors;
        const int children = static_cast<int>(me().children.size());
        while (!op.error && op.chunksClimbed < op.chunks.size() &&
               op.childrenDelivered[op.chunksClimbed] == children) {
          climb(op.chunksClimbed++);
        }
      } else {
        op.contributors = contributors;
        descend(chunk);
        ++op.chunksFinal;
      }
      break;
    case Operation::Kind::kBroadcast:
      descend(chunk);
      ++op.chunksFinal;
      break;
    case Operation::Kind::kScatter: {
      const size_t share = op.tensors[0].bytes();
      for (auto& child : links_) {
        if (child->childIndex < 0) continue;
        Message message;
        message.metadata = encode(LinkFrame::data(op.sequence, 0, 0));
        for (int rank : subtreeOf(tree, child->peer)) {
          size_t index = 0;
          while (op.subtree[index] != rank) ++index;
          message.tensors.push_back(outgoing(link.scratch.get() + (index - 1) * share, share));
        }
        write(*child, std::move(message));
      }
      ++op.chunksFinal;
      break;
    }
  }
  checkFinished();
}

// This rank's data for `chunk`, combined with its children's in child order,
// goes up (or, at the root, becomes the result and goes down).
void TreeCore::climb(size_t chunk) {
  Operation& op = *operation_;
  int contributors = op.contributes ? 1 : 0;
  try {
    for (const auto& link : links_) {
      if (link->childIndex < 0) continue;
      const int theirs = op.childContributors[link->childIndex][chunk];
      if (theirs == 0) continue;
      for (const auto& segment : op.chunks[chunk].segments) {
        const TensorView& tensor = op.tensors[segment.tensor];
        uint8_t* mine = bytesOf(tensor) + segment.offset;
        uint8_t* incoming = link->scratch.get() + segment.packed;
        if (contributors == 0) {
          std::memcpy(mine, incoming, segment.length);
        } else {
          op.reduction->apply(slice(tensor, segment, mine), slice(tensor, segment, incoming));
        }
      }
      contributors += theirs;
    }
    if (me().parent < 0) {
      for (const auto& segment : op.chunks[chunk].segments) {
        const TensorView& tensor = op.tensors[segment.tensor];
        TensorView result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
        if (contributors == 0) {
          op.reduction->fillIdentity(result);
        } else {
          op.reduction->finish(result, contributors);
        }
      }
    }
  } catch (const std::exception& e) {
    fail(ACTORPIPE_ERROR(LogicError, std::string("the reduction failed: ") + e.what()));
    return;
  }
  if (me().parent < 0) {
    op.contributors = contributors;
    descend(chunk);
    ++op.chunksFinal;
  } else {
    write(*links_.front(), chunkMessage(chunk, contributors, contributors > 0));
  }
}

void TreeCore::descend(size_t chunk) {
  for (auto& link : links_) {
    if (link->childIndex >= 0) write(*link, chunkMessage(chunk, operation_->contributors, true));
  }
}

Message TreeCore::chunkMessage(size_t chunk, int contributors, bool withTensors) {
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

void TreeCore::begin() {
  Operation& op = *operation_;
  const size_t chunks = op.chunks.size();
  if (op.ring || op.exchange || op.doubling || op.halving) {
    if (op.halving) {
      beginHalving();
    } else if (op.ring) {
      beginRing();
    } else if (op.exchange) {
      beginExchange();
    } else {
      beginDoubling();
    }
    for (auto& link : links_) pump(*link);
    checkFinished();
    return;
  }
  switch (op.kind) {
    case Operation::Kind::kAllReduce:
      op.childrenDelivered.assign(chunks, 0);
      op.childContributors.assign(me().children.size(), std::vector<int>(chunks, 0));
      if (me().children.empty()) {
        while (!op.error && op.chunksClimbed < chunks) climb(op.chunksClimbed++);
      }
      break;
    case Operation::Kind::kBroadcast:
      if (me().parent < 0) {
        for (size_t c = 0; c < chunks; ++c) descend(c);
        op.chunksFinal = chunks;
      }
      break;
    case Operation::Kind::kScatter:
      beginScatter();
      break;
  }
  for (auto& link : links_) pump(*link);
  checkFinished();
}

void TreeCore::beginScatter() {
  Operation& op = *operation_;
  op.subtree = subtreeOf(tree, info.rank);
  if (me().parent >= 0) return;  // waits for its share from the parent
  const TensorView& mine = op.tensors[0];
  if (op.perRank.size() != static_cast<size_t>(info.worldSize)) {
    fail(ACTORPIPE_ERROR(LogicError, "scatter at rank 0 needs one tensor per rank (" +
                                         std::to_string(info.worldSize) + "), got " +
                                         std::to_string(op.perRank.size())));
    return;
  }
  for (const auto& tensor : op.perRank) {
    if (tensor.bytes() != mine.bytes()) {
      fail(ACTORPIPE_ERROR(LogicError, "scatter's tensors must all be shaped like the receiving one"));
      return;
    }
  }
  if (op.perRank[0].data != mine.data) std::memcpy(mine.data, op.perRank[0].data, mine.bytes());
  for (auto& link : links_) {
    if (link->childIndex < 0) continue;
    Message message;
    message.metadata = encode(LinkFrame::data(op.sequence, 0, 0));
    for (int rank : subtreeOf(tree, link->peer)) {
      message.tensors.push_back(outgoing(op.perRank[rank].data, mine.bytes()));
    }
    write(*link, std::move(message));
  }
  op.chunksFinal = 1;
}

void TreeCore::checkFinished() {
  if (!operation_) return;
  Operation& op = *operation_;
  if (op.finished || op.error) return;
  const size_t needed = op.kind == Operation::Kind::kScatter ? 1 : op.chunks.size();
  const bool allIn = op.ring || op.halving ? op.ringReceived == op.ringExpected
                                           : op.chunksFinal == needed;
  if (allIn && op.pendingWrites == 0) op.finished = true;  // afterEvent() ends the call
}

} // namespace actorpipe::group
