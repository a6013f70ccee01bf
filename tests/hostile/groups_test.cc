// Strangers against a process group: docs/security.md, "Groups". Every rank
// and every attacker is a real process. The attacker is a local process that
// runs actorpipe and speaks the group's text protocol: it finds rank 0's
// rendezvous (here it reads the rendezvous file; a port scan does as well)
// and says "hello 1 ...", or links to a rank as someone else. Before this
// suite the first such claim won: a stranger got the whole rank table, took
// rank 1's place and stalled the group.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/frames.h>
#include <actorpipe/actors/group/slurm_tree.h>
#include <actorpipe/actors/group/tree.h>

#include "../support/harness.h"
#include "../support/hostile.h"
#include "../support/shell.h"

using namespace actorpipe;
using namespace testing;
namespace g = actorpipe::group;
using Clock = std::chrono::steady_clock;

namespace {

// Well under every rendezvous timeout below (30 s), well over what a loaded
// two-core machine needs for a rendezvous that fails at once.
constexpr double kPrompt = 10.0;
const auto kRendezvousTimeout = std::chrono::seconds(30);

// A fresh directory for one test's rendezvous file (and secret files).
struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/hostile-groups-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
  std::string rendezvous() const { return "file://" + path + "/rank0"; }
};

g::RankInfo rankInfo(int rank, int worldSize, const std::string& rendezvous) {
  g::RankInfo info;
  info.rank = rank;
  info.worldSize = worldSize;
  info.localRank = rank;
  info.localSize = worldSize;
  info.host = "testhost";
  info.address = "127.0.0.1";
  info.rendezvous = rendezvous;
  info.source = "actorpipe";
  info.jobId = "hostile";
  return info;
}

