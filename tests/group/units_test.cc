// In-process tests of the pieces that need no group: the tree's shape,
// how calls are cut into chunks, the reductions, and reading environments.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include <actorpipe/runtime/error.h>

#include <actorpipe/actors/group/chunks.h>
#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/host_arena.h>
#include <actorpipe/actors/group/errors.h>
#include <actorpipe/actors/group/frames.h>
#include <actorpipe/actors/group/slurm_tree.h>
#include <actorpipe/actors/group/tensor.h>
#include <actorpipe/actors/group/topology.h>

using namespace actorpipe::group;

namespace {

// Every rank reaches the root through parents, and parent/child agree.
void checkIsTree(const std::vector<TreeNode>& tree) {
  const int n = static_cast<int>(tree.size());
  CHECK(tree[0].parent == -1);
  for (int r = 1; r < n; ++r) {
    const int parent = tree[r].parent;
    REQUIRE(parent >= 0);
    REQUIRE(parent < n);
    const auto& siblings = tree[parent].children;
    CHECK(std::count(siblings.begin(), siblings.end(), r) == 1);
    int hops = 0;
    for (int at = r; at != 0 && hops <= n; at = tree[at].parent) ++hops;
    CHECK(hops <= n);
  }
  CHECK(subtreeOf(tree, 0).size() == static_cast<size_t>(n));
}

} // namespace

TEST_CASE("k-nomial trees are valid for any size and radix") {
  for (int radix : {2, 3, 4, 7}) {
    for (int n = 1; n <= 70; ++n) {
      CAPTURE(radix);
      CAPTURE(n);
      checkIsTree(buildTree(std::vector<std::string>(n, "host"), radix));
    }
  }
  // Binomial: 0's children are 1, 2, 4; 6's parent is 4.
  auto tree = buildTree(std::vector<std::string>(8, "h"), 2);
  CHECK(tree[0].children == std::vector<int>{1, 2, 4});
  CHECK(tree[6].parent == 4);
  CHECK(knomialParent(7, 2) == 6);
  CHECK(knomialChildren(0, 9, 3) == std::vector<int>{1, 2, 3, 6});
  CHECK_THROWS(buildTree({"h"}, 1));
}

TEST_CASE("ranks of one host form a subtree; one leader per host crosses hosts") {
  // Round-robin placement: ranks alternate between two hosts.
  std::vector<std::string> hosts;
  for (int r = 0; r < 9; ++r) hosts.push_back(r % 3 == 0 ? "a" : (r % 3 == 1 ? "b" : "c"));
  auto tree = buildTree(hosts, 2);
  checkIsTree(tree);
  int crossing = 0;
  for (int r = 1; r < 9; ++r) {
    if (hosts[r] != hosts[tree[r].parent]) {
      ++crossing;
      CHECK(tree[r].hostLeader);
    }
  }
  CHECK(crossing == 2);  // three hosts, two links between them
  CHECK(tree[0].hostLeader);
  CHECK(tree[1].hostLeader);
  CHECK(tree[2].hostLeader);
  CHECK_FALSE(tree[3].hostLeader);
}

TEST_CASE("chunks cover every byte once, in whole, aligned elements") {
  std::vector<float> a(1000);
  std::vector<double> b(333);
  std::vector<uint8_t> c(5);
  std::vector<TensorView> tensors{tensorOf(a), tensorOf(b), tensorOf(c)};
  for (size_t chunkBytes : {size_t(1), size_t(7), size_t(64), size_t(4096), size_t(1) << 20}) {
    CAPTURE(chunkBytes);
    auto chunks = cutIntoChunks(tensors, chunkBytes);
    std::vector<size_t> covered(3, 0);
    size_t packed = 0;
    for (const auto& chunk : chunks) {
      size_t bytes = 0;
      for (const auto& segment : chunk.segments) {
        CHECK(segment.offset == covered[segment.tensor]);
        CHECK(segment.length % dtypeSize(tensors[segment.tensor].dtype) == 0);
        if (segment.offset == 0) packed = (packed + 15) & ~size_t(15);  // tensors start aligned
        CHECK(segment.packed == packed);
        CHECK(segment.packed % dtypeSize(tensors[segment.tensor].dtype) == 0);
        covered[segment.tensor] += segment.length;
        packed += segment.length;
        bytes += segment.length;
      }
      CHECK(bytes == chunk.bytes);
    }
    CHECK(covered == std::vector<size_t>{4000, 2664, 5});
  }
  CHECK(cutIntoChunks({}, 4096).size() == 1);  // a barrier still travels
}

