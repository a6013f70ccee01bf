// One rank of a group test, run under actorpipe-run:
//
//   actorpipe-run -n 8 group_check sum dtypes uneven broadcast scatter
//   actorpipe-run -n 3 group_check sizes 67108864
//   actorpipe-run -n 5 --keep-going group_check die 3
//   actorpipe-run -n 3 group_check absent 2
//
// Each scenario checks every rank's results against a reference computed
// locally; a rank exits non-zero (with the reason on stderr) on the first
// mismatch, so actorpipe-run fails the whole test.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <actorpipe/actors/group/slurm_tree.h>
#include <actorpipe/actors/group/tree.h>

using namespace actorpipe::group;
using Clock = std::chrono::steady_clock;

// GROUP_CHECK_SLOW_ARENA_MS=N: this rank takes N ms to create the host
// arena's segment, between the collectives that form the group, as a rank
// on a loaded machine may (shm_open is wrapped in this executable; the
// library's call resolves to it, and no sanitizer wraps shm_open).
extern "C" int shm_open(const char* name, int flags, mode_t mode) {
  using Fn = int (*)(const char*, int, mode_t);
  static Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "shm_open"));
  const char* slow = std::getenv("GROUP_CHECK_SLOW_ARENA_MS");
  if (slow && (flags & O_CREAT) && std::strstr(name, "arena")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(slow)));
  }
  return real(name, flags, mode);
}

namespace {

int gRank = -1;

[[noreturn]] void failCheck(const std::string& what) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", gRank, what.c_str());
  std::fflush(stderr);
  std::exit(3);
}

void expect(bool condition, const std::string& what) {
  if (!condition) failCheck(what);
}

void ok(const actorpipe::Error& error, const std::string& what) {
  if (error) failCheck(what + ": " + error.what());
}

uint64_t fingerprint(const void* data, size_t bytes) {
  uint64_t hash = 1469598103934665603ull;
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

// Every rank holds the same bytes: the min and max of their fingerprints agree.
void expectIdenticalEverywhere(Tree& tree, const void* data, size_t bytes, const std::string& what) {
  const int64_t mine = static_cast<int64_t>(fingerprint(data, bytes) >> 1);
  std::vector<int64_t> low{mine}, high{mine};
  ok(tree.allReduce({tensorOf(low)}, Reduction::min()), what + " (min fingerprint)");
  ok(tree.allReduce({tensorOf(high)}, Reduction::max()), what + " (max fingerprint)");
  expect(low[0] == high[0], what + ": ranks hold different bytes");
}

template <typename T>
void expectAll(const std::vector<T>& values, T expected, const std::string& what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != expected) {
      failCheck(what + ": element " + std::to_string(i) + " is " + std::to_string(values[i]) +
                ", expected " + std::to_string(expected));
    }
  }
}

