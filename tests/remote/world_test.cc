// A job's nodes (actors/remote/world.h): three processes started with the
// environment actorpipe-run, Slurm, OpenMPI's mpirun and torchrun set find
// each other with no address written by hand; each asks the next rank's
// actor for its rank, and rank 0 serves the others as a client/server. A
// rank that never comes is named.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <future>
#include <map>
#include <string>

#include "../support/harness.h"
#include "../support/shell.h"
#include "../support/slurm.h"
#include "remote_support.h"

#include <actorpipe/actors/remote/client_server.h>
#include <actorpipe/actors/remote/world.h>

using namespace remote_test;
using actorpipe::remote::Client;
using actorpipe::remote::Server;
using actorpipe::remote::World;
using actorpipe::remote::WorldOptions;
using testing::Child;
using Environment = std::map<std::string, std::string>;

namespace {

constexpr int kRanks = 3;

using heard_atom = caf::atom_constant<caf::atom("heard")>;

// A fresh directory for rendezvous files.
std::string freshDirectory() {
  char name[] = "/tmp/actorpipe-job-test-XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  return name;
}

// A TCP port nobody listens on now (torchrun's MASTER_PORT).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// One rank: joins, publishes an actor that answers its rank, asks the next
// rank's, and stays until the previous rank has its answer.
// `say` reports its one line (a Child's pipe, or stdout under a launcher).
int rankBody(const std::function<void(const std::string&)>& say, Environment environment,
             const std::string& source) {
  caf::actor_system_config config;
  actorpipe::remote::configure(config);
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  WorldOptions options;
  options.environment = std::move(environment);
  options.rendezvousTimeout = std::chrono::seconds(30);
  std::unique_ptr<World> world;
  if (auto error = World::join(system, options, world)) {
    say(std::string("join failed: ") + error.what());
    return 1;
  }
  CHILD_CHECK(world->size() == kRanks);
  CHILD_CHECK(world->source() == source);
  // Rank r leaves once it has its answer and rank r-1 has said it got
  // r's: leaving earlier could cut a reply still on its way.
  auto heard = std::make_shared<std::promise<void>>();
  auto once = std::make_shared<std::atomic<bool>>(false);
  int rank = world->rank();
  world->node().publish(system.spawn([rank, heard, once]() -> caf::behavior {
                        return {
                            [=](get_atom) { return int32_t(rank); },
                            [=](heard_atom) {
                              if (!once->exchange(true)) heard->set_value();
                            },
                        };
                      }),
                      "rank");
  caf::actor nextActor;
  int next = (rank + 1) % kRanks;
  int32_t answer = -1;
  std::string problem;
  // The next rank may not have published yet: ask until it has.
  for (int attempt = 0; attempt < 400 && answer < 0; ++attempt) {
    auto actor = world->remoteActor(next, "rank");
    if (!actor) {
      problem = system.render(actor.error());
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      continue;
    }
    nextActor = *actor;
    caf::scoped_actor asker{system};
    asker->request(*actor, std::chrono::seconds(10), get_atom::value)
        .receive([&](int32_t r) { answer = r; }, [&](caf::error& e) { problem = system.render(e); });
  }
  if (answer != next) {
    say("rank " + std::to_string(rank) + " never heard rank " + std::to_string(next) + ": " + problem);
    return 1;
  }
  // torch-ipc's client/server on the job's nodes: rank 0 serves, the
  // others connect to rank 0's URL, send their rank and a tensor of it, and
  // get the total back in a broadcast.
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
  if (rank == 0) {
    auto created = Server::create(world->node(), "sum");
    CHILD_CHECK(created);
    server = std::move(*created);
    CHILD_CHECK(!server->waitForClients(kRanks - 1, std::chrono::seconds(30)));
    std::vector<bool> seen(kRanks, false);
    double total = 0;
    for (int k = 1; k < kRanks; ++k) {
      int from = -1;
      caf::message m;
      CHILD_CHECK(!server->receiveAny(from, m, std::chrono::seconds(30)));
      CHILD_CHECK((m.match_elements<int32_t, Tensor>()));
      int32_t sender = m.get_as<int32_t>(0);
      CHILD_CHECK(sender > 0 && sender < kRanks && !seen[size_t(sender)]);
      seen[size_t(sender)] = true;
      CHILD_CHECK(sumOf(m.get_as<Tensor>(1)) == 4.0 * sender);
      total += sumOf(m.get_as<Tensor>(1));
    }
    CHILD_CHECK(!server->broadcast(caf::make_message(Tensor::full<double>({1}, total)),
                                   std::chrono::seconds(30)));
  } else {
    auto connected = Client::connect(world->node(), world->url(0), "sum", std::chrono::seconds(30));
    if (!connected) {
      say("rank " + std::to_string(rank) + " never reached rank 0's server: " +
          system.render(connected.error()));
      return 1;
    }
    client = std::move(*connected);
    CHILD_CHECK(!client->send(caf::make_message(int32_t(rank), Tensor::full<float>({2, 2}, float(rank))),
                              std::chrono::seconds(30)));
    caf::message m;
    CHILD_CHECK(!client->receive(m, std::chrono::seconds(30)));
    CHILD_CHECK(m.match_elements<Tensor>());
    CHILD_CHECK(sumOf(m.get_as<Tensor>(0)) == 4.0 * (kRanks * (kRanks - 1) / 2));
  }
  caf::anon_send(nextActor, heard_atom::value);
  CHILD_CHECK(heard->get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  say("rank " + std::to_string(rank) + " asked rank " + std::to_string(answer) + " and " +
      (rank == 0 ? "served" : "was served"));
  return 0;
}

void runJob(const std::string& source, const std::function<Environment(int rank)>& environmentOf) {
  std::vector<Child> ranks;
  for (int r = kRanks - 1; r >= 0; --r) {  // rank 0 last: the others wait for it
    Environment environment = environmentOf(r);
    ranks.push_back(Child::spawn(
        [environment, source](Child& self) {
          return rankBody([&](const std::string& line) { self.send(line); }, environment, source);
        },
        std::chrono::seconds(90)));
  }
  for (auto& child : ranks) {
    std::string line = child.receive(std::chrono::seconds(60));
    CHECK_MESSAGE(line.find(" asked rank ") != std::string::npos, line);
  }
  for (auto& child : ranks) CHECK(child.wait() == 0);
}

}  // namespace

TEST_CASE("actorpipe-run's environment, a rendezvous file") {
  std::string dir = freshDirectory();
  runJob("actorpipe", [&](int r) {
    return Environment{{"ACTORPIPE_RANK", std::to_string(r)},
                       {"ACTORPIPE_WORLD_SIZE", std::to_string(kRanks)},
                       {"ACTORPIPE_RENDEZVOUS", "file://" + dir + "/rank0"}};
  });
  CHECK(::access((dir + "/rank0").c_str(), F_OK) != 0);  // rank 0 removed it
  ::rmdir(dir.c_str());
}

TEST_CASE("torchrun's environment: MASTER_ADDR and MASTER_PORT") {
  int port = freePort();
  runJob("torchrun", [&](int r) {
    return Environment{{"RANK", std::to_string(r)},
                       {"WORLD_SIZE", std::to_string(kRanks)},
                       {"LOCAL_RANK", std::to_string(r)},
                       {"LOCAL_WORLD_SIZE", std::to_string(kRanks)},
                       {"MASTER_ADDR", "localhost"},
                       {"MASTER_PORT", std::to_string(port)}};
  });
}

TEST_CASE("Slurm's environment: srun's variables, the job's rendezvous directory") {
  std::string dir = freshDirectory();
  runJob("slurm", [&](int r) {
    return Environment{{"SLURM_PROCID", std::to_string(r)},
                       {"SLURM_NTASKS", std::to_string(kRanks)},
                       {"SLURM_JOB_NUM_NODES", "1"},
                       {"SLURM_NODEID", "0"},
                       {"SLURM_LOCALID", std::to_string(r)},
                       {"SLURM_JOBID", "4242"},
                       {"SLURM_STEP_ID", "0"},
                       {"SLURMD_NODENAME", "node001"},
                       {"SLURM_STEP_NODELIST", "node001"},
                       {"ACTORPIPE_RENDEZVOUS_DIR", dir}};
  });
  ::rmdir(dir.c_str());
}

TEST_CASE("OpenMPI's environment: mpirun's variables and its job's namespace") {
  std::string dir = freshDirectory();
  runJob("openmpi", [&](int r) {
    return Environment{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                       {"OMPI_COMM_WORLD_SIZE", std::to_string(kRanks)},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(kRanks)},
                       {"PMIX_NAMESPACE", "prterun-test-4242@1"},
                       {"ACTORPIPE_RENDEZVOUS_DIR", dir}};
  });
  ::rmdir(dir.c_str());
}

