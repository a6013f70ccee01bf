#include <actorpipe/actors/group/tree_core.h>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;
using Lock = std::unique_lock<std::recursive_mutex>;

// After a failure, how long a collective waits for reads and writes that
// still point into the caller's tensors, before it closes every pipe to end
// them (a failed group is not used again).
constexpr auto kQuiesceGrace = std::chrono::seconds(2);
// How long a caller spins (yielding to its own loop thread, which shares
// its CPU when ranks are bound) before it sleeps. A vCPU that goes idle here
// halts, and waking a thread on a halted vCPU costs ~40 µs
// (../shared/NOTES.md), more than a whole small call. Where the loops poll,
// they keep the CPU awake and a spinning caller would only fight its own
// loop thread for the CPU; where they do not (more ranks than CPUs), small
// calls spin so that messages from the other CPU land at once. Large calls
// never spin: the caller would take CPU time from the copies and
// reductions (docs/benchmarks-groups.md).
std::chrono::microseconds spinWindow(size_t bytes, std::chrono::microseconds pollWindow) {
  static const long forced = [] {
    const char* text = std::getenv("ACTORPIPE_GROUP_SPIN_US");
    return text ? std::atol(text) : -1L;
  }();
  if (forced >= 0) return std::chrono::microseconds(forced);
  const bool small = bytes <= (size_t{32} << 10);
  return std::chrono::microseconds(small && pollWindow.count() == 0 ? 2000 : 0);
}

