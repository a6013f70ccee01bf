#include <actorpipe/actors/group/tree.h>

#include <actorpipe/actors/group/tree_core.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

namespace actorpipe::group {

Tree::Tree(std::shared_ptr<TreeCore> core) : core_(std::move(core)) {}

Tree::~Tree() { core_->shutdown(); }

namespace {

std::shared_ptr<Operation> allReduceOf(const std::vector<TensorView>& tensors, const Reduction& op,
                                       bool contributes, size_t chunkBytes) {
  auto operation = std::make_shared<Operation>();
  operation->kind = Operation::Kind::kAllReduce;
  operation->name = "allReduce";
  operation->tensors = tensors;
  operation->reduction = &op;
  operation->contributes = contributes;
  for (const auto& tensor : tensors) operation->totalBytes += tensor.bytes();
  operation->chunks = cutIntoChunks(
      tensors, chunkBytes ? chunkBytes : defaultChunkBytes(operation->totalBytes));
  operation->scratchBytes = packedExtent(operation->chunks);
  return operation;
}

// The collectives that form the group wait as long as the rendezvous: a
// rank still starting up is not late for a collective it has not been
// asked to call yet (a short operationTimeout must not fail the join).
// They run on the tree in one chunk, on every rank alike.
std::shared_ptr<Operation> formingOf(const TreeCore& core, const std::vector<TensorView>& tensors,
                                     const Reduction& op, Operation::Kind kind = Operation::Kind::kAllReduce) {
  constexpr size_t kOneChunk = size_t{1} << 20;
  auto operation = allReduceOf(tensors, op, true, kOneChunk);
  operation->kind = kind;
  if (kind == Operation::Kind::kBroadcast) operation->name = "broadcast";
  operation->timeout = core.options.rendezvousTimeout;
  return operation;
}


// Every rank's plan (plan.h) against rank 0's, before any collective that
// depends on it: rank 0's travels to all (a broadcast), each rank compares,
// the lowest rank that differs and its first differing setting are agreed
// on (a min all-reduce), then its value (a max all-reduce), so that every
// rank fails with the same words. These three run on the tree, in one chunk,
// whatever the plans say.
Error agreeOnPlan(Tree& tree, TreeCore& core) {
  static const Reduction kMin = Reduction::min();
  static const Reduction kMax = Reduction::max();
  const std::vector<uint64_t> mine = core.plan.fields();
  std::vector<int64_t> zeros(mine.begin(), mine.end());
  if (Error error = core.run(formingOf(core, {tensorOf(zeros)}, kMin, Operation::Kind::kBroadcast))) {
    return error;
  }
  const int64_t fields = static_cast<int64_t>(mine.size());
  std::vector<int64_t> first{INT64_MAX};
  for (size_t i = 0; i < mine.size(); ++i) {
    if (static_cast<uint64_t>(zeros[i]) != mine[i]) {
      first[0] = int64_t{tree.rank()} * fields + static_cast<int64_t>(i);
      break;
    }
  }
  if (Error error = core.run(formingOf(core, {tensorOf(first)}, kMin))) return error;
  if (first[0] == INT64_MAX) return Error::kSuccess;
  const int rank = static_cast<int>(first[0] / fields);
  const size_t field = static_cast<size_t>(first[0] % fields);
  std::vector<int64_t> theirs{rank == tree.rank() ? static_cast<int64_t>(mine[field]) : INT64_MIN};
  if (Error error = core.run(formingOf(core, {tensorOf(theirs)}, kMax))) return error;
  return ACTORPIPE_ERROR(LogicError, "rank " + std::to_string(rank) + " chose its collectives differently from rank 0: " +
                                         CollectivePlan::fieldName(field) + " is " + std::to_string(theirs[0]) +
                                         " there and " + std::to_string(zeros[field]) +
                                         " on rank 0 (every rank must run with the same TreeOptions and "
                                         "ACTORPIPE_GROUP_*/ACTORPIPE_*_BYTES settings)");
}

// Ranks on one host reduce through shared memory (host_arena.h). Rank 0
// creates the segment and the pipes carry its name; the name is removed once
// every rank has tried to map it, and if any rank could not, nobody uses it.
// Both steps are collectives on the pipes, so every rank of a one-host group
// takes them, even one whose settings turn the arena off: it contributes a 0
// (ranks configured differently still agree, on pipes).
Error setUpArena(Tree& tree, TreeCore& core) {
  if (!core.arenaPossible()) return Error::kSuccess;
  const bool wanted = core.arenaWanted();
  const ArenaOptions options = core.arenaOptions();
  std::vector<uint8_t> name(128, 0);
  std::string created;
  std::string why = wanted ? "" : "turned off (TreeOptions::arenaSlotBytes or ACTORPIPE_GROUP_ARENA)";
  std::unique_ptr<HostArena> arena;
  if (tree.rank() == 0 && wanted) {
    arena = HostArena::create(tree.size(), options, created, why);
    std::memcpy(name.data(), created.data(), std::min(created.size(), name.size() - 1));
  }
  static const Reduction kMin = Reduction::min();
  if (Error error = core.run(formingOf(core, {tensorOf(name)}, kMin, Operation::Kind::kBroadcast))) {
    HostArena::unlink(created);
    return error;
  }
  name.back() = 0;
  const std::string shared(reinterpret_cast<const char*>(name.data()));
  if (shared.empty() && why.empty()) why = "rank 0 did not create it";
  if (!shared.empty() && tree.rank() != 0 && wanted) {
    arena = HostArena::open(shared, tree.rank(), tree.size(), options, why);
  }
  std::vector<int32_t> mapped{arena ? 1 : 0};
  Error error = core.run(formingOf(core, {tensorOf(mapped)}, kMin));
  HostArena::unlink(created);
  if (error) return error;
  if (mapped[0] != 1) {
    arena.reset();
    if (why.empty()) why = "another rank did not map it";
  }
  core.adoptArena(std::move(arena), why);
  return Error::kSuccess;
}

} // namespace

Error Tree::create(const RankInfo& info, const TreeOptions& options, std::unique_ptr<Tree>& tree) {
  auto core = std::make_shared<TreeCore>(info, options);
  if (Error error = core->start()) {
    core->shutdown();
    return error;
  }
  std::unique_ptr<Tree> formed(new Tree(core));
  if (Error error = agreeOnPlan(*formed, *core)) return error;  // ~Tree shuts the core down
  if (Error error = setUpArena(*formed, *core)) return error;  // ~Tree shuts the core down
  tree = std::move(formed);
  return Error::kSuccess;
}

Error Tree::fromEnvironment(const TreeOptions& options, std::unique_ptr<Tree>& tree) {
  RankInfo info;
  if (Error error = rankInfoFromEnvironment(info)) return error;
  TreeOptions withSecret = options;
  if (withSecret.secret.empty()) {
    if (Error error = secretFromEnvironment(withSecret.secret)) return error;
  }
  return create(info, withSecret, tree);
}

int Tree::rank() const { return core_->info.rank; }
int Tree::size() const { return core_->info.worldSize; }
const RankInfo& Tree::info() const { return core_->info; }
const TreeNode& Tree::node() const { return core_->tree[core_->info.rank]; }
std::vector<std::string> Tree::links() const { return core_->describeLinks(); }


Error Tree::allReduce(const std::vector<TensorView>& tensors, const Reduction& op) {
  return allReduce(tensors, op, Contribution::kData, nullptr);
}

Error Tree::allReduce(const std::vector<TensorView>& tensors, const Reduction& op,
                      Contribution contribution, int* contributors) {
  if (core_->onArena()) {
    return core_->allReduceOnArena(tensors, op, contribution == Contribution::kData, contributors);
  }
  size_t total = 0;
  for (const auto& tensor : tensors) total += tensor.bytes();
  std::shared_ptr<Operation> operation;
  if (core_->useRing(total)) {
    operation = allReduceOf(tensors, op, contribution == Contribution::kData,
                            core_->ringChunkBytes(total));
    // Power-of-two groups: recursive halving, fewer steps for the same bytes.
    operation->route = core_->useHalving(total) ? Operation::Route::kHalving : Operation::Route::kRing;
  } else {
    operation = allReduceOf(tensors, op, contribution == Contribution::kData,
                            core_->plan.chunkBytes);
    if (core_->useExchange(total)) {
      operation->route = Operation::Route::kExchange;
    } else if (core_->useDoubling(total, operation->chunks.size())) {
      operation->route = Operation::Route::kDoubling;
    }
  }
  Error error = core_->run(operation);
  if (!error && contributors) *contributors = operation->contributors;
  return error;
}

Error Tree::broadcast(const std::vector<TensorView>& tensors) {
  static const Reduction unused = Reduction::sum();
  auto operation = allReduceOf(tensors, unused, true, core_->plan.chunkBytes);
  operation->kind = Operation::Kind::kBroadcast;
  operation->name = "broadcast";
  return core_->run(operation);
}

Error Tree::scatter(const std::vector<TensorView>& perRank, const TensorView& mine) {
  auto operation = std::make_shared<Operation>();
  operation->kind = Operation::Kind::kScatter;
  operation->name = "scatter";
  operation->tensors = {mine};
  operation->perRank = perRank;
  operation->totalBytes = mine.bytes();
  return core_->run(operation);
}

Error Tree::barrier() {
  static const Reduction unused = Reduction::sum();
  return allReduce({}, unused);
}

void Tree::close() { core_->close(); }

} // namespace actorpipe::group
