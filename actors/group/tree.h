#pragma once
// A process group joined as a tree, and its collectives.
//
//   std::unique_ptr<actorpipe::group::Tree> tree;
//   if (auto error = Tree::fromEnvironment({}, tree)) { ... error.what() ... }
//   std::vector<float> grads = ...;
//   tree->allReduce({tensorOf(grads)}, Reduction::sum());
//
// Every link is a Pipe from one Context per rank (uv "tcp", shm, basic, xth;
// mpt and cma with crossHostLanes): same-host links negotiate shm with basic
// (cma with lanes), links across hosts stay on TCP. See topology.h for the
// tree's shape.
//
// Results are bit-identical on every rank: contributions are reduced once, up
// the tree, each node combining its own data and then its children's in a
// fixed order; rank 0 finishes the reduction and the result travels back
// down as bytes. Large calls are cut into chunks, so chunk k climbs while
// chunk k-1 is being reduced and chunk k-2 descends. Large calls among ranks
// of one host go round a ring instead (TreeOptions::ringThreshold), or, for
// power-of-two groups, through recursive halving and doubling; there each
// value is likewise computed by exactly one rank, in a fixed order;
// small calls between two ranks are one exchange, and small calls among a
// power-of-two group on one host use recursive doubling, where partners
// compute the same expression in the same order.
//
// Ranks that all share one host skip the pipes for allReduce: they reduce
// through a shared-memory segment (TreeOptions::arenaSlotBytes), where each
// part is likewise folded by one rank in rank order (small calls: by every
// rank, the same way). links() says whether a group uses it.
//
// Failures: when a rank dies (or closes, or a link breaks), its neighbours
// see their pipe fail and tell every other rank through the tree, so every
// pending and later collective fails with a RankFailedError naming that
// rank. A collective that waits longer than operationTimeout fails with a
// TimeoutError (the few that Tree::create runs to form the group wait
// rendezvousTimeout instead: a rank still starting up is not late). A
// failed group stays failed: make a new Tree.
//
// One collective at a time per Tree (calls from several threads are
// serialized), and every rank must call the same collectives in the same
// order with the same shapes (a mismatch fails with a LogicError).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/errors.h>
#include <actorpipe/actors/group/tensor.h>
#include <actorpipe/actors/group/topology.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

struct TreeOptions {
  int radix{2};  // fan-out of the k-nomial tree (2: binomial)
  std::chrono::milliseconds rendezvousTimeout{std::chrono::seconds(60)};
  std::chrono::milliseconds operationTimeout{std::chrono::seconds(300)};
  // Bytes per pipelined chunk; 0 lets the size of each call decide.
  size_t chunkBytes{0};
  // When every rank is on one host, allReduce calls of at least this many
  // bytes go round a ring (reduce-scatter, then all-gather) instead of up and
  // down the tree: every rank then reduces a share at once, where the tree's
  // root reduces it all. Small calls stay on the tree (fewer hops).
  size_t ringThreshold{size_t{512} << 10};
  // Power-of-two groups of 4+ on one host: calls of at most this many bytes
  // use recursive doubling (log2 N exchanges; the tree takes 2 log2 N hops).
  size_t doublingThreshold{size_t{32} << 10};
  // Links between hosts: 0 keeps them on one TCP connection (uv + basic);
  // N > 0 also offers the mpt channel with N lanes, which links between
  // hosts then negotiate (same-host links pick cma or xth: with lanes the
  // default backends register cma, so that mpt does not win between ranks
  // of one host; actors/backends.h).
  size_t crossHostLanes{0};
  // When every rank is on one host, allReduce (and barrier) go through one
  // shared-memory segment on the callers' own threads (host_arena.h), cut
  // into rounds of at most this many bytes per tensor; the pipes still form
  // the group and report failures. 0 keeps every collective on the pipes
  // (so does ACTORPIPE_GROUP_ARENA=0).
  size_t arenaSlotBytes{size_t{1} << 20};
  // Shared by every rank: each pipe of the group (rendezvous, links) runs
  // a mutual challenge-response on it and refuses processes that lack it
  // (ContextOptions::secret), so a local stranger can neither read the rank
  // table nor take a rank's place. Empty: none, unless fromEnvironment()
  // finds one (ACTORPIPE_SECRET_FILE, ACTORPIPE_SECRET; actorpipe-run sets
  // one per job). docs/security.md, "Groups".
  std::string secret;
};

// Whether this rank has data for an allReduce (torch-ipc's uneven steps: a
// rank that ran out of work keeps calling with kNothing until all are done).
enum class Contribution { kData, kNothing };

class TreeCore;

class Tree {
 public:
  // Joins the group `info` describes: listens, meets the others, links up.
  static Error create(const RankInfo& info, const TreeOptions& options,
                      std::unique_ptr<Tree>& tree);
  // The same, with the RankInfo read from the environment (environment.h),
  // and the secret too when `options` has none.
  static Error fromEnvironment(const TreeOptions& options, std::unique_ptr<Tree>& tree);

  ~Tree();
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  int rank() const;
  int size() const;
  const RankInfo& info() const;
  const TreeNode& node() const;
  // One line per link: "parent 0: shm/basic", "child 3: tcp/basic".
  std::vector<std::string> links() const;

  // Every rank ends with op(all contributions) in `tensors`.
  Error allReduce(const std::vector<TensorView>& tensors, const Reduction& op);
  // Uneven steps: ranks with kNothing contribute nothing (their tensors
  // only give the shape and receive the result); `contributors` (if set)
  // gets how many ranks contributed. With no contributor at all, the result
  // is the reduction's identity (0 for sum, 1 for product, ...).
  Error allReduce(const std::vector<TensorView>& tensors, const Reduction& op,
                  Contribution contribution, int* contributors = nullptr);
  // Rank 0's tensors, copied into every rank's.
  Error broadcast(const std::vector<TensorView>& tensors);
  // Rank 0 passes one tensor per rank in `perRank` (each shaped like `mine`);
  // every rank receives its own into `mine`. Others pass an empty `perRank`.
  Error scatter(const std::vector<TensorView>& perRank, const TensorView& mine);
  Error barrier();

  // Fails pending collectives with a ContextClosedError; idempotent.
  void close();

 private:
  explicit Tree(std::shared_ptr<TreeCore> core);
  std::shared_ptr<TreeCore> core_;
};

} // namespace actorpipe::group
