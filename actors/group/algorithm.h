#pragma once
// One collective's steps on the pipes. Each algorithm is a unit of its own
// behind this interface (tree_algorithm.cc: the tree's all-reduce,
// broadcast and scatter; ring.cc; halving.cc; pairwise.cc: the exchange and
// recursive doubling). The plan picks one per call (Operation::Route), the
// same on every rank; the TreeCore owns the links and drives any of them:
// it reads each link's next message, asks the algorithm whether it belongs
// here and where its tensors land, reads them there, and hands the
// algorithm the arrival. The algorithm writes what it sends through
// write(), and the call is over once allIn() and every write is done.
//
// Loop only, like everything of the TreeCore (tree_core.h). An algorithm
// lives as long as its Operation; messages are numbered by the algorithm
// (a chunk, or step * chunks + chunk), and the number travels in the frame.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <actorpipe/actors/group/rendezvous.h>
#include <actorpipe/actors/group/topology.h>
#include <actorpipe/runtime/message.h>

namespace actorpipe::group {

class TreeCore;
struct Link;
struct Operation;

// Where an arriving message's tensors go.
struct Landing {
  Allocation allocation;
  std::vector<size_t> lengths;
  void add(void* at, size_t length) {
    allocation.tensors.push_back({CpuBuffer{at}});
    lengths.push_back(length);
  }
};

class Algorithm {
 public:
  Algorithm(TreeCore& core, Operation& op) : core_(core), op_(op) {}
  virtual ~Algorithm() = default;
  Algorithm(const Algorithm&) = delete;
  Algorithm& operator=(const Algorithm&) = delete;

  // Sends what goes first.
  virtual void begin() = 0;
  // Whether `link` takes part (a neighbour that left fails only the calls
  // it takes part in).
  virtual bool involves(const Link& link) const = 0;
  // How many messages of this call `link` brings.
  virtual size_t expectedFrom(const Link& link) const = 0;
  // Whether message `index` may come on `link` now (else the ranks called
  // different collectives).
  virtual bool accepts(const Link& link, uint64_t index) const = 0;
  // Where message `index`, which says `contributors` ranks are in it, lands.
  virtual void land(Link& link, uint64_t index, int contributors, Landing& landing) = 0;
  // Message `index` is in place.
  virtual void onData(Link& link, uint64_t index, int contributors) = 0;
  // Whether every message it waits for has arrived.
  virtual bool allIn() const = 0;

 protected:
  // What the algorithms share, from the TreeCore.
  const RankInfo& info() const;
  const TreeNode& me() const;
  const std::vector<TreeNode>& tree() const;
  const std::vector<std::unique_ptr<Link>>& links() const;
  Link& ringNext() const;
  Link& ringPrev() const;
  const std::vector<Link*>& cube() const;
  // `sent` (if set) runs on the loop once the peer has the message.
  void write(Link& link, Message message, std::function<void()> sent = nullptr);
  // The message for `chunk` of this call (numbered `chunk`), with its bytes
  // from the caller's tensors when `withTensors`.
  Message chunkMessage(size_t chunk, int contributors, bool withTensors) const;
  // Fails the group (every rank hears of it).
  void fail(Error error);
  // Inside a catch block: fails the group with what a reduction threw
  // (anything: a custom reduction is the user's code).
  void reductionFailed();
  // Makes `chunk` of the caller's tensors the result of `contributors`
  // ranks' data (finish() of the reduction, or its identity for none), and
  // the call's contributor count. May throw what a custom reduction throws.
  void finishChunk(size_t chunk, int contributors);
  // `link`'s scratch area, grown to at least `bytes` (and the call's).
  uint8_t* scratch(Link& link, size_t bytes);
  // Lands `chunk`: straight into the caller's tensors (`inPlace`: final
  // bytes), or packed into `link`'s scratch area (data to combine).
  void landChunk(Link& link, size_t chunk, bool inPlace, Landing& landing);

  TreeCore& core_;
  Operation& op_;
};

std::unique_ptr<Algorithm> makeTreeSteps(TreeCore& core, Operation& op);
std::unique_ptr<Algorithm> makeRing(TreeCore& core, Operation& op);
std::unique_ptr<Algorithm> makeHalving(TreeCore& core, Operation& op);
std::unique_ptr<Algorithm> makeExchange(TreeCore& core, Operation& op);
std::unique_ptr<Algorithm> makeDoubling(TreeCore& core, Operation& op);

} // namespace actorpipe::group
