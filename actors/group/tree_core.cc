#include <actorpipe/actors/group/tree_core.h>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <actorpipe/actors/backends.h>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

// After a failure, how long a collective waits for reads and writes that
// still point into the caller's tensors, before it closes every pipe to end
// them (a failed group is not used again).
constexpr auto kQuiesceGrace = std::chrono::seconds(2);
// How long a rank whose group failed keeps its pipes open after its abort
// notices left (see close()).
constexpr auto kAbortLinger = std::chrono::milliseconds(300);
// How long a caller spins (yielding to its own loop thread, which shares
// its CPU when ranks are bound) before it sleeps. A vCPU that goes idle here
// halts, and waking a thread on a halted vCPU costs ~40 µs
// (docs/machine.md), more than a whole small call. Where the loops poll,
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
  return std::chrono::microseconds(hostOversubscribed(info) ? 0 : 200);
}

} // namespace

bool hostOversubscribed(const RankInfo& info) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int cpus = 1;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cpus = CPU_COUNT(&allowed);
  // Bound to one CPU (actorpipe-run's default): count the machine's instead.
  if (cpus == 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  return info.localSize > std::max(cpus, 1);
}

void Signal::raise(int level) {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (level <= level_.load(std::memory_order_relaxed)) return;
    level_.store(level, std::memory_order_release);
  }
  raised_.notify_all();
}

void Signal::waitFor(int level) {
  std::unique_lock<std::mutex> lock(mutex_);
  raised_.wait(lock, [&] { return level_.load(std::memory_order_relaxed) >= level; });
}

bool Signal::waitFor(int level, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return raised_.wait_until(lock, deadline,
                            [&] { return level_.load(std::memory_order_relaxed) >= level; });
}

TreeCore::Event::~Event() {
  if (--core.depth_ > 0) return;
  core.afterEvent();
  if (core.handOver_.exchange(false)) std::this_thread::yield();
}

void TreeCore::call(std::function<void()> handler) {
  auto done = std::make_shared<Signal>();
  dispatch([handler = std::move(handler), done] {
    // Raised however the handler ends (the loop logs what it throws).
    struct Raise {
      ~Raise() { signal.raise(1); }
      Signal& signal;
    } raise{*done};
    handler();
  });
  done->waitFor(1);
}

std::shared_ptr<Signal> TreeCore::when(std::function<bool()> ready) {
  auto signal = std::make_shared<Signal>();
  dispatch([this, ready = std::move(ready), signal]() mutable {
    if (ready()) {
      signal->raise(1);
    } else {
      waiters_.emplace_back(std::move(ready), signal);
    }
  });
  return signal;
}