// What a rank process reports: "formed" once the group formed and summed
// right, else "failed <seconds> <rendezvous|other> <what>" (seconds: from
// its start until Tree::create returned).
struct Outcome {
  bool formed{false};
  double seconds{0};
  bool rendezvousError{false};
  std::string what;
  std::string line;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Outcome parseOutcome(const std::string& line) {
  Outcome o;
  o.line = line;
  if (line == "formed") {
    o.formed = true;
    return o;
  }
  std::istringstream in(line);
  std::string word, kind;
  if (in >> word >> o.seconds >> kind && word == "failed") {
    o.rendezvousError = kind == "rendezvous";
    std::getline(in, o.what);
  }
  return o;
}

Child spawnRank(const g::RankInfo& info, const std::string& secret) {
  return Child::spawn(
      [info, secret](Child& self) {
        g::TreeOptions options;
        options.rendezvousTimeout = kRendezvousTimeout;
        options.operationTimeout = std::chrono::seconds(20);
        options.secret = secret;
        const auto start = Clock::now();
        std::unique_ptr<g::Tree> tree;
        Error error = g::Tree::create(info, options, tree);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        const char* kind = error.isOfType<g::RendezvousError>() ? "rendezvous" : "other";
        if (!error) {
          std::vector<int32_t> values(8, info.rank + 1);
          error = tree->allReduce({g::tensorOf(values)}, g::Reduction::sum());
          const int n = info.worldSize;
          if (!error && values[0] != n * (n + 1) / 2) {
            error = ACTORPIPE_ERROR(LogicError, "wrong sum " + std::to_string(values[0]));
          }
          kind = "collective";
        }
        self.send(error ? "failed " + std::to_string(seconds) + " " + kind + " " + error.what()
                        : "formed");
        return 0;
      },
      std::chrono::seconds(50));
}

Outcome outcomeOf(Child& rank) {
  Outcome o = parseOutcome(rank.receive(std::chrono::seconds(45)));
  CHECK(rank.wait(std::chrono::seconds(20)) == 0);
  return o;
}

void expectFormed(std::initializer_list<Child*> ranks) {
  for (Child* rank : ranks) {
    Outcome o = outcomeOf(*rank);
    INFO(o.line);
    CHECK(o.formed);
  }
}

// Each failed to form the group, soon, with a RendezvousError that says `why`.
void expectPromptFailure(std::initializer_list<Child*> ranks, const std::string& why) {
  for (Child* rank : ranks) {
    Outcome o = outcomeOf(*rank);
    INFO(o.line);
    CHECK(o.rendezvousError);
    CHECK(contains(o.what, why));
    CHECK(o.seconds < kPrompt);
  }
}

// In an attacker: rank 0's rendezvous address, once rank 0 published it.
std::string waitForRankZero(const std::string& rendezvous) {
  const std::string path = rendezvous.substr(std::string("file://").size());
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string url;
    if (std::getline(in, url) && !url.empty()) return url;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// Connections to `url` (tcp://127.0.0.1:<port>) whose accepting end is still
// open: ESTABLISHED, or CLOSE_WAIT (the peer hung up, the owner has not yet
// seen it and closed its descriptor). From /proc/net/tcp, so that the test
// sees when another process let go of a connection.
int openConnectionsTo(const std::string& url) {
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  int open = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    if (!(fields >> slot >> local >> remote >> state)) continue;
    const int localPort = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
    if (localPort == port && (state == "01" || state == "08")) ++open;
  }
  return open;
}

Message text(const std::string& metadata) {
  Message message;
  message.metadata = metadata;
  return message;
}

// What a rank says to rank 0 (actors/group/frames.h).
std::string helloFrame(int rank, int worldSize) {
  return g::encode(g::RendezvousFrame::hello(rank, worldSize, g::Member{"evil", "tcp://127.0.0.1:9"}));
}

// What came back, in words: "error <what>", "failure <reason>", "table <n>
// <host> <url> ...", "refused <reason>" (a link's refusal), or "answer <raw>".
std::string describe(const Received& answer) {
  if (answer.error) return "error " + answer.error.what();
  const std::string& bytes = answer.descriptor.metadata;
  g::RendezvousFrame frame;
  if (!g::decode(bytes, frame)) {
    if (frame.kind == g::RendezvousFrame::Kind::kFailure) return "failure " + frame.reason;
    if (frame.kind == g::RendezvousFrame::Kind::kTable) {
      std::string words = "table " + std::to_string(frame.table.size());
      for (const auto& m : frame.table) words += " " + m.host + " " + m.url;
      return words;
    }
  }
  g::LinkFrame link;
  if (!g::decode(bytes, link) && link.kind == g::LinkFrame::Kind::kRefuse) return "refused " + link.reason;
  return "answer " + bytes;
}

// In an attacker: says `bytes` on a pipe to `url` and returns what came back
// (describe()), or "kept" when asked to keep the pipe instead.
std::string say(Context& context, const std::string& url, const std::string& bytes,
                std::shared_ptr<Pipe>* keep = nullptr) {
  auto pipe = context.connect(url);
  Error written = writeSync(*pipe, text(bytes));
  if (written) return "error " + written.what();
  if (keep) {
    *keep = pipe;
    return "kept";
  }
  return describe(readSync(*pipe, std::chrono::seconds(20)));
}

// An attacker: a process running actorpipe (no secret) that finds rank 0's
// rendezvous and then does `body`.
Child spawnStranger(const std::string& rendezvous,
                    std::function<void(Child& self, Context& context, const std::string& url)> body) {
  return Child::spawn([rendezvous, body](Child& self) {
    const std::string url = waitForRankZero(rendezvous);
    CHILD_CHECK(!url.empty());
    auto context = makeContext("stranger");
    body(self, *context, url);
    context->close();
    context->join();
    return 0;
  });
}

std::string writeFile(const std::string& path, const std::string& content, mode_t mode) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << content;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

} // namespace

TEST_CASE("with a secret, a stranger that says hello 1 gets no table and the group forms") {
  TempDir dir;
  const std::string secret = "the group's secret";
  Child zero = spawnRank(rankInfo(0, 2, dir.rendezvous()), secret);

  // The stranger tries first, with no secret and with a wrong one.
  Child stranger = spawnStranger(dir.rendezvous(), [](Child& self, Context& plain, const std::string& url) {
    self.send(say(plain, url, helloFrame(1, 2)));
    auto guessing = makeContext("stranger", ContextOptions().secret("a wrong secret"));
    self.send(say(*guessing, url, helloFrame(1, 2)));
    guessing->close();
    guessing->join();
  });
  for (const char* guess : {"no secret", "a wrong secret"}) {
    CAPTURE(guess);
    const std::string heard = stranger.receive(std::chrono::seconds(30));
    INFO(heard);
    CHECK(heard.rfind("error ", 0) == 0);
    CHECK(contains(heard, "authentication failed"));
    CHECK_FALSE(contains(heard, "table"));
  }
  CHECK(stranger.wait() == 0);

  // Then rank 1 comes, and the group forms as if nobody had called.
  Child one = spawnRank(rankInfo(1, 2, dir.rendezvous()), secret);
  expectFormed({&zero, &one});
}

TEST_CASE("a rank with another secret is refused at once, naming the cause") {
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 2, dir.rendezvous()), "one secret");
  Child one = spawnRank(rankInfo(1, 2, dir.rendezvous()), "another secret");
  expectPromptFailure({&one}, "refused us: authentication failed");
  zero.kill(SIGKILL);  // it waits for a rank 1 that will not come
}

