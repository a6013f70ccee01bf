#pragma once
// What every rank of a group must choose alike, fixed once when the group
// forms: which all-reduce algorithm a call of a given size takes (tree,
// exchange, recursive doubling, ring, recursive halving) and how calls are
// cut into chunks. Ranks that chose differently would wait for messages the
// others never send; so Tree::create compares every rank's plan with rank
// 0's and fails the group at once, on every rank, naming the rank and the
// setting, when one differs.
//
// From TreeOptions, overridden by environment variables (for experiments;
// docs/groups.md, "Knobs for experiments"):
//   ACTORPIPE_GROUP_RING=0, ACTORPIPE_GROUP_EXCHANGE=0,
//   ACTORPIPE_GROUP_DOUBLING=0, ACTORPIPE_GROUP_HALVING=0   turn one off
//   ACTORPIPE_RING_THRESHOLD, ACTORPIPE_RING_CHUNK_BYTES,
//   ACTORPIPE_CHUNK_BYTES                                   byte counts
// The host arena is not part of it: ranks agree on it by themselves, on
// pipes (tree.cc, setUpArena), whatever each one's settings.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

struct TreeOptions;

struct CollectivePlan {
  bool ring{true};
  bool exchange{true};
  bool doubling{true};
  bool halving{true};
  size_t ringThreshold{0};
  size_t doublingThreshold{0};
  size_t chunkBytes{0};      // 0: each call's size decides (defaultChunkBytes)
  size_t ringChunkBytes{0};  // 0: each call's size decides (TreeCore::ringChunkBytes)

  // The settings as numbers, in a fixed order, and what each is called:
  // what the ranks compare.
  std::vector<uint64_t> fields() const;
  static std::string fieldName(size_t index);
};

// A variable that is set but is not "0"/"1" (switches) or a byte count is an
// error naming it; nothing is read again after this.
Error makePlan(const TreeOptions& options, CollectivePlan& plan,
               const std::map<std::string, std::string>& overrides = {});

}  // namespace actorpipe::group
