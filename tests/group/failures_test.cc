// The launcher and the failure paths, checked from outside: each case runs
// actorpipe-run as a child and reads its output and exit status.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include <doctest/doctest.h>

#include "../support/shell.h"
#include "../support/slurm.h"

namespace {

using Run = testing::ShellRun;
using testing::runShell;

Run run(const std::string& arguments) {
  return runShell(std::string(ACTORPIPE_RUN) + " " + arguments);
}

int count(const std::string& text, const std::string& needle) {
  int found = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++found;
  }
  return found;
}

const std::string kCheck = GROUP_CHECK;

// A port nobody listens on right now.
int freePort() {
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(probe, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(probe);
  return ntohs(address.sin_port);
}

} // namespace

TEST_CASE("actorpipe-run gives each rank its number and prefixes its lines") {
  Run r = run("-n 3 -- sh -c 'echo hello $ACTORPIPE_RANK of $ACTORPIPE_WORLD_SIZE; "
              "echo oops $ACTORPIPE_RANK >&2'");
  INFO(r.output);
  CHECK(r.status == 0);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefix = "[" + std::to_string(rank) + "] ";
    CHECK(count(r.output, prefix + "hello " + std::to_string(rank) + " of 3\n") == 1);
    CHECK(count(r.output, prefix + "oops " + std::to_string(rank) + "\n") == 1);
  }
}

TEST_CASE("actorpipe-run stops the others when one rank fails, with its status") {
  Run r = run("-n 3 --grace 1 -- sh -c 'if [ $ACTORPIPE_RANK = 1 ]; then exit 7; fi; sleep 60'");
  INFO(r.output);
  CHECK(r.status == 7);
  CHECK(r.seconds < 20);
  CHECK(count(r.output, "rank 1 exited with status 7") == 1);
}

TEST_CASE("actorpipe-run reports a rank killed by a signal") {
  Run r = run("-n 2 -- sh -c 'if [ $ACTORPIPE_RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  INFO(r.output);
  CHECK(r.status == 128 + 9);
  CHECK(r.seconds < 20);
}

TEST_CASE("actorpipe-run rejects a missing rank count or program") {
  CHECK(run("-- true").status == 2);
  CHECK(run("-n 2").status == 2);
  CHECK(run("-n 1 -- /nonexistent/program").status == 127);
}

TEST_CASE("a rank killed mid-collective is named by every survivor") {
  // 16 MiB: 5 ranks go round the ring, 4 use recursive halving.
  for (auto [ranks, victim] : {std::pair{5, 3}, std::pair{5, 0}, std::pair{4, 1}}) {
    CAPTURE(ranks);
    CAPTURE(victim);
    Run r = run("-n " + std::to_string(ranks) + " --keep-going -- " + kCheck + " die " +
                std::to_string(victim));
    INFO(r.output);
    CHECK(r.status == 128 + 9);
    CHECK(count(r.output, "saw: rank " + std::to_string(victim) + " failed") == ranks - 1);
    CHECK(count(r.output, "FAILED") == 0);
    CHECK(r.seconds < 60);
  }
}

TEST_CASE("a rank killed during small collectives is named by every survivor") {
  // 5 ranks: the tree; 8 ranks: recursive doubling.
  for (int ranks : {5, 8}) {
    CAPTURE(ranks);
    Run r = run("-n " + std::to_string(ranks) + " --keep-going -- " + kCheck + " die 2 small");
    INFO(r.output);
    CHECK(r.status == 128 + 9);
    CHECK(count(r.output, "saw: rank 2 failed") == ranks - 1);
    CHECK(count(r.output, "FAILED") == 0);
    CHECK(r.seconds < 60);
  }
}

TEST_CASE("a rank that never shows up fails the rendezvous of every other rank") {
  Run r = run("-n 3 -- " + kCheck + " absent 2");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "saw: rendezvous failed: rank 2 of 3 never showed up") == 2);
}

TEST_CASE("torchrun's variables: rank 0 listens on MASTER_ADDR:MASTER_PORT") {
  // Rank 1 starts first and retries until rank 0 listens.
  const std::string common = "env -u ACTORPIPE_RANK WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=" +
                             std::to_string(freePort());
  Run r = runShell("sh -c '" + common + " RANK=1 " + kCheck + " sum & sleep 0.3; " + common +
                   " RANK=0 " + kCheck + " sum; zero=$?; wait $!; one=$?; exit $((zero + one))'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "ok sum") == 1);
}

TEST_CASE("OpenMPI's variables, with the rendezvous in a shared directory") {
  char dir[] = "/tmp/group-ompi-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string common = std::string("env OMPI_COMM_WORLD_SIZE=3 PMIX_NAMESPACE=test-") +
                             std::to_string(::getpid()) + " ACTORPIPE_RENDEZVOUS_DIR=" + dir;
  std::string script;
  for (int rank = 2; rank >= 1; --rank) {
    script += common + " OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + " " + kCheck + " sum & ";
  }
  script += common + " OMPI_COMM_WORLD_RANK=0 " + kCheck + " sum; status=$?; "
            "for p in $(jobs -p); do wait $p || status=1; done; exit $status";
  Run r = runShell("sh -c '" + script + "'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "ok sum") == 1);
  CHECK(::rmdir(dir) == 0);  // empty: rank 0 removed its file
}

TEST_CASE("a real mpirun (OpenMPI's, scripts/setup.sh installs it) starts the ranks") {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    MESSAGE("mpirun is not installed: skipped (scripts/setup.sh installs openmpi-bin)");
    return;
  }
  char dir[] = "/tmp/group-mpirun-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  // As root (CI) mpirun needs --allow-run-as-root, and three ranks on two
  // CPUs --oversubscribe. The ranks never call MPI_Init: mpirun starts them
  // and sets OMPI_COMM_WORLD_* and PMIX_NAMESPACE, which is what they read.
  Run r = runShell("timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 3 -x "
                   "ACTORPIPE_RENDEZVOUS_DIR=" + std::string(dir) + " " + kCheck + " sum links");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "ok sum") == 1);
  CHECK(count(r.output, "ok links") == 1);
  CHECK(::rmdir(dir) == 0);  // empty: rank 0 removed its file
}

TEST_CASE("a real srun (a private one-node Slurm cluster) starts the ranks") {
  testing::SlurmCluster slurm;
  if (!slurm.skipped().empty()) {
    MESSAGE("skipped: " << slurm.skipped());
    return;
  }
  REQUIRE_MESSAGE(slurm.failure().empty(), slurm.failure());
  char dir[] = "/tmp/group-srun-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  // Three tasks on however many CPUs: --overcommit.
  Run r = runShell("timeout -k 5 60 " + slurm.srun() + " -n 3 --overcommit --export=ALL,"
                   "ACTORPIPE_RENDEZVOUS_DIR=" + std::string(dir) + " " + kCheck + " sum links");
  INFO(r.output);
  INFO(slurm.logs());
  CHECK(r.status == 0);
  CHECK(count(r.output, "ok sum") == 1);
  CHECK(count(r.output, "ok links") == 1);
  CHECK(::rmdir(dir) == 0);  // empty: rank 0 removed its file
}

TEST_CASE("a group of one") {
  Run r = run("-n 1 -- " + kCheck + " sum uneven broadcast");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(count(r.output, "ok broadcast") == 1);
}