// 1..N summed (the first test), every op, every dtype, several
// tensors in one call, and a custom reduction.
void checkSum(Tree& tree) {
  const int n = tree.size();
  const int r = tree.rank();
  std::vector<float> f32(5, float(r + 1));
  std::vector<double> f64(7, double(r + 1));
  std::vector<int32_t> i32(3, r + 1);
  std::vector<int64_t> i64(9, r + 1);
  ok(tree.allReduce({tensorOf(f32), tensorOf(f64), tensorOf(i32), tensorOf(i64)}, Reduction::sum()),
     "sum");
  const int64_t total = int64_t(n) * (n + 1) / 2;
  expectAll(f32, float(total), "sum f32");
  expectAll(f64, double(total), "sum f64");
  expectAll(i32, int32_t(total), "sum i32");
  expectAll(i64, int64_t(total), "sum i64");

  std::vector<int64_t> product(4, r + 1);
  int64_t factorial = 1;
  for (int k = 2; k <= n; ++k) factorial *= k;
  ok(tree.allReduce({tensorOf(product)}, Reduction::product()), "product");
  expectAll(product, factorial, "product i64");

  std::vector<float> low(6, float(r + 1)), high(6, float(r + 1));
  ok(tree.allReduce({tensorOf(low)}, Reduction::min()), "min");
  ok(tree.allReduce({tensorOf(high)}, Reduction::max()), "max");
  expectAll(low, 1.0f, "min f32");
  expectAll(high, float(n), "max f32");

  std::vector<double> mean(3, double(r + 1));
  std::vector<int32_t> meanInt(3, 10 * (r + 1));
  ok(tree.allReduce({tensorOf(mean), tensorOf(meanInt)}, Reduction::average()), "average");
  expectAll(mean, double(total) / n, "average f64");
  expectAll(meanInt, int32_t(10 * total / n), "average i32");

  // A custom reduction: the larger absolute value, keeping its sign.
  std::vector<float> signedValues(4, (r % 2 ? -1.0f : 1.0f) * float(r + 1));
  auto largestMagnitude = Reduction::custom([](const TensorView& acc, const TensorView& in) {
    auto* a = static_cast<float*>(acc.data);
    auto* b = static_cast<const float*>(in.data);
    for (size_t i = 0; i < acc.count; ++i) a[i] = std::fabs(b[i]) > std::fabs(a[i]) ? b[i] : a[i];
  });
  ok(tree.allReduce({tensorOf(signedValues)}, largestMagnitude), "custom");
  expectAll(signedValues, ((n - 1) % 2 ? -1.0f : 1.0f) * float(n), "custom f32");

  // Bit-identical results where rounding depends on the order of additions.
  std::vector<float> noisy(1000);
  for (size_t i = 0; i < noisy.size(); ++i) noisy[i] = std::sin(float(i * 7 + r * 131)) * 1e-3f * (r + 1);
  ok(tree.allReduce({tensorOf(noisy)}, Reduction::sum()), "noisy sum");
  expectIdenticalEverywhere(tree, noisy.data(), noisy.size() * sizeof(float), "noisy sum");

  // The same checks on calls large enough for the ring (one host).
  std::vector<double> bigMean(size_t(1) << 17, double(r + 1));
  std::vector<int32_t> bigMax(size_t(1) << 18, r + 1);
  ok(tree.allReduce({tensorOf(bigMean)}, Reduction::average()), "large average");
  expectAll(bigMean, double(total) / n, "large average f64");
  ok(tree.allReduce({tensorOf(bigMax)}, Reduction::max()), "large max");
  expectAll(bigMax, int32_t(n), "large max i32");
  std::vector<float> bigNoisy(size_t(1) << 19);
  for (size_t i = 0; i < bigNoisy.size(); ++i) bigNoisy[i] = std::cos(float(i * 3 + r * 17)) * (r + 1);
  ok(tree.allReduce({tensorOf(bigNoisy)}, largestMagnitude), "large custom");
  expectIdenticalEverywhere(tree, bigNoisy.data(), bigNoisy.size() * sizeof(float), "large custom");
  ok(tree.allReduce({tensorOf(bigNoisy)}, Reduction::sum()), "large noisy sum");
  expectIdenticalEverywhere(tree, bigNoisy.data(), bigNoisy.size() * sizeof(float), "large noisy sum");

  ok(tree.barrier(), "barrier");
}

