// Tensors staged through host memory (cuda_basic): the pipe's side.
//
// A staged tensor rides the pipe's connection inline, like a CPU tensor of
// the basic channel, but its bytes are not in CPU memory: they cross in
// chunks of the stager's chunkBytes(), each through one of its kSlots host
// slots (channels/context.h, Stager).
//
// Sender: the write's connection bytes (frame, payloads, CPU tensors and
// the staged tensors' chunks, in that order) become steps. Up to kSlots
// chunks are being copied to host memory at once; a step goes to the
// connection once every step before it has, and a chunk once its copy is
// done. Its slot is free again when the connection's write of it calls
// back. Slots are the pipe's, per direction, not one write's: a write's
// last chunks may still wait on the connection while the next write
// copies its first (a test caught exactly that). Until the last step is
// handed to the connection, no other write may put bytes on it (staging_
// holds them back, sendUnsent lets them go); the write counts as on the
// wire (its memory still read) from its first copy to its last connection
// callback. A peer that leaves (onPeerGone) does not stop it: it may only
// have shut its sending side.
//
// Receiver: the read's connection part becomes the same steps. A chunk is
// read into a free slot, then copied into the tensor; the slot is free
// again when that copy is done. Nothing else reads from the connection
// before the read is over (the next descriptor is read after it), so the
// reads of later steps may wait for slots.
//
// Both run on the loop. Stager and connection callbacks may come inside
// the call that asked (a failing copy, a buffered read): pumpSend and
// pumpRead do not nest, they loop. When the pipe fails, the stager's
// close() waits for its copies in flight (cuda_basic: up to 10 s, then it
// logs and gives up), so an operation reported failed no longer has its
// memory read or written.
#include <actorpipe/actors/detail/pipe_core.h>

#include <actorpipe/channels/context.h>
#include <actorpipe/runtime/detail/check.h>
#include <actorpipe/runtime/detail/loop.h>