TEST_CASE("reductions on every dtype") {
  std::vector<int32_t> a{1, 5, -3}, b{4, 2, -7};
  Reduction::sum().apply(tensorOf(a), tensorOf(b));
  CHECK(a == std::vector<int32_t>{5, 7, -10});
  std::vector<double> x{1.5, 2}, y{2, 0.25};
  Reduction::product().apply(tensorOf(x), tensorOf(y));
  CHECK(x == std::vector<double>{3, 0.5});
  std::vector<int64_t> p{1, 9}, q{3, 2};
  Reduction::min().apply(tensorOf(p), tensorOf(q));
  CHECK(p == std::vector<int64_t>{1, 2});
  std::vector<float> f{1, 9}, g{3, 2};
  Reduction::max().apply(tensorOf(f), tensorOf(g));
  CHECK(f == std::vector<float>{3, 9});
  std::vector<float> mean{10, 20};
  Reduction::average().finish(tensorOf(mean), 4);
  CHECK(mean == std::vector<float>{2.5f, 5});
  std::vector<int64_t> identity(2);
  Reduction::min().fillIdentity(tensorOf(identity));
  CHECK(identity[0] == std::numeric_limits<int64_t>::max());
  TensorView onDevice = tensorOf(f);
  onDevice.device = actorpipe::Device{actorpipe::kCudaDeviceType, 0};
  CHECK_THROWS(Reduction::sum().apply(onDevice, onDevice));
}

TEST_CASE("collectives take the library's Tensor, as a view of its elements") {
  actorpipe::Tensor a = actorpipe::Tensor::full<int32_t>({2, 3}, 4);
  actorpipe::Tensor b = actorpipe::Tensor::full<int32_t>({2, 3}, 5);
  Reduction::sum().apply(a, b);  // each converts to a view, no copy
  for (int i = 0; i < 6; ++i) CHECK(a.data<int32_t>()[i] == 9);
  const TensorView view = a;
  CHECK(view.data == a.rawData());
  CHECK(view.count == 6);
  CHECK(view.dtype == actorpipe::DType::kInt32);
  CHECK(view.bytes() == a.nbytes());
}

TEST_CASE("a group's timeout is the library's TimeoutError") {
  actorpipe::Error e = ACTORPIPE_ERROR(TimeoutError, "rank 3 never answered");
  CHECK(e.isOfType<actorpipe::TimeoutError>());
  CHECK(e.castToType<actorpipe::TimeoutError>()->reason() == "rank 3 never answered");
  CHECK(e.what().rfind("timeout: rank 3 never answered", 0) == 0);
}

