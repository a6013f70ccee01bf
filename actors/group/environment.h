#pragma once
// Who am I in the group, read from the environment of whatever started us.
//
// Sources, in order (the first that names a rank wins):
//  1. actorpipe-run's: ACTORPIPE_RANK, ACTORPIPE_WORLD_SIZE, ACTORPIPE_LOCAL_RANK,
//     ACTORPIPE_LOCAL_SIZE, ACTORPIPE_RENDEZVOUS.
//  2. Slurm's: SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_NODEID,
//     SLURM_LOCALID, SLURM_JOBID (or SLURM_JOB_ID), SLURM_STEP_ID, SLURMD_NODENAME,
//     SLURM_STEP_NODELIST.
//  3. OpenMPI's: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//     OMPI_COMM_WORLD_LOCAL_SIZE.
//  4. torchrun's: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
//
// Rendezvous (where rank 0 publishes its address): ACTORPIPE_RENDEZVOUS if
// set ("tcp://host:port", or "file:///shared/path"); else torchrun's
// MASTER_ADDR:MASTER_PORT when present; else a file named after the job in
// ACTORPIPE_RENDEZVOUS_DIR (default $HOME/.actorpipe), which must be shared
// by every node of the job.
//
// ACTORPIPE_HOST overrides the host name ranks are grouped by (tests fake
// several "nodes" on one machine with it); ACTORPIPE_ADDRESS is the address
// other hosts reach this rank at (default: 127.0.0.1 on a one-node job, the
// host name's first IPv4 address otherwise).
//
// The group's secret (TreeOptions::secret, when the program sets none):
// ACTORPIPE_SECRET_FILE names a regular file that only its owner may read
// or write (mode & 077 == 0); its contents, less one trailing newline, are
// the secret. Else ACTORPIPE_SECRET holds it (empty: no secret).
// actorpipe-run sets a fresh ACTORPIPE_SECRET per job unless one of the two
// is set already. docs/security.md, "Groups", says what it protects.
#include <map>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

struct RankInfo {
  int rank{-1};
  int worldSize{0};
  int localRank{0};
  int localSize{1};
  int node{0};
  int nodes{1};
  std::string host;        // ranks with the same host share a subtree
  std::string address;     // IP this rank listens on for other ranks
  std::string rendezvous;  // "tcp://ip:port" or "file:///path"
  std::string source;      // "actorpipe", "slurm", "openmpi", "torchrun"
  std::string jobId;
};

// Reads the environment (or `overrides` first, for tests).
Error rankInfoFromEnvironment(RankInfo& info,
                              const std::map<std::string, std::string>& overrides = {});

// The secret from ACTORPIPE_SECRET_FILE or ACTORPIPE_SECRET (or `overrides`
// first); empty when neither is set. A file that is not a regular file, is
// open to group or others, cannot be read, or holds nothing is an error.
Error secretFromEnvironment(std::string& secret,
                            const std::map<std::string, std::string>& overrides = {});

// A host name to an IPv4 address ("localhost" -> "127.0.0.1"); numeric input
// is returned unchanged. Empty when it does not resolve.
std::string resolveIPv4(const std::string& host);

} // namespace actorpipe::group