// Three ranks, so that the stranger's claim alone does not complete the
// table: rank 1 comes second, rank 2 last (a stranger who completes a table
// before the real rank comes gets it: only a secret prevents that).
TEST_CASE("without a secret, a stranger that claims rank 1 first fails the rendezvous, named") {
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 3, dir.rendezvous()), "");
  Child stranger = spawnStranger(dir.rendezvous(), [](Child& self, Context& context, const std::string& url) {
    std::shared_ptr<Pipe> pipe;
    self.send(say(context, url, helloFrame(1, 3), &pipe));
    // Holds its claim, and reports what rank 0 tells it in the end.
    self.send(describe(readSync(*pipe, std::chrono::seconds(30))));
  });
  REQUIRE(stranger.receive(std::chrono::seconds(30)) == "kept");

  Child one = spawnRank(rankInfo(1, 3, dir.rendezvous()), "");
  // Rank 0 tells the first claimant once the second came.
  const std::string heard = stranger.receive(std::chrono::seconds(30));
  INFO(heard);
  CHECK(heard.rfind("failure rank 1 was claimed twice", 0) == 0);
  CHECK_FALSE(contains(heard, "table"));
  CHECK(stranger.wait() == 0);

  // Rank 2 comes after the failure, and hears of it at once too.
  Child two = spawnRank(rankInfo(2, 3, dir.rendezvous()), "");
  expectPromptFailure({&zero, &one, &two}, "rank 1 was claimed twice");
}

TEST_CASE("a claim whose pipe broke before the table went out is replaced (a rank retrying)") {
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 3, dir.rendezvous()), "");
  Child stranger = spawnStranger(dir.rendezvous(), [](Child& self, Context& context, const std::string& url) {
    std::shared_ptr<Pipe> pipe;
    self.send(say(context, url, helloFrame(1, 3), &pipe));
    // Rank 0 answers nothing before the table is complete, so nothing tells
    // when it took the claim: give it ample time (it takes ~0.1 s under ASan).
    // A slower rank 0 cannot fail the test: it takes the claim from a pipe
    // that already ended, which lapses the same way; only the case tested
    // is then a weaker one.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    pipe->close();
  });
  REQUIRE(stranger.receive(std::chrono::seconds(30)) == "kept");
  CHECK(stranger.wait() == 0);
  // Rank 0 closes its end of the stranger's connection when it sees the
  // pipe end, and the claim lapses on that same end, on its loop, before any
  // later hello is read: wait until no connection to the rendezvous address
  // is open (the stranger's was the only one), not for a fixed time.
  const std::string rendezvousUrl = waitForRankZero(dir.rendezvous());
  REQUIRE(!rendezvousUrl.empty());
  CHECK(waitFor([&] { return openConnectionsTo(rendezvousUrl) == 0; }, std::chrono::seconds(20)));

  Child one = spawnRank(rankInfo(1, 3, dir.rendezvous()), "");
  Child two = spawnRank(rankInfo(2, 3, dir.rendezvous()), "");
  expectFormed({&zero, &one, &two});
}

