#pragma once
// A world: the nodes of a job. Every process of a job started by actorpipe-run, Slurm,
// OpenMPI's mpirun or torchrun (or a Kubernetes StatefulSet that sets
// torchrun's variables) becomes a Node and learns every other rank's node
// URL, with no address written by hand.
//
//   std::unique_ptr<remote::World> world;
//   if (Error e = remote::World::join(system, remote::WorldOptions(), world)) ...
//   world->node().publish(worker, "worker");
//   auto next = world->remoteActor((world->rank() + 1) % world->size(), "worker");
//
// Who this process is comes from the environment as the process groups read
// it (actors/group/environment.h: ACTORPIPE_RANK..., SLURM_PROCID...,
// OMPI_COMM_WORLD_RANK..., RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), and the
// URLs are exchanged by the groups' rendezvous (actors/group/rendezvous.h:
// rank 0 listens at the rendezvous address, or publishes its address in
// the rendezvous file; every rank checks in; everyone gets the table, or
// the same clear RendezvousError naming the missing ranks). The node listens
// on the address other hosts reach this rank at (ACTORPIPE_ADDRESS, or the
// host name's first IPv4 address; 127.0.0.1 on a one-host job) and on shm.
// The secret, unless NodeOptions::secret is set, comes from
// ACTORPIPE_SECRET_FILE or ACTORPIPE_SECRET, for the node and the
// rendezvous alike. Node identity stays the node's own (boot id, network
// namespace, pid), never the host name.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/actors/remote/node.h>

namespace actorpipe {
class Context;
} // namespace actorpipe

namespace actorpipe::remote {

struct WorldOptions {
  NodeOptions node;  // its listen addresses are the job's (see above)
  std::chrono::milliseconds rendezvousTimeout{std::chrono::seconds(60)};
  // Read before the environment (tests; or a program that knows better).
  std::map<std::string, std::string> environment;
};

class World {
 public:
  // Joins the job the environment describes; on success `world` holds this
  // rank's node and every rank's URL.
  static Error join(caf::actor_system& system, WorldOptions options, std::unique_ptr<World>& world);
  ~World();

  Node& node() { return *node_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(urls_.size()); }
  // "actorpipe", "slurm", "openmpi" or "torchrun".
  const std::string& source() const { return source_; }
  // Rank r's node URL (tcp) and host name.
  const std::string& url(int rank) const { return urls_.at(static_cast<size_t>(rank)); }
  const std::string& host(int rank) const { return hosts_.at(static_cast<size_t>(rank)); }
  // The actor rank `rank` published as `name` (Node::remoteActor; on this
  // rank, its own).
  caf::expected<caf::actor> remoteActor(int rank, const std::string& name);

 private:
  World() = default;

  std::unique_ptr<Node> node_;
  std::shared_ptr<Context> rendezvous_;  // rank 0's holds the rendezvous file
  int rank_{-1};
  std::string source_;
  std::string rendezvousAddress_;
  std::vector<std::string> urls_;
  std::vector<std::string> hosts_;
};

} // namespace actorpipe::remote
