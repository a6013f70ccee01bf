// actorpipe-soak: two processes, many pipes (tcp/basic, tcp/mpt, shm/cma),
// random message shapes, every byte checked, for a given time.
//
//   actorpipe-soak [--duration SECONDS] [--pipes N] [--max-tensor BYTES]
//                  [--seed N] [--max-rss-mb MB] [--progress SECONDS]
//
// The parent writes random messages on every pipe; the child checks each
// payload and tensor against the checksum its metadata carries and echoes
// the message back; the parent compares the echo with what it sent. At the
// end it prints messages, bytes, errors and peak memory (VmHWM) of both
// processes, and exits non-zero on any corruption or unexpected error (or
// when a peak RSS passes --max-rss-mb).
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  double duration{20};
  int pipes{8};
  size_t maxTensor{4u << 20};
  size_t maxPayload{256u << 10};
  unsigned seed{0};
  size_t maxRssMb{0};
  double progress{0};
};

uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h ^ (h >> 32);
}

void fill(std::vector<uint8_t>& v, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

size_t peakRss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Sizes spread over orders of magnitude: 2^e for a random e, then uniform below.
size_t randomSize(std::mt19937_64& rng, size_t max) {
  int bits = 0;
  while ((size_t(1) << (bits + 1)) <= max) ++bits;
  size_t top = size_t(1) << std::uniform_int_distribution<int>(0, bits)(rng);
  return std::uniform_int_distribution<size_t>(0, std::min(top, max))(rng);
}

// Checks each region of a received message against the checksum in its metadata.
bool verify(const Descriptor& d, const Storage& s, std::string& why) {
  for (size_t i = 0; i < d.payloads.size(); ++i) {
    const auto& b = s.payloads[i];
    if (d.payloads[i].metadata != hex(checksum(b.data(), b.size()))) {
      why = "payload " + std::to_string(i) + " of " + d.metadata;
      return false;
    }
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    const auto& b = s.tensors[i];
    if (d.tensors[i].metadata != hex(checksum(b.data(), b.size()))) {
      why = "tensor " + std::to_string(i) + " of " + d.metadata;
      return false;
    }
  }
  return true;
}

// The same message back, with the metadata it came with.
Message echoOf(const Descriptor& d, Storage& s) {
  Message m = messageOver(s, d.metadata);
  for (size_t i = 0; i < m.payloads.size(); ++i) m.payloads[i].metadata = d.payloads[i].metadata;
  for (size_t i = 0; i < m.tensors.size(); ++i) m.tensors[i].metadata = d.tensors[i].metadata;
  return m;
}

std::shared_ptr<Context> childContext() {
  auto context = makeFullContext("soak-child");
  context->registerChannel(5, "mpt", channel::mpt::create(2, "127.0.0.1"));
  return context;
}

int child(Child& self, int pipes) {
  auto context = childContext();
  auto listener = context->listen({"tcp://127.0.0.1:0", "shm://"});
  self.send(listener->url("tcp"));
  self.send(listener->url("shm"));
  std::atomic<int> corrupt{0}, errors{0};
  std::atomic<uint64_t> messages{0}, bytes{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < pipes; ++i) {
    Error error;
    auto pipe = acceptSync(*listener, &error, std::chrono::seconds(60));
    if (!pipe) {
      std::fprintf(stderr, "soak child: accept failed: %s\n", error.what().c_str());
      return 2;
    }
    threads.emplace_back([pipe, &corrupt, &errors, &messages, &bytes] {
      for (;;) {
        Received r = readSync(*pipe, std::chrono::seconds(120));
        if (r.error) {
          if (!r.error.isOfType<EOFError>()) {
            std::fprintf(stderr, "soak child: read failed: %s\n", r.error.what().c_str());
            errors++;
          }
          return;
        }
        std::string why;
        if (!verify(r.descriptor, r.storage, why)) {
          std::fprintf(stderr, "soak child: CORRUPT %s\n", why.c_str());
          corrupt++;
          return;
        }
        messages++;
        for (auto& p : r.storage.payloads) bytes += p.size();
        for (auto& t : r.storage.tensors) bytes += t.size();
        Error e = writeSync(*pipe, echoOf(r.descriptor, r.storage), std::chrono::seconds(120));
        if (e) {
          std::fprintf(stderr, "soak child: write failed: %s\n", e.what().c_str());
          errors++;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  self.send(std::to_string(messages.load()) + " " + std::to_string(bytes.load()) + " " +
            std::to_string(errors.load()) + " " + std::to_string(corrupt.load()) + " " +
            std::to_string(peakRss()));
  context->close();
  context->join();
  return corrupt || errors ? 1 : 0;
}

struct Totals {
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> errors{0};
  std::atomic<int> corrupt{0};
};

void worker(Pipe& pipe, int index, const Options& o, Clock::time_point deadline, Totals& totals) {
  std::mt19937_64 rng(o.seed * 1000003ull + index);
  for (uint64_t seq = 0; Clock::now() < deadline; ++seq) {
    Storage s;
    int payloads = std::uniform_int_distribution<int>(0, 3)(rng);
    int tensors = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int i = 0; i < payloads; ++i) {
      s.payloads.emplace_back(randomSize(rng, o.maxPayload));
      fill(s.payloads.back(), rng());
    }
    for (int i = 0; i < tensors; ++i) {
      s.tensors.emplace_back(randomSize(rng, o.maxTensor));
      fill(s.tensors.back(), rng());
    }
    std::string metadata = "pipe " + std::to_string(index) + " message " + std::to_string(seq);
    Message m = messageOver(s, metadata);
    uint64_t size = 0;
    for (size_t i = 0; i < m.payloads.size(); ++i) {
      m.payloads[i].metadata = hex(checksum(s.payloads[i].data(), s.payloads[i].size()));
      size += s.payloads[i].size();
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      m.tensors[i].metadata = hex(checksum(s.tensors[i].data(), s.tensors[i].size()));
      size += s.tensors[i].size();
    }
    Error e = writeSync(pipe, std::move(m), std::chrono::seconds(120));
    if (e) {
      std::fprintf(stderr, "soak: pipe %d: write failed: %s\n", index, e.what().c_str());
      totals.errors++;
      return;
    }
    Received r = readSync(pipe, std::chrono::seconds(120));
    if (r.error) {
      std::fprintf(stderr, "soak: pipe %d: read failed: %s\n", index, r.error.what().c_str());
      totals.errors++;
      return;
    }
    std::string why;
    if (r.descriptor.metadata != metadata || !verify(r.descriptor, r.storage, why) ||
        r.storage.payloads != s.payloads || r.storage.tensors != s.tensors) {
      std::fprintf(stderr, "soak: pipe %d: CORRUPT echo of %s %s\n", index, metadata.c_str(), why.c_str());
      totals.corrupt++;
      return;
    }
    totals.messages += 2;
    totals.bytes += 2 * size;
  }
}

void usage() {
  std::fprintf(stderr,
               "usage: actorpipe-soak [--duration SECONDS] [--pipes N] [--max-tensor BYTES]\n"
               "                      [--seed N] [--max-rss-mb MB] [--progress SECONDS]\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.seed = static_cast<unsigned>(Clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--duration") o.duration = std::atof(next());
    else if (a == "--pipes") o.pipes = std::atoi(next());
    else if (a == "--max-tensor") o.maxTensor = std::strtoull(next(), nullptr, 10);
    else if (a == "--seed") o.seed = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    else if (a == "--max-rss-mb") o.maxRssMb = std::strtoull(next(), nullptr, 10);
    else if (a == "--progress") o.progress = std::atof(next());
    else {
      usage();
      return 2;
    }
  }
  if (o.pipes < 1 || o.duration <= 0) {
    usage();
    return 2;
  }
  std::printf("actorpipe-soak: %.0f s, %d pipes, tensors up to %zu bytes, seed %u\n", o.duration,
              o.pipes, o.maxTensor, o.seed);
  std::fflush(stdout);
  // The child first, before this process starts any thread.
  int pipes = o.pipes;
  Child peer = Child::spawn([pipes](Child& self) { return child(self, pipes); },
                            std::chrono::seconds(static_cast<long>(o.duration) + 600));
  std::string url = peer.receive(std::chrono::seconds(60));
  std::string shmUrl = peer.receive(std::chrono::seconds(60));
  if (url.empty() || shmUrl.empty()) {
    std::fprintf(stderr, "soak: the child did not start\n");
    return 1;
  }
  // Three kinds of pipes: tcp/basic, tcp/mpt, and shm/cma.
  std::vector<std::shared_ptr<Context>> contexts;
  {
    auto tcp = std::make_shared<Context>(ContextOptions().name("soak-tcp"));
    tcp->registerTransport(0, "tcp", transport::uv::create());
    tcp->registerChannel(0, "basic", channel::basic::create());
    contexts.push_back(tcp);
    auto mpt = std::make_shared<Context>(ContextOptions().name("soak-mpt"));
    mpt->registerTransport(0, "tcp", transport::uv::create());
    mpt->registerChannel(0, "basic", channel::basic::create());
    mpt->registerChannel(5, "mpt", channel::mpt::create(2, "127.0.0.1"));
    contexts.push_back(mpt);
    contexts.push_back(makeFullContext("soak-shm"));
  }
  std::vector<std::shared_ptr<Pipe>> pipeHandles;
  std::map<std::string, int> kinds;
  for (int i = 0; i < o.pipes; ++i) {
    size_t kind = i % contexts.size();
    pipeHandles.push_back(contexts[kind]->connect(kind == 2 ? shmUrl : url));
  }
  auto start = Clock::now();
  auto deadline = start + std::chrono::milliseconds(static_cast<long>(o.duration * 1000));
  Totals totals;
  std::vector<std::thread> workers;
  for (int i = 0; i < o.pipes; ++i) {
    workers.emplace_back([&, i] { worker(*pipeHandles[i], i, o, deadline, totals); });
  }
  std::atomic<bool> done{false};
  std::thread reporter;
  if (o.progress > 0) {
    reporter = std::thread([&] {
      auto next = start;
      while (!done) {
        next += std::chrono::milliseconds(static_cast<long>(o.progress * 1000));
        while (!done && Clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (done) break;
        std::printf("  %6.0f s: %" PRIu64 " messages, %.2f GiB, %d errors, %d corrupt, peak RSS %zu MiB\n",
                    std::chrono::duration<double>(Clock::now() - start).count(), totals.messages.load(),
                    totals.bytes.load() / double(1u << 30), totals.errors.load(), totals.corrupt.load(),
                    peakRss() >> 20);
        std::fflush(stdout);
      }
    });
  }
  for (auto& t : workers) t.join();
  done = true;
  if (reporter.joinable()) reporter.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& p : pipeHandles) {
    PipeInfo info = p->info();
    auto channel = info.channels.count(kCpuDeviceType) ? info.channels[kCpuDeviceType] : "?";
    kinds[info.transport + "/" + channel]++;
    p->close();
  }
  std::string report = peer.receive(std::chrono::seconds(120));
  int childStatus = peer.wait(std::chrono::seconds(60));
  uint64_t childMessages = 0, childBytes = 0;
  int childErrors = -1, childCorrupt = -1;
  size_t childPeak = 0;
  if (std::sscanf(report.c_str(), "%" SCNu64 " %" SCNu64 " %d %d %zu", &childMessages, &childBytes,
                  &childErrors, &childCorrupt, &childPeak) != 5) {
    std::fprintf(stderr, "soak: no report from the child (status %d)\n", childStatus);
    childErrors = 1;
  }
  for (auto& c : contexts) c->close();
  for (auto& c : contexts) c->join();
  size_t parentPeak = peakRss();
  std::printf("pipes:");
  for (auto& k : kinds) std::printf(" %s x%d", k.first.c_str(), k.second);
  std::printf("\n");
  std::printf("messages: %" PRIu64 " (%" PRIu64 " verified by the child), %.2f GiB in %.1f s (%.2f GB/s)\n",
              totals.messages.load(), childMessages, totals.bytes.load() / double(1u << 30), elapsed,
              totals.bytes.load() / elapsed / 1e9);
  std::printf("errors: %d (child %d), corrupt: %d (child %d)\n", totals.errors.load(), childErrors,
              totals.corrupt.load(), childCorrupt);
  std::printf("peak RSS: parent %zu MiB, child %zu MiB\n", parentPeak >> 20, childPeak >> 20);
  bool ok = totals.errors == 0 && totals.corrupt == 0 && childErrors == 0 && childCorrupt == 0 &&
            childStatus == 0 && totals.messages > 0;
  if (o.maxRssMb && ((parentPeak >> 20) > o.maxRssMb || (childPeak >> 20) > o.maxRssMb)) {
    std::printf("peak RSS above --max-rss-mb %zu\n", o.maxRssMb);
    ok = false;
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
