// A world (a job's nodes): the groups' environment and rendezvous, then a Node.
#include <actorpipe/actors/remote/world.h>

#include <actorpipe/actors/backends.h>
#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/errors.h>
#include <actorpipe/actors/group/rendezvous.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/options.h>

namespace actorpipe::remote {

Error World::join(caf::actor_system& system, WorldOptions options, std::unique_ptr<World>& world) {
  group::RankInfo info;
  if (Error error = group::rankInfoFromEnvironment(info, options.environment)) return error;
  if (options.node.secret.empty()) {
    if (Error error = group::secretFromEnvironment(options.node.secret, options.environment)) {
      return error;
    }
  }
  std::unique_ptr<World> made(new World());
  made->rank_ = info.rank;
  made->source_ = info.source;
  made->rendezvousAddress_ = info.rendezvous;
  options.node.listen = {"tcp://" + info.address + ":0", "shm://"};
  try {
    made->node_ = std::make_unique<Node>(system, options.node);
  } catch (const std::exception& e) {
    return ACTORPIPE_ERROR(group::RendezvousError, std::string("rank ") + std::to_string(info.rank) +
                                                " could not make its node: " + e.what());
  }
  // The rendezvous has a Context of its own: tcp only, the job's secret.
  made->rendezvous_ = std::make_shared<Context>(
      ContextOptions().name("job rendezvous, rank " + std::to_string(info.rank)).secret(options.node.secret));
  DefaultBackends tcpOnly;
  tcpOnly.shm = false;
  tcpOnly.cma = false;
  tcpOnly.xth = false;
  registerDefaultBackends(*made->rendezvous_, tcpOnly);
  std::vector<group::Member> table;
  Error error = group::rendezvous(*made->rendezvous_, info, made->node_->url("tcp"),
                                  options.rendezvousTimeout, table);
  if (error) return error;
  for (const auto& member : table) {
    made->urls_.push_back(member.url);
    made->hosts_.push_back(member.host);
  }
  world = std::move(made);
  return Error::kSuccess;
}

World::~World() {
  if (rendezvous_) {
    rendezvous_->close();
    rendezvous_->join();
  }
  if (rank_ == 0) {
    group::RankInfo info;
    info.rank = 0;
    info.rendezvous = rendezvousAddress_;
    group::removeRendezvousFile(info);
  }
}

caf::expected<caf::actor> World::remoteActor(int rank, const std::string& name) {
  if (rank < 0 || rank >= size()) {
    return makeError(RemoteError::kNoSuchActor, "rank " + std::to_string(rank) + " is not in a job of " +
                                                    std::to_string(size()));
  }
  return node_->remoteActor(url(rank), name);
}

} // namespace actorpipe::remote
