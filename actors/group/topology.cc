#include <actorpipe/actors/group/topology.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace actorpipe::group {

int knomialParent(int index, int radix) {
  if (index <= 0) return -1;
  // Clear the lowest non-zero base-radix digit.
  long place = 1;
  while (index % (place * radix) == 0) place *= radix;
  const long digit = (index / place) % radix;
  return static_cast<int>(index - digit * place);
}

std::vector<int> knomialChildren(int index, int count, int radix) {
  std::vector<int> children;
  // A child differs from `index` in one digit below index's lowest non-zero one.
  for (long place = 1; place < count; place *= radix) {
    if (index % (place * radix) != 0) break;
    for (long digit = 1; digit < radix; ++digit) {
      const long child = index + digit * place;
      if (child < count) children.push_back(static_cast<int>(child));
    }
  }
  return children;
}

std::vector<TreeNode> buildTree(const std::vector<std::string>& hosts, int radix) {
  if (radix < 2) throw std::invalid_argument("tree radix must be at least 2");
  if (hosts.empty()) throw std::invalid_argument("a tree needs at least one rank");
  const int n = static_cast<int>(hosts.size());

  // Hosts in order of their lowest rank, so rank 0's host comes first and
  // rank 0 leads it.
  std::vector<std::string> hostOrder;
  std::map<std::string, std::vector<int>> ranksOfHost;
  for (int r = 0; r < n; ++r) {
    auto& ranks = ranksOfHost[hosts[r]];
    if (ranks.empty()) hostOrder.push_back(hosts[r]);
    ranks.push_back(r);
  }

  std::vector<TreeNode> tree(n);
  auto link = [&](int parent, int child) {
    tree[child].parent = parent;
    tree[parent].children.push_back(child);
  };
  std::vector<int> leaders;
  for (const auto& host : hostOrder) {
    const auto& local = ranksOfHost[host];
    leaders.push_back(local[0]);
    tree[local[0]].hostLeader = true;
    const int size = static_cast<int>(local.size());
    for (int i = 0; i < size; ++i) {
      for (int c : knomialChildren(i, size, radix)) link(local[i], local[c]);
    }
  }
  const int hostCount = static_cast<int>(leaders.size());
  for (int i = 0; i < hostCount; ++i) {
    for (int c : knomialChildren(i, hostCount, radix)) link(leaders[i], leaders[c]);
  }
  return tree;
}

std::vector<int> subtreeOf(const std::vector<TreeNode>& tree, int rank) {
  std::vector<int> ranks{rank};
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (int c : tree[ranks[i]].children) ranks.push_back(c);
  }
  return ranks;
}

} // namespace actorpipe::group
