#pragma once
// Where each rank sits in the tree. Pure functions of the rank -> host
// table, so every rank computes the same tree without talking.
//
// Ranks on one host form a subtree (their links are same-host pipes, which
// negotiate shm with basic, or xth); the lowest rank of each host leads it, and
// the leaders form a tree across hosts. Both levels are k-nomial trees
// (binomial for radix 2), valid for any number of nodes and any radix >= 2.
#include <string>
#include <vector>

namespace actorpipe::group {

struct TreeNode {
  int parent{-1};             // -1 for the root (rank 0)
  std::vector<int> children;  // the order in which their contributions are reduced
  bool hostLeader{false};
};

// Index-level k-nomial tree over 0..n-1 rooted at 0.
int knomialParent(int index, int radix);
std::vector<int> knomialChildren(int index, int count, int radix);

// The tree over ranks 0..hosts.size()-1; hosts[r] names rank r's host.
// Rank 0 is the root whatever its host. Throws std::invalid_argument for a
// radix below 2 or an empty table.
std::vector<TreeNode> buildTree(const std::vector<std::string>& hosts, int radix = 2);

// Ranks in the subtree under `rank` (itself first), for scatter.
std::vector<int> subtreeOf(const std::vector<TreeNode>& tree, int rank);

} // namespace actorpipe::group