// Tensors of several dtypes and sizes (up to maxBytes) against a reference.
void checkSizes(Tree& tree, size_t maxBytes) {
  const int n = tree.size();
  const int r = tree.rank();
  const int64_t rankSum = int64_t(n) * (n - 1) / 2;
  std::vector<size_t> sizes{4, 1024, 100 * 1024 + 12, 1 << 20, 3 << 20, 16 << 20, 64 << 20};
  for (size_t bytes : sizes) {
    if (bytes > maxBytes) break;
    // Small integers, so float sums are exact whatever the order.
    std::vector<float> values(bytes / sizeof(float));
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 97 + r);
    ok(tree.allReduce({tensorOf(values)}, Reduction::sum()), "sum of " + std::to_string(bytes) + " B");
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = float(int64_t(n) * int64_t(i % 97) + rankSum);
      if (values[i] != expected) {
        failCheck(std::to_string(bytes) + " B f32: element " + std::to_string(i) + " is " +
                  std::to_string(values[i]) + ", expected " + std::to_string(expected));
      }
    }
    expectIdenticalEverywhere(tree, values.data(), bytes, std::to_string(bytes) + " B");
  }
  // Other dtypes, odd counts, in one call.
  const size_t count = std::min<size_t>(maxBytes / 8, (1 << 18) + 3);
  std::vector<double> f64(count);
  std::vector<int32_t> i32(count + 1);
  std::vector<int64_t> i64(count + 2);
  for (size_t i = 0; i < f64.size(); ++i) f64[i] = double(i % 1000) + r;
  for (size_t i = 0; i < i32.size(); ++i) i32[i] = int32_t(i % 1000) - r;
  for (size_t i = 0; i < i64.size(); ++i) i64[i] = int64_t(i) * 1000003 + r;
  ok(tree.allReduce({tensorOf(f64), tensorOf(i32), tensorOf(i64)}, Reduction::sum()), "mixed");
  for (size_t i = 0; i < f64.size(); ++i) {
    expect(f64[i] == double(n) * double(i % 1000) + double(rankSum), "mixed f64 at " + std::to_string(i));
  }
  for (size_t i = 0; i < i32.size(); ++i) {
    expect(i32[i] == int32_t(n * int64_t(i % 1000) - rankSum), "mixed i32 at " + std::to_string(i));
  }
  for (size_t i = 0; i < i64.size(); ++i) {
    expect(i64[i] == n * (int64_t(i) * 1000003) + rankSum, "mixed i64 at " + std::to_string(i));
  }
}

// torch-ipc's uneven steps: rank r has r + 1 steps of work; ranks that are
// done keep calling with no contribution until nobody contributes.
void checkUneven(Tree& tree) {
  const int r = tree.rank();
  for (int step = 0;; ++step) {
    const bool working = step <= r;
    std::vector<int64_t> value(3, working ? r + 1 : -999);
    // Large enough for the ring on one host (TreeOptions::ringThreshold).
    std::vector<int64_t> large(size_t(1) << 17, working ? r + 1 : -999);
    // Two calls: a small one (tree, exchange or doubling) and a large one (ring).
    int contributors = -1;
    int contributorsLarge = -1;
    const Contribution mine = working ? Contribution::kData : Contribution::kNothing;
    ok(tree.allReduce({tensorOf(value)}, Reduction::sum(), mine, &contributors),
       "uneven step " + std::to_string(step));
    ok(tree.allReduce({tensorOf(large)}, Reduction::sum(), mine, &contributorsLarge),
       "uneven step (large) " + std::to_string(step));
    expect(contributors == contributorsLarge, "small and large calls disagree on contributors");
    // Ranks step..n-1 are still working at this step.
    const int n = tree.size();
    const int expectedContributors = std::max(0, n - step);
    expect(contributors == expectedContributors,
           "uneven step " + std::to_string(step) + ": " + std::to_string(contributors) +
               " contributors, expected " + std::to_string(expectedContributors));
    int64_t expected = 0;
    for (int k = step; k < n; ++k) expected += k + 1;
    expectAll(value, expected, "uneven step " + std::to_string(step));
    expectAll(large, expected, "uneven step (large) " + std::to_string(step));
    if (contributors == 0) break;
  }
}

