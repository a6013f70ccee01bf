#pragma once
// Ping-pong over a pipe, shared by actorpipe-bench and the demo. Like
// TensorPipe's benchmark_pipe, each round trip is started from the previous
// one's last callback, so no user thread sits between messages: what is
// measured is the pipe, its actor and its transport.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe::bench {

struct Shape {
  size_t metadataSize{8};
  int payloads{0};
  size_t payloadSize{0};
  int tensors{0};
  size_t tensorSize{0};
  // Tensors in CUDA memory (device 0) on both sides. A round trip then ends
  // once the client's stream is synchronised after the echo's read, as
  // TensorPipe's benchmark_pipe --tensor-type=cuda measures it.
  bool cudaTensors{false};

  // Bytes one message carries (metadata, payloads and tensors).
  size_t bytes() const { return metadataSize + payloads * payloadSize + tensors * tensorSize; }
  std::string describe() const;
};

struct Stats {
  std::vector<double> roundTripsUs;  // sorted
  double p50{0}, p90{0}, p99{0};
  double mean{0};  // what a profiler's samples are shares of
  // Bytes per direction over half the median round trip: each direction
  // moves one message per round trip, and the two directions take turns.
  double gigabytesPerSecond{0};
  std::string error;  // empty on success
};

// Echoes every message of `pipes` accepted pipes until each peer hangs up.
// Blocks; returns the number of pipes that ended with an error other than EOF.
int serveEcho(Listener& listener, int pipes);

// Runs `warmup` then `iterations` round trips of `shape` on `pipe`.
// `progress` (if set) is called now and then with the iterations done.
// When `verify` is set, every echoed byte is compared with what was sent.
Stats measure(Pipe& pipe, const Shape& shape, int warmup, int iterations, bool verify = false,
              std::function<void(int)> progress = nullptr);

// Starts a child process that listens on `url` and echoes; returns its pid
// and the URL to connect to. `cpu` >= 0 pins the child to that CPU.
struct Server {
  int pid{-1};
  std::string url;
};
// `alsoListen` (if set) is a second URL the server listens on, so that
// clients can move there (shm beside tcp, say).
Server forkEchoServer(const std::string& url, int pipes, int cpu,
                      const std::function<std::shared_ptr<Context>()>& makeContext,
                      const std::string& alsoListen = std::string());
int waitServer(const Server& server);

// The device-to-device copy ceiling: `bytes` copied by cudaMemcpyAsync on
// one stream, synchronised, `iterations` times; median microseconds (0 with
// `error` set where there is no CUDA).
double cudaCopyMedianUs(size_t bytes, int iterations, std::string& error);

// Pins the calling process (and threads it starts later) to one CPU.
bool pinToCpu(int cpu);

} // namespace actorpipe::bench
