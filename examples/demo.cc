// actorpipe-demo: two processes exchange messages with payloads and tensors
// over a pipe, check every byte, and report what the pipe chose and how
// fast it went. The main job of README.md.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include <actorpipe/actors/backends.h>

#include "../benchmarks/pingpong.h"

using namespace actorpipe;
using namespace actorpipe::bench;

int main(int argc, char** argv) {
  // --quick: a tenth of the round trips per step (the sanitizer builds run
  // the demo as a test, where its speed means nothing and a 64 MiB copy is
  // slow); every step still runs and the same ones are verified.
  const bool quick = argc == 2 && std::strcmp(argv[1], "--quick") == 0;
  if (argc > 1 && !quick) {
    std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
    return 2;
  }
  auto makeContext = [](const std::string& name) {
    // Everything that works without special hardware; the peers choose.
    auto context = std::make_shared<Context>(ContextOptions().name(name));
    registerDefaultBackends(*context);
    return context;
  };
  std::printf("actorpipe demo: starting a second process to echo messages...\n");
  // The echo process listens on shm and TCP; we connect over TCP and let the
  // pipe move to whatever the two processes share that is faster.
  Server server = forkEchoServer("tcp://127.0.0.1:0", 1, 0, [&] {
    auto context = makeContext("demo-server");
    return context;
  }, "shm://");
  if (server.url.empty()) {
    std::fprintf(stderr, "the echo process did not start\n");
    return 1;
  }
  pinToCpu(1);
  int rc = 0;
  {
    auto context = makeContext("demo-client");
    auto pipe = context->connect(server.url);
    std::printf("connected to %s (pid %d)\n\n", server.url.c_str(), server.pid);

    struct Step {
      const char* what;
      Shape shape;
      int warmup, iterations;
      bool verify;
    };
    const Step steps[] = {
        {"mixed message, every byte checked", {64, 4, 4096, 4, 1 << 20}, 2, 20, true},
        {"latency, 8-byte metadata", {8, 0, 0, 0, 0}, 200, 2000, false},
        {"latency, 1 KiB tensor", {8, 0, 0, 1, 1024}, 200, 2000, false},
        {"bandwidth, 16 MiB tensor", {8, 0, 0, 1, 16 << 20}, 3, 30, true},
        {"bandwidth, 64 MiB tensor", {8, 0, 0, 1, 64 << 20}, 2, 10, false},
    };
    for (const auto& step : steps) {
      const int warmup = quick ? 1 : step.warmup;
      const int iterations = quick ? std::max(2, step.iterations / 10) : step.iterations;
      Stats s = measure(*pipe, step.shape, warmup, iterations, step.verify);
      if (!s.error.empty()) {
        std::fprintf(stderr, "%s: %s\n", step.what, s.error.c_str());
        rc = 1;
        break;
      }
      if (&step == &steps[0]) {
        PipeInfo info = pipe->info();
        std::printf("negotiated: transport '%s'", info.transport.c_str());
        for (const auto& c : info.channels) std::printf(", %s tensors on channel '%s'", c.first.c_str(), c.second.c_str());
        std::printf(" (peer '%s')\n", info.remoteName.c_str());
        for (const auto& note : info.notes) std::printf("  %s\n", note.c_str());
        std::printf("\n");
        std::printf("%-36s %10s %10s %10s %14s\n", "round trips", "p50 us", "p90 us", "p99 us", "GB/s per dir");
      }
      std::printf("%-36s %10.1f %10.1f %10.1f %14.3f%s\n", step.what, s.p50, s.p90, s.p99,
                  s.gigabytesPerSecond, step.verify ? "  (verified)" : "");
    }
    pipe.reset();
    context->join();
  }
  int serverRc = waitServer(server);
  if (serverRc != 0) {
    std::fprintf(stderr, "the echo process exited with %d\n", serverRc);
    rc = 1;
  }
  std::printf("\n%s\n", rc == 0 ? "demo finished: all data verified" : "demo FAILED");
  return rc;
}