TEST_CASE("garbage hellos are dropped unanswered, and the group forms") {
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 2, dir.rendezvous()), "");
  Child stranger = spawnStranger(dir.rendezvous(), [](Child& self, Context& context, const std::string& url) {
    std::vector<std::shared_ptr<Pipe>> pipes;
    // Hellos cut short, with a trailing byte, with ranks and world sizes
    // out of range, hosts and URLs empty, too long or with spaces and
    // control characters; other kinds; the text of the old protocol.
    auto hello = [](uint32_t rank, uint32_t size, const std::string& host, const std::string& url) {
      g::RendezvousFrame f = g::RendezvousFrame::hello(0, 1, g::Member{host, url});
      std::string bytes = g::encode(f);
      for (int i = 0; i < 4; ++i) bytes[1 + i] = char(rank >> (8 * i));
      for (int i = 0; i < 4; ++i) bytes[5 + i] = char(size >> (8 * i));
      return bytes;
    };
    const std::string good = helloFrame(1, 2);
    std::vector<std::string> garbage = {
        "", "hello 1 2 evil tcp://127.0.0.1:9", good + "x", hello(0xffffffffu, 2, "evil", "url"),
        hello(2, 2, "evil", "url"), hello(1, 0, "evil", "url"), hello(1, 1u << 21, "evil", "url"),
        hello(1, 2, "", "url"), hello(1, 2, "evil", ""), hello(1, 2, "ev il", "url"),
        hello(1, 2, "ev\til", "url"), hello(1, 2, std::string(256, 'h'), "url"),
        hello(1, 2, "evil", std::string(1025, 'u')), hello(1, 2, "evil", "u\x7f"),
        g::encode(g::RendezvousFrame::tableOf({g::Member{"evil", "url"}})),
        g::encode(g::RendezvousFrame::failure("no")),
        g::encode(g::LinkFrame::introduce(g::LinkFrame::Role::kTree, 1)), std::string(1, '\x63')};
    for (size_t n = 0; n < good.size(); ++n) garbage.push_back(good.substr(0, n));
    for (const std::string& bytes : garbage) {
      std::shared_ptr<Pipe> pipe;
      CHILD_CHECK(say(context, url, bytes, &pipe) == "kept");
      pipes.push_back(pipe);
    }
    self.send("said");
    // None is answered, not even once the group formed and rank 0 hung up.
    for (auto& pipe : pipes) {
      Received answer = readSync(*pipe, std::chrono::seconds(30));
      CHILD_CHECK(answer.error);
    }
    self.send("unanswered");
  });
  REQUIRE(stranger.receive(std::chrono::seconds(30)) == "said");
  Child one = spawnRank(rankInfo(1, 2, dir.rendezvous()), "");
  expectFormed({&zero, &one});
  CHECK(stranger.receive(std::chrono::seconds(40)) == "unanswered");
  CHECK(stranger.wait() == 0);
}

TEST_CASE("without a secret, a second link claim for a linked rank is refused and named") {
  // The stranger takes rank 2's place (nobody else claims it: without a
  // secret that much is possible), gets the table, and links to rank 0 as
  // rank 1 too. Whichever of the two rank-1 links comes second, rank 0
  // refuses it and the group does not form.
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 3, dir.rendezvous()), "");
  Child one = spawnRank(rankInfo(1, 3, dir.rendezvous()), "");
  Child stranger = spawnStranger(dir.rendezvous(), [](Child& self, Context& context, const std::string& url) {
    const std::string heard = say(context, url, helloFrame(2, 3));
    std::istringstream table(heard);
    std::string word, size, host, zeroUrl;
    CHILD_CHECK((table >> word >> size >> host >> zeroUrl) && word == "table");
    // A link introduction as the ranks write it (actors/group/frames.h).
    self.send(say(context, zeroUrl, g::encode(g::LinkFrame::introduce(g::LinkFrame::Role::kTree, 1))));
  });
  expectPromptFailure({&zero}, "rank 1 was claimed twice");
  // Rank 1 either was the one refused or lost its parent: no group.
  Outcome first = outcomeOf(one);
  CHECK_FALSE(first.formed);
  // The stranger's own link was refused, or was the first and saw rank 0 go.
  INFO(stranger.receive(std::chrono::seconds(30)));
  CHECK(stranger.wait() == 0);
}

TEST_CASE("mismatched world sizes fail every rank at once, naming the rank") {
  TempDir dir;
  Child zero = spawnRank(rankInfo(0, 3, dir.rendezvous()), "");
  Child one = spawnRank(rankInfo(1, 3, dir.rendezvous()), "");
  Child two = spawnRank(rankInfo(2, 4, dir.rendezvous()), "");
  expectPromptFailure({&zero, &one, &two}, "rank 2 says the group has 4 ranks, rank 0 says 3");
}