// Not a test alone: one rank of the job the next test has a real mpirun
// start (skipped unless asked for, with --no-skip).
TEST_CASE("a rank of the job a real launcher started" * doctest::skip()) {
  const char* source = std::getenv("ACTORPIPE_TEST_LAUNCHER_SOURCE");
  REQUIRE(source != nullptr);
  int rc = rankBody(
      [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      },
      {}, source);  // the environment is the launcher's own
  CHECK(rc == 0);
}

namespace {

// `launch` (a launcher's command, up to the program) starts kRanks ranks of
// this binary, each running the skipped case above (which checks the
// source its World found); every rank must ask its next one and exit 0.
void launchedJob(const std::string& launch, const std::string& dir) {
  char self[4096];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  REQUIRE(length > 0);
  self[length] = 0;
  auto run = testing::runShell("timeout -k 5 60 " + launch + " " + self +
                               " --no-skip --no-version --no-intro "
                               "-tc='a rank of the job a real launcher started'");
  INFO(run.output);
  CHECK(run.status == 0);
  size_t asked = 0;
  for (size_t at = run.output.find(" asked rank "); at != std::string::npos;
       at = run.output.find(" asked rank ", at + 1)) {
    ++asked;
  }
  CHECK(asked == size_t(kRanks));
  ::rmdir(dir.c_str());
}

}  // namespace