namespace actorpipe::detail {

using channel::Stager;

// One plain region or one chunk of a staged tensor, in the connection's order.
struct PipeCore::StagedStep {
  const void* cpu{nullptr};     // plain: the bytes (sender) or where they go (receiver)
  size_t length{0};
  size_t tensor{SIZE_MAX};      // staged: which of the operation's staged tensors
  size_t offset{0};             // staged: the chunk's place in it
  int slot{-1};
  void* host{nullptr};
  bool ready{false};            // sender: copied to host memory
};

struct PipeCore::StagedSend {
  uint64_t seq{0};
  Stager* stager{nullptr};
  std::vector<const Buffer*> tensors;  // the message's own
  std::vector<StagedStep> steps;
  size_t copying{0};   // the next step whose chunk is to be copied
  size_t writing{0};   // the next step to hand to the connection
  size_t copiesOut{0};
  size_t writesOut{0};
  Error error;         // the first connection failure
  bool released{false};
  bool finished{false};
  bool pumping{false};
  bool again{false};
};

struct PipeCore::StagedRead {
  uint64_t seq{0};
  Stager* stager{nullptr};
  std::vector<Buffer> tensors;
  std::vector<StagedStep> steps;
  size_t next{0};      // the next step whose read is to be asked
  bool pumping{false};
  bool again{false};
};

namespace {

// Slots belong to the stager, not to one operation: a write's last chunks
// may still wait on the connection while the next write copies its first.
int freeSlot(unsigned busy) {
  for (size_t i = 0; i < Stager::kSlots; ++i) {
    if (!(busy & (1u << i))) return static_cast<int>(i);
  }
  return -1;
}

// Runs `step` until nothing asked for another turn: a callback that comes
// inside a step (a failing copy, a buffered read) asks for one instead of
// nesting a second step.
template <class Op, class Step>
void pump(Op& op, Step&& step) {
  if (op.pumping) {
    op.again = true;
    return;
  }
  op.pumping = true;
  do {
    op.again = false;
    step();
  } while (op.again);
  op.pumping = false;
}

// Appends `length` bytes of staged tensor `tensor` as chunks.
template <class Step>
void addChunks(std::vector<Step>& steps, size_t tensor, size_t length, size_t chunk) {
  for (size_t offset = 0; offset < length; offset += chunk) {
    Step step;
    step.length = std::min(chunk, length - offset);
    step.tensor = tensor;
    step.offset = offset;
    steps.push_back(step);
  }
}

}  // namespace

// --- sending ------------------------------------------------------------------

void PipeCore::sendStaged(WriteOp& op, const transport::Slices& slices, const std::vector<StagedTensor>& staged) {
  auto send = std::make_shared<StagedSend>();
  send->seq = op.seq;
  send->stager = staged.front().stager;
  const size_t chunk = std::max<size_t>(1, send->stager->chunkBytes());
  size_t next = 0;  // the next staged tensor
  for (size_t i = 0; i < slices.size(); ++i) {
    // slices[0] is the frame; inline data slice k is slices[k + 1].
    if (next < staged.size() && i == staged[next].slice + 1) {
      send->tensors.push_back(staged[next].buffer);
      addChunks(send->steps, next, staged[next].length, chunk);
      ++next;
      continue;
    }
    StagedStep step;
    step.cpu = slices[i].ptr;
    step.length = slices[i].length;
    send->steps.push_back(step);
  }
  ACTORPIPE_DCHECK(next == staged.size());
  staging_ = true;
  activeSend_ = send;
  pumpSend(send);
}

void PipeCore::pumpSend(std::shared_ptr<StagedSend> send) {
  pump(*send, [&] { stepSend(send); });
}

void PipeCore::stepSend(const std::shared_ptr<StagedSend>& send) {
  ACTORPIPE_DCHECK(loop_->ownsState());
  StagedSend& s = *send;
  if (s.finished) return;
  WriteOp* op = writes_.find(s.seq);
  if (op == nullptr || op->done) {
    // The pipe failed (fail() reported this write, its stager closed):
    // nothing more goes out. Later writes failed with it.
    s.finished = true;
    if (!s.released) {
      s.released = true;
      staging_ = false;
      if (activeSend_ == send) activeSend_.reset();
    }
    return;
  }
  // Once the connection failed nothing more is asked (what is out still
  // calls back). A peer that left (op->error) may only have shut its
  // sending side: the write goes on to its end, as an unstaged one's bytes
  // do, bounded by the linger timer (onPeerGone), and ends failed.
  const bool stopped = s.error || error_;
  auto self = shared_from_this();
  while (!stopped && s.copying < s.steps.size()) {
    StagedStep& step = s.steps[s.copying];
    if (step.tensor == SIZE_MAX) {
      ++s.copying;
      continue;
    }
    const int slot = freeSlot(outSlots_);
    if (slot < 0) break;
    Error error;
    void* host = s.stager->slot(Stager::Side::kOut, slot, error);
    if (host == nullptr) return fail(error);
    outSlots_ |= 1u << slot;
    step.slot = slot;
    step.host = host;
    ++s.copiesOut;
    const size_t index = s.copying++;
    s.stager->toHost(host, *s.tensors[step.tensor], step.offset, step.length, [self, send, index](const Error& e) {
      --send->copiesOut;
      if (e) {
        self->fail(e);
      } else {
        send->steps[index].ready = true;
      }
      self->pumpSend(send);
    });
    if (error_) return;  // the copy failed at once: fail() reported the write
  }
  if (!stopped) {
    transport::Slices batch;
    unsigned slots = 0;  // freed when this batch's write calls back
    while (s.writing < s.steps.size()) {
      const StagedStep& step = s.steps[s.writing];
      if (step.tensor == SIZE_MAX) {
        batch.push_back({step.cpu, step.length});
      } else {
        if (!step.ready) break;
        batch.push_back({step.host, step.length});
        slots |= 1u << step.slot;
      }
      ++s.writing;
    }
    if (!batch.empty()) {
      ++s.writesOut;
      connection_->write(std::move(batch), [self, send, slots](const Error& e) {
        --send->writesOut;
        self->outSlots_ &= ~slots;
        if (e && !send->error) {
          send->error = e;
          // As an unstaged write's: the connection failed, so does the pipe
          // (its stager waits for the copies in flight), unless the peer
          // already left (onPeerGone): then the write ends with that error
          // once its copies and writes are done.
          WriteOp* op = self->writes_.find(send->seq);
          if (op != nullptr && !op->done && !op->error) self->fail(e);
        }
        self->pumpSend(send);
        // The write issuing its steps now may have waited for these slots
        // (a copy of the pointer: pumping may reset the member).
        if (auto active = self->activeSend_; active && active != send) self->pumpSend(active);
      });
      if (error_) return;
    }
  }
  const bool issued = s.writing == s.steps.size();
  if ((issued || stopped) && !s.released) {
    // The connection has every byte of this write it will get: the next
    // writes may follow.
    s.released = true;
    staging_ = false;
    if (activeSend_ == send) activeSend_.reset();
    if (!error_) sendUnsent();
  }
  if ((issued || stopped) && s.copiesOut == 0 && s.writesOut == 0) {
    s.finished = true;
    wireDone(s.seq, s.error);
  }
}

// --- reading ------------------------------------------------------------------

std::shared_ptr<PipeCore::StagedRead> PipeCore::newStagedRead(uint64_t seq) {
  auto read = std::make_shared<StagedRead>();
  read->seq = seq;
  return read;
}

void PipeCore::addStagedStep(StagedRead& read, void* cpu, size_t length, Buffer buffer, Stager* stager) {
  if (stager == nullptr) {
    StagedStep step;
    step.cpu = cpu;
    step.length = length;
    read.steps.push_back(step);
    return;
  }
  read.stager = stager;
  read.tensors.push_back(std::move(buffer));
  addChunks(read.steps, read.tensors.size() - 1, length, std::max<size_t>(1, stager->chunkBytes()));
}

size_t PipeCore::stagedParts(const StagedRead& read) { return read.steps.size(); }

void PipeCore::readStaged(uint64_t, std::shared_ptr<StagedRead> read) { pumpRead(read); }

void PipeCore::pumpRead(std::shared_ptr<StagedRead> read) {
  pump(*read, [&] { stepRead(read); });
}

void PipeCore::stepRead(const std::shared_ptr<StagedRead>& read) {
  ACTORPIPE_DCHECK(loop_->ownsState());
  StagedRead& r = *read;
  if (error_) return;  // fail() reported the read
  ReadOp* op = reads_.find(r.seq);
  if (op == nullptr || op->done) return;
  auto self = shared_from_this();
  while (r.next < r.steps.size()) {
    StagedStep& step = r.steps[r.next];
    if (step.tensor == SIZE_MAX) {
      ++r.next;
      connection_->read(const_cast<void*>(step.cpu), step.length,
                        [self, seq = r.seq](const Error& e) { self->readPartDone(seq, e); });
      if (error_) return;  // the read failed at once: fail() reported it
      continue;
    }
    const int slot = freeSlot(inSlots_);
    if (slot < 0) return;
    Error error;
    void* host = r.stager->slot(Stager::Side::kIn, slot, error);
    if (host == nullptr) return fail(error);
    inSlots_ |= 1u << slot;
    step.slot = slot;
    step.host = host;
    const size_t index = r.next++;
    connection_->read(host, step.length, [self, read, index](const Error& e) {
      if (e) return self->fail(e);
      if (self->error_) return;
      const StagedStep& step = read->steps[index];
      read->stager->fromHost(step.host, read->tensors[step.tensor], step.offset, step.length,
                             [self, read, index](const Error& e) {
                               self->inSlots_ &= ~(1u << read->steps[index].slot);
                               self->readPartDone(read->seq, e);
                               self->pumpRead(read);
                             });
    });
    if (error_) return;
  }
}

}  // namespace actorpipe::detail