TEST_CASE("link frames round-trip; malformed ones are protocol errors, never a partial frame") {
  using F = actorpipe::group::LinkFrame;
  const std::vector<F> frames = {
      F::introduce(F::Role::kRing, 7), F::refuse("rank 1 was claimed twice"),
      F::data(3, 17, 4), F::abort(9, F::Cause::kRankFailed, 2, "its link broke"),
      F::abort(9, F::Cause::kTimeout, -1, "waited 5 s"), F::bye()};
  for (const F& f : frames) {
    F back;
    REQUIRE(!actorpipe::group::decode(actorpipe::group::encode(f), back));
    CHECK(back.kind == f.kind);
    CHECK(back.describe() == f.describe());
    CHECK(back.rank == f.rank);
    CHECK(back.reason == f.reason);
    CHECK(back.cause == f.cause);
  }
  // Every truncation of every frame, a trailing byte, unknown kinds, roles
  // and causes, a negative rank, a reason longer than allowed: each an
  // error naming the problem, and the output left untouched.
  auto rejected = [](const std::string& bytes) {
    F out = F::data(42, 42, 42);
    actorpipe::Error e = actorpipe::group::decode(bytes, out);
    const bool untouched = out.kind == F::Kind::kData && out.collective == 42;
    return e.isOfType<actorpipe::ProtocolError>() && untouched;
  };
  for (const F& f : frames) {
    const std::string bytes = actorpipe::group::encode(f);
    for (size_t n = 0; n < bytes.size(); ++n) CHECK(rejected(bytes.substr(0, n)));
    CHECK(rejected(bytes + "x"));
  }
  CHECK(rejected(std::string(1, '\x09')));
  std::string badRole = actorpipe::group::encode(F::introduce(F::Role::kTree, 1));
  badRole[1] = 9;
  CHECK(rejected(badRole));
  std::string negative = actorpipe::group::encode(F::introduce(F::Role::kTree, 1));
  negative[5] = '\x80';
  CHECK(rejected(negative));
  std::string badCause = actorpipe::group::encode(F::abort(1, F::Cause::kLogic, 0, "x"));
  badCause[9] = 0;
  CHECK(rejected(badCause));
  badCause[9] = char(uint8_t(F::Cause::kOther) + 1);  // one past the last cause we know
  CHECK(rejected(badCause));
  badCause[9] = char(uint8_t(F::Cause::kOther));
  F other;
  REQUIRE(!actorpipe::group::decode(badCause, other));
  CHECK(other.cause == F::Cause::kOther);
  std::string hugeReason(1, char(F::Kind::kRefuse));
  const uint32_t n = actorpipe::group::kMaxLinkFrameReason + 1;
  for (int i = 0; i < 4; ++i) hugeReason.push_back(char(n >> (8 * i)));
  hugeReason.append(n, 'r');
  CHECK(rejected(hugeReason));
  // A length that claims more than the frame holds is refused before any copy.
  std::string lying(1, char(F::Kind::kRefuse));
  lying += std::string("\xff\xff\xff\x7f", 4);
  CHECK(rejected(lying));
}

TEST_CASE("an abort carries its error's kind to the other ranks, and any other kind's text") {
  using actorpipe::Error;
  using F = actorpipe::group::LinkFrame;
  auto travel = [](const Error& error) {
    F back;
    REQUIRE(!actorpipe::group::decode(actorpipe::group::encode(actorpipe::group::abortFrame(5, error)), back));
    CHECK(back.collective == 5);
    return actorpipe::group::abortError(back);
  };
  Error failed = travel(ACTORPIPE_ERROR(actorpipe::group::RankFailedError, 3, "its link broke"));
  REQUIRE(failed.isOfType<actorpipe::group::RankFailedError>());
  CHECK(failed.castToType<actorpipe::group::RankFailedError>()->rank() == 3);
  CHECK(failed.what().rfind("rank 3 failed: its link broke", 0) == 0);
  CHECK(travel(ACTORPIPE_ERROR(actorpipe::LogicError, "shapes differ")).isOfType<actorpipe::LogicError>());
  Error late = travel(ACTORPIPE_ERROR(actorpipe::TimeoutError, "allReduce", 250));
  CHECK(late.isOfType<actorpipe::TimeoutError>());
  Error garbage = travel(ACTORPIPE_ERROR(actorpipe::ProtocolError, "rank 1 sent junk"));
  REQUIRE(garbage.isOfType<actorpipe::ProtocolError>());
  CHECK(garbage.castToType<actorpipe::ProtocolError>()->reason() == "rank 1 sent junk");
  // A kind that does not travel is neither a timeout nor a protocol error
  // on the other side: it says what happened.
  Error other = travel(ACTORPIPE_ERROR(actorpipe::LimitExceededError, "tensor count", 9, 8));
  CHECK(!other.isOfType<actorpipe::TimeoutError>());
  REQUIRE(other.isOfType<actorpipe::group::AbortedError>());
  CHECK(other.what().find("tensor count") != std::string::npos);
}