TEST_CASE("a real mpirun (OpenMPI's, scripts/setup.sh installs it) starts the job") {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    MESSAGE("mpirun is not installed: skipped (scripts/setup.sh installs openmpi-bin)");
    return;
  }
  std::string dir = freshDirectory();
  // As root (CI) mpirun needs --allow-run-as-root; three ranks on two CPUs
  // need --oversubscribe. The ranks never call MPI_Init: mpirun only starts
  // them and sets OMPI_COMM_WORLD_*, which is all a World reads.
  launchedJob("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(kRanks) +
                  " -x ACTORPIPE_RENDEZVOUS_DIR=" + dir + " -x ACTORPIPE_TEST_LAUNCHER_SOURCE=openmpi",
              dir);
}

TEST_CASE("a real srun (a private one-node Slurm cluster) starts the job") {
  testing::SlurmCluster slurm;
  if (!slurm.skipped().empty()) {
    MESSAGE("skipped: " << slurm.skipped());
    return;
  }
  REQUIRE_MESSAGE(slurm.failure().empty(), slurm.failure());
  std::string dir = freshDirectory();
  INFO(slurm.logs());
  launchedJob(slurm.srun() + " -n " + std::to_string(kRanks) +
                  " --overcommit --export=ALL,ACTORPIPE_RENDEZVOUS_DIR=" + dir +
                  ",ACTORPIPE_TEST_LAUNCHER_SOURCE=slurm",
              dir);
}

TEST_CASE("a rank that never comes: rank 0 names it, within the rendezvous timeout") {
  std::string dir = freshDirectory();
  caf::actor_system_config config;
  actorpipe::remote::configure(config);
  caf::actor_system system{config};
  WorldOptions options;
  options.environment = {{"ACTORPIPE_RANK", "0"},
                         {"ACTORPIPE_WORLD_SIZE", "2"},
                         {"ACTORPIPE_RENDEZVOUS", "file://" + dir + "/rank0"}};
  options.rendezvousTimeout = std::chrono::milliseconds(500);
  std::unique_ptr<World> world;
  auto error = World::join(system, options, world);
  REQUIRE(error);
  CHECK(!world);
  CHECK(std::string(error.what()).find("rank 1 of 2 never") != std::string::npos);
  MESSAGE(error.what());
  options.environment = {{"ACTORPIPE_WORLD_SIZE", "2"}};  // no rank at all
  error = World::join(system, options, world);
  REQUIRE(error);
  MESSAGE(error.what());
  std::remove((dir + "/rank0").c_str());
  ::rmdir(dir.c_str());
}
