#pragma once
// SlurmTree: a Tree built from a Slurm job step (srun), as torch-ipc's was.
//
// Ranks come from SLURM_PROCID / SLURM_NTASKS, hosts from SLURMD_NODENAME
// (or SLURM_STEP_NODELIST expanded, indexed by SLURM_NODEID), so the tasks
// of one node form a same-host subtree. Rank 0 publishes its address in
// $ACTORPIPE_RENDEZVOUS_DIR (default ~/.actorpipe, which must be shared by
// the nodes) under the job and step id, written atomically; or set
// ACTORPIPE_RENDEZVOUS=tcp://host:port to skip the file. The secret comes
// from SlurmTreeOptions::tree.secret, else from the environment as for
// Tree::fromEnvironment (ACTORPIPE_SECRET_FILE or ACTORPIPE_SECRET).
// docs/groups.md has an sbatch script.
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/actors/group/tree.h>

namespace actorpipe::group {

struct SlurmTreeOptions {
  TreeOptions tree;
  // Tasks sharing one GPU: a task's GPU index is SLURM_LOCALID / tasksPerGpu.
  int tasksPerGpu{1};
};

struct SlurmPlacement {
  int node{0};
  int localRank{0};
  int gpu{0};
  std::string nodeName;
};

class SlurmTree {
 public:
  // Fails with a RendezvousError outside a Slurm job step.
  static Error create(const SlurmTreeOptions& options, std::unique_ptr<Tree>& tree,
                      SlurmPlacement& placement);
};

// Slurm's compact host lists: "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5.
std::vector<std::string> expandNodeList(const std::string& list);

} // namespace actorpipe::group