void TreeCore::afterEvent() {
  ACTORPIPE_DCHECK(onLoop());
  if (operation_) {
    Operation& op = *operation_;
    if (op.finished || (op.error && quiet(op))) {
      // The call is over: the loop lets go of it before the caller wakes.
      std::shared_ptr<Operation> over = std::move(operation_);
      endCollective();
      if (over->finished) handOver_ = true;
      over->stage.raise(Operation::kOver);
    } else if (op.error) {
      op.stage.raise(Operation::kFailed);
    }
  }
  for (size_t i = 0; i < waiters_.size();) {
    if (waiters_[i].first()) {
      waiters_[i].second->raise(1);
      waiters_.erase(waiters_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void TreeCore::setBroken(Error error) {
  ACTORPIPE_DCHECK(onLoop());
  if (broken_) return;
  broken_ = std::move(error);
  brokenSet_.store(true);
  // Seen by an arena call that set arenaView_ before: it is interrupted
  // here; one that sets it after sees brokenSet_ (adoptArena).
  if (HostArena* arena = arenaView_.load()) arena->interrupt();
}

TreeCore::TreeCore(RankInfo info_, TreeOptions options_)
    : info(std::move(info_)), options(options_) {}

TreeCore::~TreeCore() { shutdown(); }

// On the owner's thread (Tree's destructor, or a failed create()): a pipe
// callback may hold the last reference for a moment, and a Context must not
// be joined from its own callbacks.
void TreeCore::shutdown() {
  if (shutDown_.exchange(true)) return;
  close();
  if (context_) context_->join();
  if (rendezvousFileOwned_) removeRendezvousFile(info);
}

Error TreeCore::start() {
  if (Error error = makePlan(options, plan)) return error;
  pollWindow_ = pollWindowFor(info);
  context_ = std::make_shared<Context>(ContextOptions()
                                          .name("rank " + std::to_string(info.rank))
                                          .pollWindow(pollWindow_)
                                          .secret(options.secret));
  loop_ = &context_->core()->loop();
  DefaultBackends backends;
  backends.mptLanes = options.crossHostLanes;  // ranks on other hosts pick mpt
  backends.mptHost = info.address;
  registerDefaultBackends(*context_, backends);
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
  // The links are made here, before the loop sees any of them.
  if (me().parent >= 0) {
    auto link = std::make_unique<Link>();
    link->peer = me().parent;
    link->toParent = true;
    link->pipe = context_->connect(table[me().parent].url);
    Message hello;
    hello.metadata = encode(LinkFrame::introduce(LinkFrame::Role::kTree, info.rank));
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
  oneHost_ = oneHost;
  const int n = info.worldSize;
  // Formed whatever the plan says (every rank forms the same links, so a
  // rank whose plan differs is found by Tree::create, not by a link that
  // never comes).
  if (oneHost && n >= 2) {
    const int next = (info.rank + 1) % n;
    const int prev = (info.rank + n - 1) % n;
    Link* toNext = linkTo(next);
    if (!toNext) {
      auto link = std::make_unique<Link>();
      link->peer = next;
      link->pipe = context_->connect(table[next].url);
      Message hello;
      hello.metadata = encode(LinkFrame::introduce(LinkFrame::Role::kRing, info.rank));
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
  if (oneHost && powerOfTwo) {
    for (int step = 0; (1 << step) < n; ++step) {
      const int partner = info.rank ^ (1 << step);
      Link* link = linkTo(partner);
      if (!link) {
        auto created = std::make_unique<Link>();
        created->peer = partner;
        if (info.rank > partner) {
          created->pipe = context_->connect(table[partner].url);
          Message hello;
          hello.metadata = encode(LinkFrame::introduce(LinkFrame::Role::kCube, info.rank));
          created->pipe->write(std::move(hello), [](const Error&) {});
        }
        link = created.get();
        links_.push_back(std::move(created));
      }
      link->cubeStep = step;
      cube_.push_back(link);
    }
  }

  // Accepted pipes introduce themselves; the listener's callbacks run on
  // CAF's scheduler, so each accepted pipe is handed to the loop.
  std::weak_ptr<TreeCore> weak = shared_from_this();
  auto acceptNext = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> again = acceptNext;
  *acceptNext = [this, weak, again]() {
    listener_->accept([this, weak, again](const Error& error, std::shared_ptr<Pipe> pipe) {
      auto self = weak.lock();
      if (!self) return;
      if (error) {
        dispatch([this, error] {
          if (!acceptError_) acceptError_ = error;
        });
        return;
      }
      dispatch([this, weak, pipe] {
        pipe->readDescriptor([this, weak, pipe](const Error& error, Descriptor descriptor) {
          auto self = weak.lock();
          if (!self || error) return;
          pipe->read(Allocation{}, [](const Error&) {});
          LinkFrame hello;
          if (decode(descriptor.metadata, hello) || hello.kind != LinkFrame::Kind::kIntroduce) return;
          dispatch([this, pipe, hello] { onIntroduced(pipe, hello); });
        });
      });
      if (auto next = again.lock()) (*next)();
    });
  };
  (*acceptNext)();

  auto linked = [this] {
    for (const auto& link : links_) {
      if (!link->pipe) return false;
    }
    return true;
  };
  when([this, linked] { return linked() || static_cast<bool>(acceptError_); })
      ->waitFor(1, Clock::now() + options.rendezvousTimeout);
  Error error;
  call([&] {
    if (linked()) {
      for (auto& link : links_) readNext(*link);
      return;
    }
    std::string missing;
    for (const auto& link : links_) {
      if (!link->pipe) missing += (missing.empty() ? "" : ", ") + std::to_string(link->peer);
    }
    error = acceptError_ ? acceptError_
                         : ACTORPIPE_ERROR(RendezvousError, "rank(s) " + missing +
                                                                " never linked to rank " +
                                                                std::to_string(info.rank));
  });
  acceptNext.reset();
  if (error) return error;
  listener_->close();
  // The group is formed once every link's handshake is done (so links()
  // can say what each negotiated); a peer that died meanwhile shows up as
  // a failed link at the first collective.
  const auto deadline = Clock::now() + options.rendezvousTimeout;
  for (auto& link : links_) {
    while (!link->pipe->info().established && !brokenSet_.load() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return Error::kSuccess;
}

// Loop: a pipe accepted while the group forms said which rank it is.
void TreeCore::onIntroduced(const std::shared_ptr<Pipe>& pipe, const LinkFrame& hello) {
  const int rank = hello.rank;
  Link* link = linkTo(rank);
  using Role = LinkFrame::Role;
  const bool expected = hello.role == Role::kTree   ? link && link->childIndex >= 0
                        : hello.role == Role::kRing ? link && link->ringPrev && !link->toParent
                                                    : link && link->cubeStep >= 0 && !link->toParent;
  if (expected && !link->pipe) {
    link->pipe = pipe;
  } else if (expected) {
    // The first claim stands; a second process that says it is the
    // same rank (a stranger, or the rank started twice) is refused,
    // and the group does not form.
    const std::string reason =
        "rank " + std::to_string(rank) + " was claimed twice: a second process said it is rank " +
        std::to_string(rank) + " on a link to rank " + std::to_string(info.rank) +
        " (a rank started twice, or a stranger; a group secret keeps strangers out, see "
        "docs/security.md)";
    Message refusal;
    refusal.metadata = encode(LinkFrame::refuse(reason));
    pipe->write(std::move(refusal), [pipe](const Error&) {});
    if (!acceptError_) acceptError_ = ACTORPIPE_ERROR(RendezvousError, reason);
  }
}

Link* TreeCore::linkTo(int rank) {
  for (auto& link : links_) {
    if (link->peer == rank) return link.get();
  }
  return nullptr;
}

// Any thread: reads only what start() fixed (roles, pipes) and the arena,
// set before the group was handed out.
std::vector<std::string> TreeCore::describeLinks() const {
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
  if (arena_) {
    lines.push_back(arena_->describe());
  } else if (!arenaNote_.empty()) {
    lines.push_back("host arena: off (" + arenaNote_ + ")");
  }
  return lines;
}

// Caller's thread (Tree::close, or shutdown()).
void TreeCore::close() {
  if (closeAsked_.exchange(true)) return;
  if (!context_) return;
  // Empty inside the destructor: then nothing can be posted, only closed.
  if (!weak_from_this().expired()) {
    // A neighbour that sees our connection end must know we left on purpose
    // (after our last collective), not that we died in one.
    auto remaining = std::make_shared<int>(0);
    dispatch([this, remaining] {
      if (broken_) return;
      std::weak_ptr<TreeCore> weak = weak_from_this();
      for (auto& link : links_) {
        if (!link->pipe || link->departed) continue;
        ++*remaining;
        Message bye;
        bye.metadata = encode(LinkFrame::bye());
        link->pipe->write(std::move(bye), [weak, remaining](const Error&) {
          if (auto self = weak.lock()) self->dispatch([remaining] { --*remaining; });
        });
      }
    });
    when([remaining] { return *remaining == 0; })->waitFor(1, Clock::now() + kQuiesceGrace);
    // A failed group's abort notices must leave before the pipes close, or a
    // neighbour would only see our connection end and blame us.
    when([this] { return abortsInFlight_ == 0; })->waitFor(1, Clock::now() + kQuiesceGrace);
    if (brokenSet_.load()) {
      // And linger a little: a neighbour still pulling a tensor from us, or
      // whose write to us is pending, would see our end close before it reads
      // the notice behind them, and blame us for the failure.
      std::this_thread::sleep_for(kAbortLinger);
    }
    call([this] {
      closing_ = true;
      setBroken(ACTORPIPE_ERROR(ContextClosedError));
      if (operation_ && !operation_->finished && !operation_->error) {
        operation_->error = broken_;
      }
    });
  }
  context_->close();
}

// --- reading: one descriptor outstanding per link, always ------------------

void TreeCore::readNext(Link& link) {
  ACTORPIPE_DCHECK(onLoop());
  if (closing_ || link.departed || link.readingDescriptor || link.holdsDescriptor || link.readingData) return;
  link.readingDescriptor = true;
  std::weak_ptr<TreeCore> weak = shared_from_this();
  Link* target = &link;
  link.pipe->readDescriptor([weak, target](const Error& error, Descriptor descriptor) {
    auto self = weak.lock();
    if (!self) return;
    self->dispatch([self, target, error, descriptor = std::move(descriptor)]() mutable {
      self->onDescriptor(*target, error, std::move(descriptor));
    });
  });
}

void TreeCore::onDescriptor(Link& link, const Error& error, Descriptor descriptor) {
  link.readingDescriptor = false;
  if (closing_) return;
  if (error) {
    failLink(link, error);
    return;
  }
  LinkFrame frame;
  if (Error bad = decode(descriptor.metadata, frame)) {
    failLink(link, ACTORPIPE_ERROR(ProtocolError, "rank " + std::to_string(link.peer) + " sent " + bad.what()));
    return;
  }
  if (frame.kind == LinkFrame::Kind::kAbort) {
    // The same error, retold by each rank, with the number of the
    // collective its sender was in.
    const uint64_t collective = frame.collective;
    Error error = abortError(frame);
    // A sender already in a later collective than ours (the one we are in,
    // or our next) finished ours: ours can still end well, its data perhaps
    // just behind this notice on another link. Fail once ours is over. (This
    // link has nothing more for ours: a message for it would have been read
    // before this notice.)
    const uint64_t current = inCollective_.load();
    const uint64_t ours = current != 0 ? current : sequence_.load() + 1;
    if (collective > ours) {
      if (!deferredAbort_) {
        deferredAbort_ = error;
        deferredCollective_ = collective;
      }
      deferred_.store(true);
      // An arena call that ended meanwhile, on the caller's thread, may
      // have looked for deferred_ before it was set: end it here (one of
      // the two sees the other's store).
      if (current != 0 && inCollective_.load() != current) fail(deferredAbort_, deferredCollective_);
      return;
    }
    fail(error, collective);
    return;
  }
  if (frame.kind == LinkFrame::Kind::kRefuse) {
    failLink(link, ACTORPIPE_ERROR(RendezvousError, "rank " + std::to_string(link.peer) + " refused the link: " + frame.reason));
    return;
  }
  if (frame.kind == LinkFrame::Kind::kBye) {
    link.departed = true;  // and read no further: its end of the pipe is closing
    int none = -1;
    departedPeer_.compare_exchange_strong(none, link.peer);
    if (operation_ && !operation_->finished &&
        link.consumed < operation_->algorithm->expectedFrom(link)) {
      fail(ACTORPIPE_ERROR(RankFailedError, link.peer, "it left the group during a collective"));
    }
    return;
  }
  if (frame.kind != LinkFrame::Kind::kData) {
    failLink(link, ACTORPIPE_ERROR(ProtocolError, "rank " + std::to_string(link.peer) + " sent " +
                                                      frame.describe() + " on an established link"));
    return;
  }
  link.holdsDescriptor = true;
  link.descriptor = std::move(descriptor);
  link.frame = frame;
  pump(link);
}

void TreeCore::pump(Link& link) {
  if (!operation_ || operation_->finished || operation_->error || !link.holdsDescriptor ||
      link.readingData) {
    return;
  }
  if (link.consumed >= operation_->algorithm->expectedFrom(link)) return;  // the next collective's
  consume(link);
}

void TreeCore::consume(Link& link) {
  Operation& op = *operation_;
  Algorithm& algorithm = *op.algorithm;
  const Descriptor& d = link.descriptor;
  const uint64_t sequence = link.frame.collective;
  const uint64_t chunk = link.frame.index;
  const int contributors = link.frame.contributors;
  const std::string from = "rank " + std::to_string(link.peer);
  if (sequence != op.sequence || !algorithm.accepts(link, chunk)) {
    fail(ACTORPIPE_ERROR(LogicError, from + " sent " + link.frame.describe() + " during " + op.name +
                                         " #" + std::to_string(op.sequence) +
                                         ": ranks called different collectives"));
    return;
  }
  Landing landing;
  algorithm.land(link, chunk, contributors, landing);
  const std::vector<size_t>& lengths = landing.lengths;
  bool fits = d.tensors.size() == lengths.size() && d.payloads.empty();
  for (size_t i = 0; fits && i < lengths.size(); ++i) fits = d.tensors[i].length == lengths[i];
  if (!fits) {
    fail(ACTORPIPE_ERROR(LogicError, from + " called " + op.name + " #" +
                                         std::to_string(op.sequence) +
                                         " with tensors of other sizes than rank " +
                                         std::to_string(info.rank)));
    return;
  }
  Allocation allocation = std::move(landing.allocation);

  link.holdsDescriptor = false;
  link.readingData = true;
  std::weak_ptr<TreeCore> weak = shared_from_this();
  Link* target = &link;
  link.pipe->read(std::move(allocation), [weak, target, chunk, contributors](const Error& error) {
    auto self = weak.lock();
    if (!self) return;
    self->dispatch([self, target, chunk, contributors, error] {
      target->readingData = false;
      if (self->closing_) return;
      if (error) {
        self->failLink(*target, error);
        return;
      }
      ++target->consumed;
      self->readNext(*target);
      std::shared_ptr<Operation> op = self->operation_;
      if (!op || op->error) return;
      op->algorithm->onData(*target, chunk, contributors);
      self->checkFinished();
    });
  });
}

// --- failures ---------------------------------------------------------------

void TreeCore::failLink(Link& link, const Error& error) {
  fail(ACTORPIPE_ERROR(RankFailedError, link.peer,
                       "its link to rank " + std::to_string(info.rank) + " broke (" +
                           error.what() + ")"));
}

void TreeCore::fail(Error error, uint64_t collective) {
  ACTORPIPE_DCHECK(onLoop());
  if (broken_) return;
  setBroken(error);
  sendAbort(error, std::max(collective, sequence_.load()));
  if (operation_ && !operation_->finished && !operation_->error) operation_->error = error;
}

// Tells every neighbour, so the news crosses the whole tree: each rank that
// hears it fails and passes it on, naming the same rank.
void TreeCore::sendAbort(const Error& error, uint64_t collective) {
  const std::string frame = encode(abortFrame(collective, error));
  for (auto& link : links_) {
    if (!link->pipe) continue;
    Message message;
    message.metadata = frame;
    ++abortsInFlight_;
    std::weak_ptr<TreeCore> weak = weak_from_this();
    link->pipe->write(std::move(message), [weak](const Error&) {
      if (auto self = weak.lock()) self->dispatch([self] { --self->abortsInFlight_; });
    });
  }
}

bool TreeCore::readsInFlight() const {
  for (const auto& link : links_) {
    if (link->readingData) return true;
  }
  return false;
}

// Loop, when a collective is over: an abort notice it deferred (about a
// later collective) now fails the group.
void TreeCore::endCollective() {
  ACTORPIPE_DCHECK(onLoop());
  inCollective_.store(0);
  if (deferredAbort_) fail(deferredAbort_, deferredCollective_);
}

Error TreeCore::checkTensors(const char* name, const std::vector<TensorView>& tensors) const {
  for (const auto& tensor : tensors) {
    if (tensor.device.type != kCpuDeviceType) {
      return ACTORPIPE_ERROR(LogicError, std::string(name) + " on " + tensor.device.type +
                                             " tensors needs a build with that device's backend");
    }
    if (tensor.data == nullptr && tensor.count > 0) {
      return ACTORPIPE_ERROR(LogicError, std::string(name) + " got a null tensor");
    }
  }
  return Error::kSuccess;
}

// Loop: a collective the caller asked for begins, unless the group broke.
void TreeCore::startOperation(const std::shared_ptr<Operation>& operation) {
  switch (operation->route) {
    case Operation::Route::kTree: operation->algorithm = makeTreeSteps(*this, *operation); break;
    case Operation::Route::kRing: operation->algorithm = makeRing(*this, *operation); break;
    case Operation::Route::kHalving: operation->algorithm = makeHalving(*this, *operation); break;
    case Operation::Route::kExchange: operation->algorithm = makeExchange(*this, *operation); break;
    case Operation::Route::kDoubling: operation->algorithm = makeDoubling(*this, *operation); break;
  }
  for (auto& link : links_) {
    // A neighbour that left is an error only for collectives that need it
    // (a ring-only neighbour does not take part in a broadcast, say).
    if (link->departed && operation->algorithm->involves(*link) && !broken_) {
      fail(ACTORPIPE_ERROR(RankFailedError, link->peer, "it left the group (closed its Tree)"));
    }
  }
  if (broken_) {
    operation->error = broken_;
    operation->stage.raise(Operation::kOver);
    return;
  }
  operation->sequence = sequence_.load() + 1;
  inCollective_.store(operation->sequence);
  sequence_.store(operation->sequence);
  for (auto& link : links_) link->consumed = 0;
  operation_ = operation;
  operation->algorithm->begin();
  for (auto& link : links_) pump(*link);
  checkFinished();
}

std::chrono::milliseconds TreeCore::timeoutOf(const Operation& operation) const {
  return operation.timeout.count() > 0 ? operation.timeout : options.operationTimeout;
}

// Loop: the caller waited timeoutOf(operation) for it.
void TreeCore::timeOut(const std::shared_ptr<Operation>& operation) {
  if (operation_ != operation || operation->finished || operation->error) return;
  std::string waitingFor;
  for (const auto& link : links_) {
    if (link->consumed < operation->algorithm->expectedFrom(*link)) {
      waitingFor += (waitingFor.empty() ? "" : ", ") + std::to_string(link->peer);
    }
  }
  fail(ACTORPIPE_ERROR(TimeoutError,
                       std::string(operation->name) + " #" + std::to_string(operation->sequence) +
                           " at rank " + std::to_string(info.rank) + " waited " +
                           std::to_string(timeoutOf(*operation).count()) + " ms for rank(s) " +
                           (waitingFor.empty() ? "?" : waitingFor)));
}

Error TreeCore::run(std::shared_ptr<Operation> operation) {
  std::lock_guard<std::mutex> oneAtATime(callers_);
  if (Error error = checkTensors(operation->name, operation->tensors)) return error;
  Operation& op = *operation;
  dispatch([this, operation] { startOperation(operation); });

  const auto spinUntil = Clock::now() + spinWindow(op.totalBytes, pollWindow_);
  while (op.stage.level() == Operation::kRunning && Clock::now() < spinUntil) {
    std::this_thread::yield();
  }
  if (!op.stage.waitFor(Operation::kFailed, Clock::now() + timeoutOf(op))) {
    dispatch([this, operation] { timeOut(operation); });
    op.stage.waitFor(Operation::kFailed);
  }
  if (op.stage.level() < Operation::kOver) {
    // Reads and writes may still point into the caller's tensors: let them end.
    if (!op.stage.waitFor(Operation::kOver, Clock::now() + kQuiesceGrace)) {
      context_->close();
      op.stage.waitFor(Operation::kOver, Clock::now() + kQuiesceGrace);
    }
  }
  handOver_ = false;  // when the call ended before we slept, nobody waits to be handed the CPU
  return op.error;
}

} // namespace actorpipe::group