void checkBroadcastAndScatter(Tree& tree) {
  const int r = tree.rank();
  const int n = tree.size();
  for (size_t count : {size_t(1), size_t(1000), size_t(3) << 20}) {
    std::vector<int32_t> values(count, 0);
    std::vector<double> extra(7, 0.0);
    if (r == 0) {
      for (size_t i = 0; i < count; ++i) values[i] = int32_t(i * 7 + 1);
      for (size_t i = 0; i < extra.size(); ++i) extra[i] = 0.5 * double(i);
    }
    ok(tree.broadcast({tensorOf(values), tensorOf(extra)}), "broadcast");
    for (size_t i = 0; i < count; ++i) expect(values[i] == int32_t(i * 7 + 1), "broadcast value");
    for (size_t i = 0; i < extra.size(); ++i) expect(extra[i] == 0.5 * double(i), "broadcast extra");
  }
  std::vector<std::vector<int64_t>> shares;
  std::vector<TensorView> perRank;
  if (r == 0) {
    shares.resize(n);
    for (int k = 0; k < n; ++k) {
      shares[k].assign(1000, 0);
      for (size_t i = 0; i < 1000; ++i) shares[k][i] = int64_t(k) * 100000 + int64_t(i);
    }
    for (auto& share : shares) perRank.push_back(tensorOf(share));
  }
  std::vector<int64_t> mine(1000, -1);
  ok(tree.scatter(perRank, tensorOf(mine)), "scatter");
  for (size_t i = 0; i < mine.size(); ++i) expect(mine[i] == int64_t(r) * 100000 + int64_t(i), "scatter value");
}

// A barrier outside the group: the victim must not die before every rank has
// finished the warm-up (it finishes its own first, and a rank still reading
// the last warm-up message would see the death there). Each survivor drops a
// marker in a directory named after the launcher; the victim waits for all.
void warmedUp(const Tree& tree, int victim) {
  const std::string dir = "/tmp/actorpipe-check-" + std::to_string(::getppid()) + "-" +
                          std::to_string(tree.size());
  ::mkdir(dir.c_str(), 0700);  // every rank tries; one creates it
  const auto marker = [&](int rank) { return dir + "/" + std::to_string(rank); };
  if (tree.rank() != victim) {
    FILE* f = std::fopen(marker(tree.rank()).c_str(), "w");
    expect(f != nullptr, "cannot create " + marker(tree.rank()));
    std::fclose(f);
    return;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (int rank = 0; rank < tree.size(); ++rank) {
    if (rank == victim) continue;
    while (::access(marker(rank).c_str(), F_OK) != 0) {
      expect(Clock::now() < deadline, "rank " + std::to_string(rank) + " never finished its warm-up");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  for (int rank = 0; rank < tree.size(); ++rank) ::unlink(marker(rank).c_str());
  ::rmdir(dir.c_str());
}

// The victim dies in the middle of an allReduce; every other rank's
// collective must fail naming it, within a bound.
int checkDeath(Tree& tree, int victim, bool small) {
  std::vector<float> warmup(1000, 1.0f);
  ok(tree.allReduce({tensorOf(warmup)}, Reduction::sum()), "warm-up");
  warmedUp(tree, victim);
  // 16 MiB goes round the ring on one host; 4 KiB uses the tree, the
  // exchange or recursive doubling, depending on the group's size.
  std::vector<float> big(small ? 1024 : size_t(16) << 20 >> 2, 1.0f);
  if (tree.rank() == victim) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ::raise(SIGKILL);
    }).detach();
    for (;;) tree.allReduce({tensorOf(big)}, Reduction::sum());
  }
  const auto start = Clock::now();
  actorpipe::Error error;
  for (int i = 0; i < 1000000 && !error; ++i) error = tree.allReduce({tensorOf(big)}, Reduction::sum());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  expect(static_cast<bool>(error), "no collective failed although rank " + std::to_string(victim) + " died");
  auto failed = error.castToType<RankFailedError>();
  expect(failed != nullptr, "the error does not name a rank: " + error.what());
  expect(failed->rank() == victim, "the error names rank " + std::to_string(failed->rank()) +
                                       " instead of " + std::to_string(victim) + ": " + error.what());
  expect(seconds < 20, "the failure took " + std::to_string(seconds) + " s to surface");
  // Later collectives fail at once with the same error.
  actorpipe::Error again = tree.allReduce({tensorOf(warmup)}, Reduction::sum());
  expect(again && again.castToType<RankFailedError>() &&
             again.castToType<RankFailedError>()->rank() == victim,
         "a later collective did not fail with the same error");
  std::printf("survivor %d saw: %s\n", tree.rank(), error.what().c_str());
  return 0;
}