TEST_CASE("rendezvous frames round-trip; hostile ones are refused before anything is kept") {
  using R = actorpipe::group::RendezvousFrame;
  using actorpipe::group::Member;
  const std::vector<Member> members = {{"node-a", "tcp://10.0.0.1:4000"}, {"node-b", "tcp://10.0.0.2:4001"}};
  for (const R& f : {R::hello(1, 2, members[1]), R::tableOf(members), R::failure("rank 1 was claimed twice")}) {
    R back;
    REQUIRE(!actorpipe::group::decode(actorpipe::group::encode(f), back));
    CHECK(back.kind == f.kind);
    CHECK(back.rank == f.rank);
    CHECK(back.worldSize == f.worldSize);
    CHECK(back.member.url == f.member.url);
    CHECK(back.table.size() == f.table.size());
    CHECK(back.reason == f.reason);
    const std::string bytes = actorpipe::group::encode(f);
    for (size_t n = 0; n < bytes.size(); ++n) {
      CHECK(actorpipe::group::decode(bytes.substr(0, n), back).isOfType<actorpipe::ProtocolError>());
    }
  }
  R out;
  auto refused = [&](const R& f) { return static_cast<bool>(actorpipe::group::decode(actorpipe::group::encode(f), out)); };
  CHECK(refused(R::hello(2, 2, members[0])));              // rank out of range
  CHECK(refused(R::hello(0, 0, members[0])));              // no world
  CHECK(refused(R::hello(1, 2, Member{"a b", "url"})));    // a space
  CHECK(refused(R::hello(1, 2, Member{"a", "u\nrl"})));    // a control character
  CHECK(refused(R::hello(1, 2, Member{"", "url"})));
  CHECK(refused(R::hello(1, 2, Member{std::string(256, 'h'), "url"})));
  CHECK(refused(R::tableOf({})));
  // A table that announces more members than its bytes could hold is
  // refused before anything is reserved.
  std::string lying(1, char(R::Kind::kTable));
  lying += std::string("\x00\x00\x10\x00", 4);  // 1 Mi members, no bytes
  CHECK(actorpipe::group::decode(lying, out).isOfType<actorpipe::ProtocolError>());
}

TEST_CASE("a host name that a hello could not carry is refused when the rank reads its environment") {
  RankInfo info;
  for (const std::string& host : {std::string("two words"), std::string("tab\there"), std::string(256, 'h')}) {
    CAPTURE(host);
    actorpipe::Error error = rankInfoFromEnvironment(info, {{"ACTORPIPE_RANK", "1"},
                                                            {"ACTORPIPE_WORLD_SIZE", "2"},
                                                            {"ACTORPIPE_RENDEZVOUS", "file:///tmp/x"},
                                                            {"ACTORPIPE_HOST", host}});
    CHECK(error.isOfType<RendezvousError>());
    CHECK(error.what().find("ACTORPIPE_HOST") != std::string::npos);
  }
  CHECK_FALSE(rankInfoFromEnvironment(info, {{"ACTORPIPE_RANK", "1"},
                                             {"ACTORPIPE_WORLD_SIZE", "2"},
                                             {"ACTORPIPE_RENDEZVOUS", "file:///tmp/x"},
                                             {"ACTORPIPE_HOST", "node-7.cluster"}}));
  CHECK(info.host == "node-7.cluster");
}

