// The launcher and the failure paths, checked from outside: each case runs
// actorpipe-run as a child and reads its output and exit status.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <doctest/doctest.h>

namespace {

struct Run {
  int status{-1};  // exit code, or 128 + signal
  std::string output;
  double seconds{0};
};

Run run(const std::string& arguments) {
  const auto start = std::chrono::steady_clock::now();
  Run result;
  const std::string command = std::string(ACTORPIPE_RUN) + " " + arguments + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int count(const std::string& text, const std::string& needle) {
  int found = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++found;
  }
  return found;
}

const std::string kCheck = GROUP_CHECK;

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
  for (int victim : {3, 0}) {
    CAPTURE(victim);
    Run r = run("-n 5 --keep-going -- " + kCheck + " die " + std::to_string(victim));
    INFO(r.output);
    CHECK(r.status == 128 + 9);
    CHECK(count(r.output, "saw: rank " + std::to_string(victim) + " failed") == 4);
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