void checkSlurm(Tree& tree, const SlurmPlacement& placement, int tasksPerGpu) {
  const RankInfo& info = tree.info();
  expect(info.source == "slurm", "rank info came from " + info.source + ", not Slurm");
  expect(info.nodes == 2, "expected 2 nodes, got " + std::to_string(info.nodes));
  expect(placement.gpu == info.localRank / tasksPerGpu, "wrong GPU index");
  // One host leader per node; the two leaders are ranks 0 and N/2.
  const int perNode = info.worldSize / info.nodes;
  expect(tree.node().hostLeader == (info.rank % perNode == 0), "host leaders are not one per node");
  std::vector<int32_t> values(10, info.rank + 1);
  ok(tree.allReduce({tensorOf(values)}, Reduction::sum()), "slurm sum");
  const int n = info.worldSize;
  expectAll(values, int32_t(n * (n + 1) / 2), "slurm sum");
  std::printf("rank %d on %s gpu %d:", info.rank, info.host.c_str(), placement.gpu);
  for (const auto& line : tree.links()) std::printf(" [%s]", line.c_str());
  std::printf("\n");
  // With mpt lanes offered, links between processes of one machine (all of
  // them here, whatever Slurm says) must not pick mpt's loopback lanes: the
  // default backends register cma then (actors/backends.h).
  if (std::getenv("GROUP_CHECK_LANES") != nullptr) {
    for (const auto& line : tree.links()) {
      expect(line.find("/mpt") == std::string::npos, "a link on one machine picked mpt: " + line);
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  TreeOptions options;
  options.rendezvousTimeout = std::chrono::seconds(20);
  options.operationTimeout = std::chrono::seconds(60);
  if (const char* radix = std::getenv("GROUP_CHECK_RADIX")) options.radix = std::atoi(radix);
  if (const char* lanes = std::getenv("GROUP_CHECK_LANES")) options.crossHostLanes = std::atoi(lanes);
  if (const char* ms = std::getenv("GROUP_CHECK_TIMEOUT_MS")) {
    options.operationTimeout = std::chrono::milliseconds(std::atoi(ms));
  }

  // Scenarios that need the group formed differently come first.
  if (!args.empty() && args[0] == "absent") {
    RankInfo info;
    ok(rankInfoFromEnvironment(info), "environment");
    gRank = info.rank;
    const int absent = std::atoi(args.at(1).c_str());
    if (info.rank == absent) return 0;  // never shows up
    // Rank 0 gives up after 6 s and tells the others who is missing. They
    // wait their own timeout plus 2 s for that verdict, counted from their
    // own start: with the same timeout, a rank 0 that starts 2 s later
    // (process start under a sanitizer on a loaded machine) would not be
    // heard; and a rank that starts after rank 0 gave up would be named too.
    options.rendezvousTimeout = std::chrono::seconds(info.rank == 0 ? 6 : 15);
    std::unique_ptr<Tree> tree;
    const auto start = Clock::now();
    actorpipe::Error error = Tree::create(info, options, tree);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    expect(static_cast<bool>(error), "the group formed without rank " + args[1]);
    expect(error.isOfType<RendezvousError>(), "not a rendezvous error: " + error.what());
    expect(error.what().find("rank " + args[1]) != std::string::npos,
           "the error does not name rank " + args[1] + ": " + error.what());
    expect(seconds < 25, "the rendezvous failure took " + std::to_string(seconds) + " s");
    std::printf("rank %d saw: %s\n", info.rank, error.what().c_str());
    return 0;
  }

  if (!args.empty() && args[0] == "disagree") {
    // The test gives one rank other collective settings: every rank's
    // Tree::create fails at once with the same words, naming that rank and
    // the setting; none hangs.
    const std::string rank = args.at(1);
    std::unique_ptr<Tree> tree;
    const auto start = Clock::now();
    actorpipe::Error error = Tree::fromEnvironment(options, tree);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    expect(static_cast<bool>(error), "the group formed although rank " + rank + " chose differently");
    expect(error.isOfType<actorpipe::LogicError>(), "not a LogicError: " + error.what());
    expect(error.what().find("rank " + rank + " chose its collectives differently from rank 0: " + args.at(2)) !=
               std::string::npos,
           "the error does not name rank " + rank + " and " + args.at(2) + ": " + error.what());
    expect(seconds < 15, "the failure took " + std::to_string(seconds) + " s");
    std::printf("saw: %s\n", error.what().c_str());
    return 0;
  }

  std::unique_ptr<Tree> tree;
  SlurmPlacement placement;
  int tasksPerGpu = 1;
  if (!args.empty() && args[0] == "slurm") {
    tasksPerGpu = args.size() > 1 ? std::atoi(args[1].c_str()) : 1;
    ok(SlurmTree::create(SlurmTreeOptions{options, tasksPerGpu}, tree, placement), "SlurmTree");
  } else {
    ok(Tree::fromEnvironment(options, tree), "joining the group");
  }
  gRank = tree->rank();

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& scenario = args[i];
    if (scenario == "sum") {
      checkSum(*tree);
    } else if (scenario == "sizes") {
      checkSizes(*tree, std::strtoull(args.at(++i).c_str(), nullptr, 10));
    } else if (scenario == "uneven") {
      checkUneven(*tree);
    } else if (scenario == "broadcast") {
      checkBroadcastAndScatter(*tree);
    } else if (scenario == "die") {
      const int victim = std::atoi(args.at(++i).c_str());
      const bool small = i + 1 < args.size() && args[i + 1] == "small";
      return checkDeath(*tree, victim, small);
    } else if (scenario == "slurm") {
      checkSlurm(*tree, placement, tasksPerGpu);
      ++i;
    } else if (scenario == "mismatch") {
      // Rank 1 passes a tensor of another size: every rank fails, none hangs.
      std::vector<float> values(tree->rank() == 1 ? 12 : 10, 1.0f);
      actorpipe::Error error = tree->allReduce({tensorOf(values)}, Reduction::sum());
      expect(error && error.isOfType<actorpipe::LogicError>(),
             "a shape mismatch gave: " + (error ? error.what() : std::string("no error")));
      std::printf("rank %d saw: %s\n", tree->rank(), error.what().c_str());
      return 0;
    } else if (scenario == "links") {
      for (const auto& line : tree->links()) std::printf("%s\n", line.c_str());
    } else if (scenario == "late") {
      // Rank 2 comes late to a broadcast that rank 1 finishes at once; rank 1
      // (given a short operationTimeout by the test) then times out in the
      // next collective and tells everyone. Its notice must not fail the
      // broadcast, which every rank can still finish: only the next one fails.
      if (tree->rank() == 2) std::this_thread::sleep_for(std::chrono::seconds(6));
      std::vector<int32_t> values(size_t(1) << 16, tree->rank() == 0 ? 7 : 0);
      ok(tree->broadcast({tensorOf(values)}), "the broadcast before the failure");
      expectAll(values, int32_t(7), "broadcast values");
      std::vector<float> next(16, 1.0f);
      actorpipe::Error error = tree->allReduce({tensorOf(next)}, Reduction::sum());
      expect(error && error.isOfType<TimeoutError>(),
             "the collective after it gave: " + (error ? error.what() : std::string("no error")));
      std::printf("rank %d saw: %s\n", tree->rank(), error.what().c_str());
      return 0;
    } else if (scenario == "arena" || scenario == "noarena") {
      // Whether this rank's collectives run on the host arena, as expected.
      const std::string wanted =
          scenario == "arena" ? "host arena: " + std::to_string(tree->size()) + " ranks" : "host arena: off";
      bool found = false;
      for (const auto& line : tree->links()) found = found || line.rfind(wanted, 0) == 0;
      expect(found, "no \"" + wanted + "\" line in links()");
    } else {
      failCheck("unknown scenario " + scenario);
    }
    if (tree->rank() == 0) std::printf("ok %s\n", scenario.c_str());
  }
  return 0;
}