TEST_CASE("the secret file must be private; one trailing newline is stripped") {
  TempDir dir;
  std::string secret;
  auto fromFile = [&](const std::string& path) {
    secret.clear();
    return g::secretFromEnvironment(secret, {{"ACTORPIPE_SECRET_FILE", path},
                                             {"ACTORPIPE_SECRET", "from the variable"}});
  };
  const std::string open = writeFile(dir.path + "/open", "s3cret\n", 0644);
  Error error = fromFile(open);
  INFO(error.what());
  CHECK(error.isOfType<g::RendezvousError>());
  CHECK(contains(error.what(), open));
  CHECK(contains(error.what(), "mode 0644"));
  CHECK(contains(error.what(), "group or others"));
  CHECK(secret.empty());
  CHECK(fromFile(writeFile(dir.path + "/readable", "s3cret", 0640)));
  CHECK(fromFile(writeFile(dir.path + "/writable", "s3cret", 0620)));
  CHECK(fromFile(writeFile(dir.path + "/empty", "\n", 0600)));
  CHECK(contains(fromFile(dir.path).what(), "not a regular file"));
  CHECK(fromFile(dir.path + "/missing").isOfType<SystemError>());

  CHECK_FALSE(fromFile(writeFile(dir.path + "/private", "s3cret\n", 0600)));
  CHECK(secret == "s3cret");
  CHECK_FALSE(fromFile(writeFile(dir.path + "/two", "s3cret\n\n", 0400)));
  CHECK(secret == "s3cret\n");
  CHECK_FALSE(g::secretFromEnvironment(secret, {{"ACTORPIPE_SECRET", "from the variable"}}));
  CHECK(secret == "from the variable");

  // Through the API: Tree::fromEnvironment and SlurmTree::create refuse it.
  for (const bool slurm : {false, true}) {
    CAPTURE(slurm);
    Child rank = Child::spawn([&](Child& self) {
      ::setenv(slurm ? "SLURM_PROCID" : "ACTORPIPE_RANK", "0", 1);
      ::setenv(slurm ? "SLURM_NTASKS" : "ACTORPIPE_WORLD_SIZE", "1", 1);
      ::setenv("ACTORPIPE_RENDEZVOUS", dir.rendezvous().c_str(), 1);
      ::setenv("ACTORPIPE_SECRET_FILE", open.c_str(), 1);
      std::unique_ptr<g::Tree> tree;
      g::SlurmPlacement placement;
      Error refused = slurm ? g::SlurmTree::create({}, tree, placement)
                            : g::Tree::fromEnvironment({}, tree);
      self.send(refused ? refused.what() : "formed");
      ::chmod(open.c_str(), 0600);
      Error formed = slurm ? g::SlurmTree::create({}, tree, placement)
                           : g::Tree::fromEnvironment({}, tree);
      self.send(formed ? formed.what() : "formed");
      return 0;
    });
    const std::string refused = rank.receive();
    INFO(refused);
    CHECK(contains(refused, "mode 0644"));
    CHECK(rank.receive() == "formed");
    CHECK(rank.wait() == 0);
    REQUIRE(::chmod(open.c_str(), 0644) == 0);
  }
}

namespace {

// The secret each rank saw, from lines "[r] secret <value>".
std::vector<std::string> secretsSeen(const std::string& output, int ranks) {
  std::vector<std::string> seen(ranks);
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    int rank = -1;
    char value[256] = {};
    if (std::sscanf(line.c_str(), "[%d] secret %255s", &rank, value) == 2 && rank >= 0 &&
        rank < ranks) {
      seen[rank] = value;
    }
  }
  return seen;
}

const std::string kLaunch = std::string(ACTORPIPE_RUN) + " -n 3 --timeout 60 -- sh -c ";
const std::string kRank = std::string("'echo secret ${ACTORPIPE_SECRET:-none}; exec ") +
                          GROUP_CHECK + " sum'";

} // namespace

TEST_CASE("actorpipe-run gives each job a fresh secret, and its ranks form a group on it") {
  ShellRun first = runShell("env -u ACTORPIPE_SECRET -u ACTORPIPE_SECRET_FILE " + kLaunch + kRank);
  ShellRun second = runShell("env -u ACTORPIPE_SECRET -u ACTORPIPE_SECRET_FILE " + kLaunch + kRank);
  INFO(first.output);
  INFO(second.output);
  CHECK(first.status == 0);
  CHECK(second.status == 0);
  CHECK(contains(first.output, "[0] ok sum"));
  const auto one = secretsSeen(first.output, 3);
  const auto two = secretsSeen(second.output, 3);
  CHECK(one[0].size() == 64);
  CHECK(one[0].find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(one[1] == one[0]);
  CHECK(one[2] == one[0]);
  CHECK(two[0].size() == 64);
  CHECK(two[0] != one[0]);

  // The user's own secret is kept (and an empty one means none).
  ShellRun mine = runShell("env -u ACTORPIPE_SECRET_FILE ACTORPIPE_SECRET=mine " + kLaunch + kRank);
  INFO(mine.output);
  CHECK(mine.status == 0);
  CHECK(secretsSeen(mine.output, 3) == std::vector<std::string>(3, "mine"));

  // The group does run on it: a rank given another secret is refused.
  ShellRun other = runShell("env -u ACTORPIPE_SECRET -u ACTORPIPE_SECRET_FILE " + kLaunch +
                       "'if [ $ACTORPIPE_RANK = 2 ]; then export ACTORPIPE_SECRET=other; fi; exec " +
                       GROUP_CHECK + " sum'");
  INFO(other.output);
  CHECK(other.status != 0);
  CHECK(contains(other.output, "[2] rank -1: FAILED: joining the group: rendezvous failed"));
  CHECK(contains(other.output, "refused us: authentication failed"));
}