// Event loops poll for a while after activity so a busy link never pays a
// wake-up. But when this host runs more ranks than it has CPUs, a polling
// rank burns the CPU another rank on it needs to make progress: there, loops
// sleep at once. ACTORPIPE_POLL_US overrides.
std::chrono::microseconds pollWindowFor(const RankInfo& info) {
  if (const char* text = std::getenv("ACTORPIPE_POLL_US")) {
    return std::chrono::microseconds(std::atol(text));
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int cpus = 1;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cpus = CPU_COUNT(&allowed);
  // Bound to one CPU (actorpipe-run's default): count the machine's instead.
  if (cpus == 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  const bool oversubscribed = info.localSize > std::max(cpus, 1);
  return std::chrono::microseconds(oversubscribed ? 0 : 200);
}

Tensor slice(const Tensor& tensor, const Segment& segment, void* base) {
  const size_t element = dtypeSize(tensor.dtype);
  return Tensor{base, segment.length / element, tensor.dtype, tensor.device};
}

uint8_t* bytesOf(const Tensor& tensor) { return static_cast<uint8_t*>(tensor.data); }

Message::Tensor outgoing(void* data, size_t length) {
  Message::Tensor tensor;
  tensor.buffer = CpuBuffer{data};
  tensor.length = length;
  return tensor;
}

bool parseData(const std::string& text, uint64_t& sequence, size_t& chunk, int& contributors) {
  std::istringstream in(text);
  std::string kind;
  return (in >> kind >> sequence >> chunk >> contributors) && kind == "D";
}

} // namespace

TreeCore::CallbackScope::~CallbackScope() {
  lock.unlock();
  if (core.handOver_.exchange(false)) std::this_thread::yield();
}

TreeCore::TreeCore(RankInfo info_, TreeOptions options_)
    : info(std::move(info_)), options(options_) {}

TreeCore::~TreeCore() {
  close();
  if (context_) context_->join();
  if (rendezvousFileOwned_) removeRendezvousFile(info);
}

Error TreeCore::start() {
  pollWindow_ = pollWindowFor(info);
  context_ = std::make_shared<Context>(ContextOptions()
                                          .name("rank " + std::to_string(info.rank))
                                          .pollWindow(pollWindow_));
  context_->registerTransport(0, "tcp", transport::uv::create());
  context_->registerTransport(10, "shm", transport::shm::create());
  context_->registerChannel(0, "basic", channel::basic::create());
  context_->registerChannel(10, "cma", channel::cma::create());
  context_->registerChannel(20, "xth", channel::xth::create());
  listener_ = context_->listen({"shm://", "tcp://" + info.address + ":0"});
  std::string url;
  try {
    url = listener_->url("tcp");
  } catch (const std::exception&) {
  }
  if (url.empty()) {
    return ACTORPIPE_ERROR(RendezvousError, "rank " + std::to_string(info.rank) +
                                                " could not listen on " + info.address);
  }
  std::vector<Member> table;
  Error error = rendezvous(*context_, info, url, options.rendezvousTimeout, table);
  rendezvousFileOwned_ = info.rank == 0;
  if (error) return error;
  std::vector<std::string> hosts;
  for (const auto& member : table) hosts.push_back(member.host);
  try {
    tree = buildTree(hosts, options.radix);
  } catch (const std::invalid_argument& e) {
    return ACTORPIPE_ERROR(LogicError, e.what());
  }
  return connectLinks(table);
}

// Children connect to their parent (the URL names TCP; same-host pairs then
// move to shm) and introduce themselves; the parent waits for all of them.
Error TreeCore::connectLinks(const std::vector<Member>& table) {
  Lock lock(mutex_);
  if (me().parent >= 0) {
    auto link = std::make_unique<Link>();
    link->peer = me().parent;
    link->toParent = true;
    link->pipe = context_->connect(table[me().parent].url);
    Message hello;
    hello.metadata = "link " + std::to_string(info.rank);
    link->pipe->write(std::move(hello), [](const Error&) {});
    links_.push_back(std::move(link));
  }
  for (size_t i = 0; i < me().children.size(); ++i) {
    auto link = std::make_unique<Link>();
    link->peer = me().children[i];
    link->childIndex = static_cast<int>(i);
    links_.push_back(std::move(link));
  }
  // The ring (rank r sends to r + 1) exists when every rank is on one host.
  // A ring neighbour that is also a tree neighbour shares its pipe: both
  // ends know the tree, so both pick the same pipe.
  bool oneHost = true;
  for (const auto& member : table) oneHost = oneHost && member.host == table[0].host;
  const int n = info.worldSize;
  if (oneHost && n >= 2 && ringAllowed()) {
    const int next = (info.rank + 1) % n;
    const int prev = (info.rank + n - 1) % n;
    Link* toNext = linkTo(next);
    if (!toNext) {
      auto link = std::make_unique<Link>();
      link->peer = next;
      link->pipe = context_->connect(table[next].url);
      Message hello;
      hello.metadata = "ring " + std::to_string(info.rank);
      link->pipe->write(std::move(hello), [](const Error&) {});
      toNext = link.get();
      links_.push_back(std::move(link));
    }
    Link* fromPrev = linkTo(prev);
    if (!fromPrev) {
      auto link = std::make_unique<Link>();
      link->peer = prev;
      fromPrev = link.get();
      links_.push_back(std::move(link));
    }
    toNext->ringNext = true;
    fromPrev->ringPrev = true;
    ringNext_ = toNext;
    ringPrev_ = fromPrev;
  }
  // Recursive doubling's partners (r xor 2^k), for power-of-two groups of
  // four or more on one host; the higher rank of a pair connects.
  const bool powerOfTwo = n >= 4 && (n & (n - 1)) == 0;
  if (oneHost && powerOfTwo && doublingAllowed()) {
    for (int step = 0; (1 << step) < n; ++step) {
      const int partner = info.rank ^ (1 << step);
      Link* link = linkTo(partner);
      if (!link) {
        auto created = std::make_unique<Link>();
        created->peer = partner;
        if (info.rank > partner) {
          created->pipe = context_->connect(table[partner].url);
          Message hello;
          hello.metadata = "cube " + std::to_string(info.rank);
          created->pipe->write(std::move(hello), [](const Error&) {});
        }
        link = created.get();
        links_.push_back(std::move(created));
      }
      link->cubeStep = step;
      cube_.push_back(link);
    }
  }
  lock.unlock();

  std::weak_ptr<TreeCore> weak = shared_from_this();
  auto acceptNext = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> again = acceptNext;
  // Shared: the last accept() is still pending when this function returns.
  auto acceptError = std::make_shared<Error>();
  *acceptNext = [this, weak, again, acceptError]() {
    listener_->accept([this, weak, again, acceptError](const Error& error,
                                                       std::shared_ptr<Pipe> pipe) {
      auto self = weak.lock();
      if (!self) return;
      if (error) {
        Lock lock(mutex_);
        if (!*acceptError) *acceptError = error;
        changed_.notify_all();
        return;
      }
      pipe->readDescriptor([this, weak, pipe](const Error& error, Descriptor descriptor) {
        auto self = weak.lock();
        if (!self || error) return;
        pipe->read(Allocation{}, [](const Error&) {});
        std::istringstream in(descriptor.metadata);
        std::string word;
        int rank = -1;
        if (!(in >> word >> rank) || (word != "link" && word != "ring" && word != "cube")) return;
        Lock lock(mutex_);
        Link* link = linkTo(rank);
        const bool expected = word == "link"   ? link && link->childIndex >= 0
                              : word == "ring" ? link && link->ringPrev && !link->toParent
                                               : link && link->cubeStep >= 0 && !link->toParent;
        if (expected && !link->pipe) {
          link->pipe = pipe;
          changed_.notify_all();
        }
      });
      if (auto next = again.lock()) (*next)();
    });
  };
  (*acceptNext)();

  lock.lock();
  auto linked = [&] {
    for (const auto& link : links_) {
      if (!link->pipe) return false;
    }
    return true;
  };
  changed_.wait_until(lock, Clock::now() + options.rendezvousTimeout,
                      [&] { return linked() || static_cast<bool>(*acceptError); });
  if (!linked()) {
    std::string missing;
    for (const auto& link : links_) {
      if (!link->pipe) missing += (missing.empty() ? "" : ", ") + std::to_string(link->peer);
    }
    Error error = *acceptError ? *acceptError
                              : ACTORPIPE_ERROR(RendezvousError,
                                                "rank(s) " + missing + " never linked to rank " +
                                                    std::to_string(info.rank));
    acceptNext.reset();
    return error;
  }
  acceptNext.reset();
  listener_->close();
  for (auto& link : links_) readNext(*link);
  lock.unlock();
  // The group is formed once every link's handshake is done (so links()
  // can say what each negotiated); a peer that died meanwhile shows up as
  // a failed link at the first collective.
  const auto deadline = Clock::now() + options.rendezvousTimeout;
  auto broken = [&] {
    Lock check(mutex_);
    return static_cast<bool>(broken_);
  };
  for (auto& link : links_) {
    while (!link->pipe->info().established && !broken() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return Error::kSuccess;
}

Link* TreeCore::linkTo(int rank) {
  for (auto& link : links_) {
    if (link->peer == rank) return link.get();
  }
  return nullptr;
}

std::vector<std::string> TreeCore::describeLinks() const {
  Lock lock(mutex_);
  std::vector<std::string> lines;
  for (const auto& link : links_) {
    std::string line = (link->toParent             ? "parent "
                        : link->childIndex >= 0    ? "child "
                        : link->ringNext || link->ringPrev ? "ring "
                                                           : "partner ") +
                       std::to_string(link->peer) + ": ";
    if (link->pipe) {
      PipeInfo pipeInfo = link->pipe->info();
      auto channel = pipeInfo.channels.find("cpu");
      line += pipeInfo.transport + "/" +
              (channel != pipeInfo.channels.end() ? channel->second : std::string("?"));
    }
    lines.push_back(line);
  }
  return lines;
}

void TreeCore::close() {
  Lock lock(mutex_);
  if (closing_) return;
  std::weak_ptr<TreeCore> weak = weak_from_this();  // empty when called by the destructor
  if (!broken_ && context_ && !weak.expired()) {
    // A neighbour that sees our connection end must know we left on purpose
    // (after our last collective), not that we died in one.
    auto remaining = std::make_shared<int>(0);
    for (auto& link : links_) {
      if (!link->pipe || link->departed) continue;
      ++*remaining;
      Message bye;
      bye.metadata = "bye";
      link->pipe->write(std::move(bye), [weak, remaining](const Error&) {
        auto self = weak.lock();
        if (!self) return;
        Lock lock(self->mutex_);
        --*remaining;
        self->changed_.notify_all();
      });
    }
    changed_.wait_until(lock, Clock::now() + kQuiesceGrace, [&] { return *remaining == 0; });
  }
  // A failed group's abort notices must leave before the pipes close, or a
  // neighbour would only see our connection end and blame us.
  changed_.wait_until(lock, Clock::now() + kQuiesceGrace, [&] { return abortsInFlight_ == 0; });
  closing_ = true;
  if (!broken_) broken_ = ACTORPIPE_ERROR(ContextClosedError);
  if (operation_ && !operation_->finished && !operation_->error) {
    operation_->error = broken_;
  }
  operationFinished_ = true;
  changed_.notify_all();
  lock.unlock();
  if (context_) context_->close();
}

// --- reading: one descriptor outstanding per link, always ------------------

void TreeCore::readNext(Link& link) {
  if (closing_ || link.departed || link.readingDescriptor || link.holdsDescriptor || link.readingData) return;
  link.readingDescriptor = true;
  std::weak_ptr<TreeCore> weak = shared_from_this();
  Link* target = &link;
  link.pipe->readDescriptor([weak, target](const Error& error, Descriptor descriptor) {
    auto self = weak.lock();
    if (!self) return;
    CallbackScope scope(*self);
    self->onDescriptor(*target, error, std::move(descriptor));
  });
}

void TreeCore::onDescriptor(Link& link, const Error& error, Descriptor descriptor) {
  link.readingDescriptor = false;
  if (closing_) return;
  if (error) {
    failLink(link, error);
    return;
  }
  if (descriptor.metadata.rfind("abort ", 0) == 0) {
    // "abort <rank> <kind> <reason>": the same error, retold by each rank.
    std::istringstream in(descriptor.metadata.substr(6));
    int rank = -1;
    std::string kind;
    in >> rank >> kind;
    std::string reason;
    std::getline(in, reason);
    if (!reason.empty() && reason[0] == ' ') reason.erase(0, 1);
    if (kind == "rank") {
      fail(ACTORPIPE_ERROR(RankFailedError, rank, reason));
    } else if (kind == "logic") {
      fail(ACTORPIPE_ERROR(LogicError, reason));
    } else {
      fail(ACTORPIPE_ERROR(TimeoutError, reason));
    }
    return;
  }
  if (descriptor.metadata == "bye") {
    link.departed = true;  // and read no further: its end of the pipe is closing
    if (operation_ && !operation_->finished && link.consumed < expectedFrom(link)) {
      fail(ACTORPIPE_ERROR(RankFailedError, link.peer, "it left the group during a collective"));
    }
    return;
  }
  link.holdsDescriptor = true;
  link.descriptor = std::move(descriptor);
  pump(link);
}

size_t TreeCore::expectedFrom(const Link& link) const {
  const Operation& op = *operation_;
  if (op.ring) return link.ringPrev ? op.ringExpected : 0;
  if (op.doubling) return link.cubeStep >= 0 ? 1 : 0;
  const bool treeLink = link.toParent || link.childIndex >= 0;
  if (!treeLink) return 0;
  switch (op.kind) {
    case Operation::Kind::kAllReduce: return op.chunks.size();
    case Operation::Kind::kBroadcast: return link.toParent ? op.chunks.size() : 0;
    case Operation::Kind::kScatter: return link.toParent ? 1 : 0;
  }
  return 0;
}

void TreeCore::pump(Link& link) {
  if (!operation_ || operation_->finished || operation_->error || !link.holdsDescriptor ||
      link.readingData) {
    return;
  }
  if (link.consumed >= expectedFrom(link)) return;  // it belongs to the next collective
  consume(link);
}

void TreeCore::consume(Link& link) {
  Operation& op = *operation_;
  const Descriptor& d = link.descriptor;
  uint64_t sequence = 0;
  size_t chunk = 0;
  int contributors = 0;
  const std::string from = "rank " + std::to_string(link.peer);
  // Tree messages come in chunk order; ring messages are numbered
  // step * chunks + chunk and may overtake each other across steps.
  const size_t chunks = op.chunks.size();
  const size_t ringSteps = 2 * static_cast<size_t>(info.worldSize) - 2;
  if (!parseData(d.metadata, sequence, chunk, contributors) || sequence != op.sequence ||
      (op.ring       ? chunk >= ringSteps * chunks
       : op.doubling ? chunk != static_cast<size_t>(link.cubeStep)
                     : chunk != link.consumed)) {
    fail(ACTORPIPE_ERROR(LogicError, from + " sent \"" + d.metadata + "\" during " + op.name +
                                         " #" + std::to_string(op.sequence) +
                                         ": ranks called different collectives"));
    return;
  }

  Allocation allocation;
  std::vector<size_t> lengths;
  auto grow = [](Link& l, size_t bytes) {
    if (l.scratchBytes < bytes) {
      l.scratch.reset(new uint8_t[bytes]);
      l.scratchBytes = bytes;
    }
  };
  if (op.ring) {
    const size_t step = chunk / chunks;
    const size_t c = chunk % chunks;
    const bool gathering = step + 1 >= static_cast<size_t>(info.worldSize);
    if (gathering || contributors > 0) {
      if (!gathering) grow(link, op.totalBytes);
      for (const auto& segment : op.chunks[c].segments) {
        uint8_t* base = gathering ? bytesOf(op.tensors[segment.tensor]) + segment.offset
                                  : link.scratch.get() + segment.packed;
        allocation.tensors.push_back({CpuBuffer{base}});
        lengths.push_back(segment.length);
      }
    }
  } else if (op.exchange || op.doubling) {
    if (contributors > 0) {
      grow(link, op.totalBytes);
      for (const auto& segment : op.chunks[op.doubling ? 0 : chunk].segments) {
        allocation.tensors.push_back({CpuBuffer{link.scratch.get() + segment.packed}});
        lengths.push_back(segment.length);
      }
    }
  } else if (op.kind == Operation::Kind::kScatter) {
    const size_t share = op.tensors[0].bytes();
    grow(link, share * op.subtree.size());
    for (size_t i = 0; i < op.subtree.size(); ++i) {
      void* target = i == 0 ? op.tensors[0].data : link.scratch.get() + (i - 1) * share;
      allocation.tensors.push_back({CpuBuffer{target}});
      lengths.push_back(share);
    }
  } else if (link.toParent) {
    for (const auto& segment : op.chunks[chunk].segments) {
      allocation.tensors.push_back({CpuBuffer{bytesOf(op.tensors[segment.tensor]) + segment.offset}});
      lengths.push_back(segment.length);
    }
  } else if (contributors > 0) {
    grow(link, op.totalBytes);
    for (const auto& segment : op.chunks[chunk].segments) {
      allocation.tensors.push_back({CpuBuffer{link.scratch.get() + segment.packed}});
      lengths.push_back(segment.length);
    }
  }
  bool fits = d.tensors.size() == lengths.size() && d.payloads.empty();
  for (size_t i = 0; fits && i < lengths.size(); ++i) fits = d.tensors[i].length == lengths[i];
  if (!fits) {
    fail(ACTORPIPE_ERROR(LogicError, from + " called " + op.name + " #" +
                                         std::to_string(op.sequence) +
                                         " with tensors of other sizes than rank " +
                                         std::to_string(info.rank)));
    return;
  }

  link.holdsDescriptor = false;
  link.readingData = true;
  std::weak_ptr<TreeCore> weak = shared_from_this();
  Link* target = &link;
  link.pipe->read(std::move(allocation), [weak, target, chunk, contributors](const Error& error) {
    auto self = weak.lock();
    if (!self) return;
    CallbackScope scope(*self);
    target->readingData = false;
    // Only a failed collective waits for reads to end (see run()).
    if (!self->operation_ || self->operation_->error) self->changed_.notify_all();
    if (self->closing_) return;
    if (error) {
      self->failLink(*target, error);
      return;
    }
    ++target->consumed;
    self->readNext(*target);
    self->onData(*target, chunk, contributors);
  });
}

// --- the collectives' steps -------------------------------------------------

void TreeCore::onData(Link& link, size_t chunk, int contributors) {
  if (!operation_ || operation_->error) return;
  Operation& op = *operation_;
  if (op.ring) {
    onRingData(chunk, contributors);
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
        message.metadata = "D " + std::to_string(op.sequence) + " 0 0";
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
        const Tensor& tensor = op.tensors[segment.tensor];
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
        const Tensor& tensor = op.tensors[segment.tensor];
        Tensor result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
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
  message.metadata = "D " + std::to_string(op.sequence) + " " + std::to_string(chunk) + " " +
                     std::to_string(contributors);
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
    CallbackScope scope(*self);
    --op->pendingWrites;
    if (op->error) self->changed_.notify_all();
    if (self->closing_) return;
    if (error) {
      self->failLink(*target, error);
      return;
    }
    if (op != self->operation_) return;
    if (sent && !op->error) sent();
    self->checkFinished();
  });
}

void TreeCore::begin() {
  Operation& op = *operation_;
  const size_t chunks = op.chunks.size();
  if (op.ring || op.exchange || op.doubling) {
    if (op.ring) {
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
  const Tensor& mine = op.tensors[0];
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
    message.metadata = "D " + std::to_string(op.sequence) + " 0 0";
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
  const bool allIn = op.ring ? op.ringReceived == op.ringExpected : op.chunksFinal == needed;
  if (allIn && op.pendingWrites == 0) {
    op.finished = true;
    operationFinished_ = true;
    handOver_ = true;
    changed_.notify_all();
  }
}

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

bool TreeCore::ringAllowed() {
  const char* text = std::getenv("ACTORPIPE_GROUP_RING");
  return text == nullptr || std::string(text) != "0";
}

bool TreeCore::useRing(size_t bytes) const {
  if (!ringReady()) return false;
  size_t threshold = options.ringThreshold;
  if (const char* text = std::getenv("ACTORPIPE_RING_THRESHOLD")) threshold = std::atol(text);
  return bytes >= threshold;
}

size_t TreeCore::ringChunkBytes(size_t bytes) const {
  if (options.chunkBytes) return options.chunkBytes;
  if (const char* text = std::getenv("ACTORPIPE_RING_CHUNK_BYTES")) return std::atol(text);
  // Each segment in about four pieces, so that steps overlap, of 256 KiB to
  // 1 MiB: smaller pieces pay the per-message cost too often, larger ones
  // overlap too little (docs/benchmarks-groups.md).
  const size_t n = static_cast<size_t>(info.worldSize);
  const size_t target = std::clamp<size_t>(bytes / (n * 4), size_t{256} << 10, size_t{1} << 20);
  const size_t perSegment = std::max<size_t>(1, (bytes / n + target - 1) / target);
  return std::max<size_t>(8, (bytes + n * perSegment - 1) / (n * perSegment));
}

void TreeCore::beginRing() {
  Operation& op = *operation_;
  const size_t n = static_cast<size_t>(info.worldSize);
  const size_t chunks = op.chunks.size();
  const size_t mine = static_cast<size_t>(info.rank);
  op.segmentOf.resize(chunks);
  size_t inMine = 0, inFinal = 0;
  for (size_t c = 0; c < chunks; ++c) {
    op.segmentOf[c] = static_cast<int>(c * n / chunks);
    inMine += op.segmentOf[c] == static_cast<int>(mine);
    inFinal += op.segmentOf[c] == static_cast<int>((mine + 1) % n);
  }
  // Reduce-scatter brings every segment but ours, all-gather every final
  // segment but the one we finish.
  op.ringExpected = (chunks - inMine) + (chunks - inFinal);
  const int contributors = op.contributes ? 1 : 0;
  for (size_t c = 0; c < chunks; ++c) {
    if (op.segmentOf[c] == static_cast<int>(mine)) sendRing(0, c, contributors);
  }
}

void TreeCore::sendRing(size_t step, size_t chunk, int contributors) {
  const Operation& op = *operation_;
  // Partial sums without any contribution travel empty; final values always.
  const bool gathering = step + 1 >= static_cast<size_t>(info.worldSize);
  Message message = chunkMessage(chunk, contributors, gathering || contributors > 0);
  message.metadata = "D " + std::to_string(op.sequence) + " " +
                     std::to_string(step * op.chunks.size() + chunk) + " " +
                     std::to_string(contributors);
  write(*ringNext_, std::move(message));
}

void TreeCore::onRingData(size_t index, int contributors) {
  Operation& op = *operation_;
  const size_t n = static_cast<size_t>(info.worldSize);
  const size_t chunks = op.chunks.size();
  const size_t step = index / chunks;
  const size_t chunk = index % chunks;
  const size_t r = static_cast<size_t>(info.rank);
  // Which segment this step must bring: a check that both ends agree.
  const size_t expectedSegment =
      step + 1 < n ? (r + 2 * n - step - 1) % n : (r + 2 * n - (step - (n - 1))) % n;
  if (static_cast<size_t>(op.segmentOf[chunk]) != expectedSegment) {
    fail(ACTORPIPE_ERROR(LogicError, "rank " + std::to_string(ringPrev_->peer) +
                                         " sent chunk " + std::to_string(chunk) + " at ring step " +
                                         std::to_string(step) + ": ranks disagree on the ring"));
    return;
  }
  ++op.ringReceived;
  if (step + 1 >= n) {  // all-gather: the final bytes are in place
    op.contributors = contributors;
    if (step + 1 < 2 * n - 2) sendRing(step + 1, chunk, contributors);
    return;
  }
  int count = op.contributes ? 1 : 0;
  try {
    for (const auto& segment : op.chunks[chunk].segments) {
      const Tensor& tensor = op.tensors[segment.tensor];
      uint8_t* mine = bytesOf(tensor) + segment.offset;
      uint8_t* incoming = ringPrev_->scratch.get() + segment.packed;
      if (contributors == 0) break;
      if (count == 0) {
        std::memcpy(mine, incoming, segment.length);
      } else {
        op.reduction->apply(slice(tensor, segment, mine), slice(tensor, segment, incoming));
      }
    }
    count += contributors;
    if (step + 2 == n) {  // this rank finishes the chunk
      for (const auto& segment : op.chunks[chunk].segments) {
        const Tensor& tensor = op.tensors[segment.tensor];
        Tensor result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
        if (count == 0) {
          op.reduction->fillIdentity(result);
        } else {
          op.reduction->finish(result, count);
        }
      }
      op.contributors = count;
      sendRing(step + 1, chunk, count);
      return;
    }
  } catch (const std::exception& e) {
    fail(ACTORPIPE_ERROR(LogicError, std::string("the reduction failed: ") + e.what()));
    return;
  }
  sendRing(step + 1, chunk, count);
}

// --- the exchange (two ranks, small calls) ----------------------------------
//
// One trip instead of the tree's two: both ranks send their data at once and
// both compute rank 0's data op rank 1's data, the same expression in the
// same order, so the results are bit-identical.

bool TreeCore::useExchange(size_t bytes) const {
  if (info.worldSize != 2 || links_.size() != 1) return false;
  if (const char* text = std::getenv("ACTORPIPE_GROUP_EXCHANGE")) {
    if (std::string(text) == "0") return false;
  }
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
      const Tensor& tensor = op.tensors[segment.tensor];
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
      Tensor result = slice(tensor, segment, own);
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

bool TreeCore::doublingAllowed() {
  const char* text = std::getenv("ACTORPIPE_GROUP_DOUBLING");
  return text == nullptr || std::string(text) != "0";
}

// Above a few tens of KiB, sending the whole call at every step costs more
// than the hops it saves (docs/benchmarks-groups.md).
bool TreeCore::useDoubling(size_t bytes, size_t chunks) const {
  return !cube_.empty() && chunks == 1 && bytes <= options.doublingThreshold;
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
  message.metadata = "D " + std::to_string(op.sequence) + " " + std::to_string(step) + " " +
                     std::to_string(op.cubeCount);
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
        const Tensor& tensor = op.tensors[segment.tensor];
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
          const Tensor& tensor = op.tensors[segment.tensor];
          Tensor result = slice(tensor, segment, bytesOf(tensor) + segment.offset);
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

// --- failures ---------------------------------------------------------------

void TreeCore::failLink(Link& link, const Error& error) {
  fail(ACTORPIPE_ERROR(RankFailedError, link.peer,
                       "its link to rank " + std::to_string(info.rank) + " broke (" +
                           error.what() + ")"));
}

void TreeCore::fail(Error error) {
  if (broken_) return;
  broken_ = error;
  sendAbort(error);
  if (operation_ && !operation_->finished && !operation_->error) operation_->error = error;
  operationFinished_ = true;
  changed_.notify_all();
}

// Tells every neighbour, so the news crosses the whole tree: each rank that
// hears it fails and passes it on, naming the same rank.
void TreeCore::sendAbort(const Error& error) {
  int rank = -1;
  std::string kind = "timeout";
  std::string reason = error.what();
  if (auto failed = error.castToType<RankFailedError>()) {
    rank = failed->rank();
    kind = "rank";
    reason = failed->reason();
  } else if (error.isOfType<LogicError>()) {
    kind = "logic";
    const std::string prefix = "logic error: ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
  } else if (error.isOfType<TimeoutError>()) {
    const std::string prefix = "timed out: ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
  }
  for (auto& link : links_) {
    if (!link->pipe) continue;
    Message message;
    message.metadata = "abort " + std::to_string(rank) + " " + kind + " " + reason;
    ++abortsInFlight_;
    std::weak_ptr<TreeCore> weak = weak_from_this();
    link->pipe->write(std::move(message), [weak](const Error&) {
      auto self = weak.lock();
      if (!self) return;
      Lock lock(self->mutex_);
      --self->abortsInFlight_;
      self->changed_.notify_all();
    });
  }
}

bool TreeCore::readsInFlight() const {
  for (const auto& link : links_) {
    if (link->readingData) return true;
  }
  return false;
}

Error TreeCore::run(std::shared_ptr<Operation> operation) {
  std::lock_guard<std::mutex> oneAtATime(callers_);
  for (const auto& tensor : operation->tensors) {
    if (tensor.device.type != kCpuDeviceType) {
      return ACTORPIPE_ERROR(LogicError, std::string(operation->name) + " on " +
                                             tensor.device.type +
                                             " tensors needs a build with that device's backend");
    }
    if (tensor.data == nullptr && tensor.count > 0) {
      return ACTORPIPE_ERROR(LogicError, std::string(operation->name) + " got a null tensor");
    }
  }
  Lock lock(mutex_);
  for (auto& link : links_) {
    // A neighbour that left is an error only for collectives that need it
    // (a ring-only neighbour does not take part in a broadcast, say).
    const bool involved = operation->ring       ? (link->ringNext || link->ringPrev)
                          : operation->doubling ? link->cubeStep >= 0
                                                : (link->toParent || link->childIndex >= 0);
    if (link->departed && involved && !broken_) {
      fail(ACTORPIPE_ERROR(RankFailedError, link->peer, "it left the group (closed its Tree)"));
    }
  }
  if (broken_) return broken_;
  operation->sequence = ++sequence_;
  operationFinished_ = false;
  for (auto& link : links_) link->consumed = 0;
  operation_ = operation;
  begin();
  lock.unlock();

  const auto spinUntil = Clock::now() + spinWindow(operation->totalBytes, pollWindow_);
  while (!operationFinished_.load(std::memory_order_acquire) && Clock::now() < spinUntil) {
    std::this_thread::yield();
  }

  lock.lock();
  const auto deadline = Clock::now() + options.operationTimeout;
  Operation& op = *operation;
  while (!op.finished && !op.error) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !op.finished &&
        !op.error) {
      std::string waitingFor;
      for (const auto& link : links_) {
        if (link->consumed < expectedFrom(*link)) {
          waitingFor += (waitingFor.empty() ? "" : ", ") + std::to_string(link->peer);
        }
      }
      fail(ACTORPIPE_ERROR(TimeoutError,
                           std::string(op.name) + " #" + std::to_string(op.sequence) +
                               " at rank " + std::to_string(info.rank) + " waited " +
                               std::to_string(options.operationTimeout.count()) +
                               " ms for rank(s) " + (waitingFor.empty() ? "?" : waitingFor)));
    }
  }
  if (op.error) {
    // Reads and writes may still point into the caller's tensors: let them end.
    auto quiet = [&] { return op.pendingWrites == 0 && !readsInFlight(); };
    if (!changed_.wait_until(lock, Clock::now() + kQuiesceGrace, quiet)) {
      lock.unlock();
      context_->close();
      lock.lock();
      changed_.wait_until(lock, Clock::now() + kQuiesceGrace, quiet);
    }
  }
  operation_.reset();
  handOver_ = false;  // when begin() finished the call itself, nobody waits to be handed the CPU
  return op.error;
}

} // namespace actorpipe::group