TEST_CASE("rank info from each launcher's variables, ours first") {
  RankInfo info;
  CHECK_FALSE(rankInfoFromEnvironment(info, {{"ACTORPIPE_RANK", "2"},
                                             {"ACTORPIPE_WORLD_SIZE", "4"},
                                             {"ACTORPIPE_RENDEZVOUS", "file:///tmp/x"},
                                             {"SLURM_PROCID", "1"}}));
  CHECK(info.source == "actorpipe");
  CHECK(info.rank == 2);
  CHECK(info.rendezvous == "file:///tmp/x");

  CHECK_FALSE(rankInfoFromEnvironment(info, {{"SLURM_PROCID", "3"},
                                             {"SLURM_NTASKS", "4"},
                                             {"SLURM_JOB_NUM_NODES", "2"},
                                             {"SLURM_NODEID", "1"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_JOBID", "77"},
                                             {"SLURM_STEP_ID", "0"},
                                             {"SLURMD_NODENAME", "n2"},
                                             {"ACTORPIPE_RENDEZVOUS_DIR", "/shared"},
                                             {"ACTORPIPE_ADDRESS", "10.0.0.2"}}));
  CHECK(info.source == "slurm");
  CHECK(info.rank == 3);
  CHECK(info.nodes == 2);
  CHECK(info.host == "n2");
  CHECK(info.rendezvous == "file:///shared/slurm-77.0");

  CHECK_FALSE(rankInfoFromEnvironment(info, {{"OMPI_COMM_WORLD_RANK", "1"},
                                             {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "127.0.0.1"},
                                             {"MASTER_PORT", "29500"}}));
  CHECK(info.source == "openmpi");
  CHECK(info.rendezvous == "tcp://127.0.0.1:29500");

  CHECK_FALSE(rankInfoFromEnvironment(info, {{"RANK", "0"},
                                             {"WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "localhost"},
                                             {"MASTER_PORT", "29500"}}));
  CHECK(info.source == "torchrun");
  CHECK(info.rendezvous == "tcp://127.0.0.1:29500");

  auto error = rankInfoFromEnvironment(info, {{"RANK", "5"}, {"WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
  CHECK(error.isOfType<RendezvousError>());
  error = rankInfoFromEnvironment(info, {{"ACTORPIPE_RANK", "x"}, {"ACTORPIPE_WORLD_SIZE", "2"},
                                         {"ACTORPIPE_RENDEZVOUS", "tcp://1.2.3.4:5"}});
  CHECK(error.isOfType<RendezvousError>());
}

TEST_CASE("Slurm node lists expand") {
  CHECK(expandNodeList("node[01-03,7],gpu5") ==
        std::vector<std::string>{"node01", "node02", "node03", "node7", "gpu5"});
  CHECK(expandNodeList("a,b") == std::vector<std::string>{"a", "b"});
  CHECK(expandNodeList("x[2-3]") == std::vector<std::string>{"x2", "x3"});
}

// The host arena with two "ranks" that are threads of this process: the
// same segment mapped twice, exactly as two processes would.
namespace {

using ArenaClock = std::chrono::steady_clock;
using Status = ArenaOutcome::Status;

struct ArenaPair {
  std::unique_ptr<HostArena> first;
  std::unique_ptr<HostArena> second;
};

ArenaPair arenaPair(const ArenaOptions& options) {
  ArenaPair pair;
  std::string name;
  std::string why;
  pair.first = HostArena::create(2, options, name, why);
  REQUIRE_MESSAGE(pair.first, why);
  pair.second = HostArena::open(name, 1, 2, options, why);
  HostArena::unlink(name);
  REQUIRE_MESSAGE(pair.second, why);
  return pair;
}

ArenaOptions smallArena() {
  ArenaOptions options;
  options.slotBytes = 4096;  // 1024 floats per round
  options.wholeBytes = 1024;  // so a last round of 200 floats (800 bytes) is "whole"
  options.spin = std::chrono::microseconds(20);  // so that waits also sleep
  return options;
}

} // namespace

TEST_CASE("host arena: two ranks reduce in rounds, and their results are identical") {
  ArenaPair pair = arenaPair(smallArena());
  // 9 "split" rounds of 1024 floats, then one "whole" round of 200.
  std::vector<float> mine(9 * 1024 + 200), theirs(9 * 1024 + 200);
  for (size_t i = 0; i < mine.size(); ++i) {
    mine[i] = 0.1f * float(i);
    theirs[i] = 1.0f / float(i + 1);
  }
  std::vector<float> expected(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) expected[i] = mine[i] + theirs[i];
  const auto deadline = ArenaClock::now() + std::chrono::seconds(20);
  for (uint64_t call = 1; call <= 3; ++call) {  // slots reused across calls
    std::vector<float> a = mine, b = theirs;
    ArenaOutcome other;
    std::thread rank1([&] {
      other = pair.second->allReduce({tensorOf(b)}, Reduction::sum(), true, call, deadline);
    });
    ArenaOutcome outcome = pair.first->allReduce({tensorOf(a)}, Reduction::sum(), true, call, deadline);
    rank1.join();
    CHECK(outcome.status == Status::kDone);
    CHECK(other.status == Status::kDone);
    CHECK(outcome.contributors == 2);
    CHECK(a == expected);
    CHECK(b == expected);
  }
  // Rank 1 contributes nothing: rank 0's data, everywhere.
  std::vector<double> a(3000, 2.5), b(3000, -1.0);
  ArenaOutcome other;
  std::thread rank1([&] {
    other = pair.second->allReduce({tensorOf(b)}, Reduction::average(), false, 4, deadline);
  });
  ArenaOutcome outcome = pair.first->allReduce({tensorOf(a)}, Reduction::average(), true, 4, deadline);
  rank1.join();
  CHECK(outcome.contributors == 1);
  CHECK(other.contributors == 1);
  CHECK(a == std::vector<double>(3000, 2.5));
  CHECK(b == std::vector<double>(3000, 2.5));
}

TEST_CASE("host arena: a rank alone times out, naming the rank it waited for") {
  ArenaPair pair = arenaPair(smallArena());
  std::vector<int32_t> values(10, 1);
  const auto start = ArenaClock::now();
  ArenaOutcome outcome = pair.first->allReduce({tensorOf(values)}, Reduction::sum(), true, 1,
                                               start + std::chrono::milliseconds(50));
  CHECK(outcome.status == Status::kTimedOut);
  CHECK(outcome.rank == 1);
  CHECK(ArenaClock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("host arena: interrupt() wakes a rank that sleeps in a wait") {
  ArenaPair pair = arenaPair(smallArena());
  std::vector<int64_t> values(10, 1);
  std::thread failer([&] {
    // Long past the spin. A slower machine cannot fail this: an interrupt
    // that comes before the wait (or before the call) ends it all the same.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pair.first->interrupt();
  });
  const auto start = ArenaClock::now();
  ArenaOutcome outcome = pair.first->allReduce({tensorOf(values)}, Reduction::sum(), true, 1,
                                               start + std::chrono::seconds(60));
  failer.join();
  CHECK(outcome.status == Status::kInterrupted);
  CHECK(ArenaClock::now() - start < std::chrono::seconds(5));
  // And it stays interrupted: a failed group is not used again.
  outcome = pair.first->allReduce({tensorOf(values)}, Reduction::sum(), true, 2,
                                  ArenaClock::now() + std::chrono::seconds(60));
  CHECK(outcome.status == Status::kInterrupted);
}

TEST_CASE("host arena: ranks that pass other shapes both see a mismatch") {
  ArenaPair pair = arenaPair(smallArena());
  std::vector<float> ten(10, 1.0f), twelve(12, 1.0f);
  const auto deadline = ArenaClock::now() + std::chrono::seconds(20);
  ArenaOutcome other;
  std::thread rank1([&] {
    other = pair.second->allReduce({tensorOf(twelve)}, Reduction::sum(), true, 1, deadline);
  });
  ArenaOutcome outcome = pair.first->allReduce({tensorOf(ten)}, Reduction::sum(), true, 1, deadline);
  rank1.join();
  CHECK(outcome.status == Status::kMismatch);
  CHECK(outcome.rank == 1);
  CHECK(other.status == Status::kMismatch);
  CHECK(other.rank == 0);
  CHECK(ten == std::vector<float>(10, 1.0f));  // nothing was folded
}

TEST_CASE("host arena: opening a missing or different segment is an error, not a crash") {
  std::string why;
  CHECK_FALSE(HostArena::open("/actorpipe-arena-missing", 1, 2, smallArena(), why));
  CHECK(why.find("shm_open") != std::string::npos);
  std::string name;
  auto created = HostArena::create(2, smallArena(), name, why);
  REQUIRE(created);
  why.clear();
  CHECK_FALSE(HostArena::open(name, 1, 3, smallArena(), why));  // another group size
  CHECK_FALSE(why.empty());
  HostArena::unlink(name);
}
