#include "pingpong.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include <actorpipe/runtime/cuda.h>

namespace actorpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Reusable memory for one side's messages: grown, never shrunk. CUDA
// tensors land in device memory (the stream is made on first use, after any
// fork).
struct Buffers {
  std::string metadata;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::vector<uint8_t>> tensors;
  std::vector<std::pair<void*, size_t>> device;  // per tensor: memory, capacity
  cudaStream_t stream{nullptr};

  ~Buffers() {
    for (auto& d : device) (void)cuda::release(d.first);
    (void)cuda::destroyStream(stream);
  }

  void* deviceTensor(size_t i, size_t length) {
    if (device.size() <= i) device.resize(i + 1, {nullptr, 0});
    Error e;
    if (stream == nullptr) stream = cuda::createStream(0, e);
    if (device[i].second < length || device[i].first == nullptr) {
      (void)cuda::release(device[i].first);
      device[i] = {cuda::allocate(length, 0, e), length};
    }
    if (e) std::fprintf(stderr, "CUDA: %s\n", e.what().c_str());
    return device[i].first;
  }

  Allocation allocate(const Descriptor& d) {
    Allocation a;
    payloads.resize(std::max(payloads.size(), d.payloads.size()));
    tensors.resize(std::max(tensors.size(), d.tensors.size()));
    for (size_t i = 0; i < d.payloads.size(); ++i) {
      if (payloads[i].size() < d.payloads[i].length) payloads[i].resize(d.payloads[i].length);
      a.payloads.push_back({payloads[i].data()});
    }
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      if (d.tensors[i].sourceDevice.type == kCudaDeviceType) {
        a.tensors.push_back({CudaBuffer{deviceTensor(i, d.tensors[i].length), stream, 0}});
        continue;
      }
      if (tensors[i].size() < d.tensors[i].length) tensors[i].resize(d.tensors[i].length);
      a.tensors.push_back({CpuBuffer{tensors[i].data()}});
    }
    return a;
  }

  Message message(const Descriptor& d) {
    Message m;
    m.metadata = d.metadata;
    for (size_t i = 0; i < d.payloads.size(); ++i) {
      m.payloads.push_back({payloads[i].data(), d.payloads[i].length, std::string()});
    }
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      if (d.tensors[i].sourceDevice.type == kCudaDeviceType) {
        m.tensors.push_back({CudaBuffer{device[i].first, stream, 0}, d.tensors[i].length, nullopt, std::string()});
      } else {
        m.tensors.push_back({CpuBuffer{tensors[i].data()}, d.tensors[i].length, nullopt, std::string()});
      }
    }
    return m;
  }
};

struct EchoState {
  std::shared_ptr<Pipe> pipe;
  Buffers buffers;
  std::promise<Error> done;
};

void echoNext(const std::shared_ptr<EchoState>& s) {
  s->pipe->readDescriptor([s](const Error& e, Descriptor d) {
    if (e) return s->done.set_value(e);
    auto shared = std::make_shared<Descriptor>(std::move(d));
    s->pipe->read(s->buffers.allocate(*shared), [s, shared](const Error& e) {
      if (e) return s->done.set_value(e);
      s->pipe->write(s->buffers.message(*shared), [](const Error&) {});
      echoNext(s);
    });
  });
}

void fill(std::vector<uint8_t>& v, int seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((seed + i) % 251);
}

struct Run : std::enable_shared_from_this<Run> {
  Pipe* pipe;
  Shape shape;
  int total;
  int warmup;
  bool verify;
  std::function<void(int)> progress;
  Buffers out;
  Buffers in;
  Message message;
  std::vector<double> samples;
  Clock::time_point start;
  int done{0};
  std::string error;
  std::promise<void> finished;

  void next() {
    start = Clock::now();
    // Callbacks hold the run: the last write's callback may come after the
    // last read's, when measure() has already returned.
    auto self = shared_from_this();
    pipe->write(message, [self](const Error& e) {
      if (e) self->fail("write: " + e.what());
    });
    pipe->readDescriptor([self](const Error& e, Descriptor d) {
      if (e) return self->fail("readDescriptor: " + e.what());
      self->onDescriptor(std::make_shared<Descriptor>(std::move(d)));
    });
  }

  void onDescriptor(std::shared_ptr<Descriptor> descriptor) {
    auto self = shared_from_this();
    pipe->read(in.allocate(*descriptor), [self, descriptor](const Error& e) {
      if (e) return self->fail("read: " + e.what());
      self->onData(*descriptor);
    });
  }

  void onData(const Descriptor& descriptor) {
    if (shape.cudaTensors) {
      // What a user of the tensor would do before using it (already
      // complete here: a CUDA channel's read ends once the bytes landed).
      if (auto e = cuda::synchronize(in.stream)) return fail("stream: " + e.what());
    }
    auto elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (verify && !check(descriptor)) return fail("echoed data differs from what was sent");
    if (done >= warmup) samples.push_back(elapsed);
    ++done;
    if (progress && done % 64 == 0) progress(done);
    if (done == total) return finished.set_value();
    next();
  }

  bool check(const Descriptor& d) {
    if (d.metadata != message.metadata) return false;
    for (size_t i = 0; i < out.payloads.size(); ++i) {
      if (std::memcmp(in.payloads[i].data(), out.payloads[i].data(), out.payloads[i].size()) != 0) return false;
    }
    for (size_t i = 0; i < out.tensors.size(); ++i) {
      if (shape.cudaTensors) {
        std::vector<uint8_t> got(out.tensors[i].size());
        if (cuda::copy(got.data(), in.device[i].first, got.size())) return false;
        if (got != out.tensors[i]) return false;
        continue;
      }
      if (std::memcmp(in.tensors[i].data(), out.tensors[i].data(), out.tensors[i].size()) != 0) return false;
    }
    return true;
  }

  void fail(std::string why) {
    if (!error.empty() || done == total) return;
    error = std::move(why);
    finished.set_value();
  }
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p * (sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

std::string Shape::describe() const {
  std::string s = std::to_string(metadataSize) + " B metadata";
  if (payloads) s += ", " + std::to_string(payloads) + " x " + std::to_string(payloadSize) + " B payloads";
  if (tensors) {
    s += ", " + std::to_string(tensors) + " x " + std::to_string(tensorSize) + (cudaTensors ? " B cuda tensors" : " B tensors");
  }
  return s;
}

int serveEcho(Listener& listener, int pipes) {
  std::vector<std::shared_ptr<EchoState>> states;
  for (int i = 0; i < pipes; ++i) {
    std::promise<std::shared_ptr<Pipe>> accepted;
    listener.accept([&](const Error& e, std::shared_ptr<Pipe> p) { accepted.set_value(e ? nullptr : p); });
    auto pipe = accepted.get_future().get();
    if (!pipe) return pipes - i;
    auto s = std::make_shared<EchoState>();
    s->pipe = pipe;
    echoNext(s);
    states.push_back(s);
  }
  int failures = 0;
  for (auto& s : states) {
    Error e = s->done.get_future().get();
    if (!e.isOfType<EOFError>()) {
      std::fprintf(stderr, "echo server: %s\n", e.what().c_str());
      ++failures;
    }
  }
  return failures;
}

Stats measure(Pipe& pipe, const Shape& shape, int warmup, int iterations, bool verify,
              std::function<void(int)> progress) {
  auto shared = std::make_shared<Run>();
  Run& run = *shared;
  run.pipe = &pipe;
  run.shape = shape;
  run.warmup = warmup;
  run.total = warmup + iterations;
  run.verify = verify;
  run.progress = std::move(progress);
  run.message.metadata = std::string(shape.metadataSize, 'm');
  run.out.payloads.resize(shape.payloads, std::vector<uint8_t>(shape.payloadSize));
  run.out.tensors.resize(shape.tensors, std::vector<uint8_t>(shape.tensorSize));
  int seed = 0;
  for (auto& p : run.out.payloads) {
    fill(p, seed++);
    run.message.payloads.push_back({p.data(), p.size(), std::string()});
  }
  for (size_t i = 0; i < run.out.tensors.size(); ++i) {
    auto& t = run.out.tensors[i];
    fill(t, seed++);
    if (shape.cudaTensors) {
      void* ptr = run.out.deviceTensor(i, t.size());
      if (auto e = cuda::copy(ptr, t.data(), t.size())) {
        Stats failed;
        failed.error = "CUDA: " + e.what();
        return failed;
      }
      run.message.tensors.push_back({CudaBuffer{ptr, run.out.stream, 0}, t.size(), nullopt, std::string()});
      continue;
    }
    run.message.tensors.push_back({CpuBuffer{t.data()}, t.size(), nullopt, std::string()});
  }
  // Touched now, not one page fault per 512 samples inside the timed loop.
  run.samples.assign(iterations, 0.0);
  run.samples.clear();
  auto finished = run.finished.get_future();
  run.next();
  finished.wait();
  Stats stats;
  stats.error = run.error;
  std::sort(run.samples.begin(), run.samples.end());
  stats.roundTripsUs = run.samples;
  stats.p50 = percentile(run.samples, 0.50);
  stats.p90 = percentile(run.samples, 0.90);
  stats.p99 = percentile(run.samples, 0.99);
  if (!run.samples.empty()) {
    double sum = 0;
    for (double us : run.samples) sum += us;
    stats.mean = sum / run.samples.size();
  }
  if (stats.p50 > 0) {
    stats.gigabytesPerSecond = shape.bytes() / (stats.p50 / 2) / 1e3;
  }
  return stats;
}

double cudaCopyMedianUs(size_t bytes, int iterations, std::string& error) {
  Error e;
  cudaStream_t stream = cuda::createStream(0, e);
  void* a = e ? nullptr : cuda::allocate(bytes, 0, e);
  void* b = e ? nullptr : cuda::allocate(bytes, 0, e);
  std::vector<double> samples;
  for (int i = 0; !e && i < iterations + 10; ++i) {
    auto start = Clock::now();
    e = cuda::copyAsync(b, a, bytes, stream);
    if (!e) e = cuda::synchronize(stream);
    if (i >= 10) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  (void)cuda::release(a);
  (void)cuda::release(b);
  (void)cuda::destroyStream(stream);
  if (e) {
    error = e.what();
    return 0;
  }
  std::sort(samples.begin(), samples.end());
  return percentile(samples, 0.5);
}

bool pinToCpu(int cpu) {
  if (cpu < 0) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

Server forkEchoServer(const std::string& url, int pipes, int cpu,
                      const std::function<std::shared_ptr<Context>()>& makeContext,
                      const std::string& alsoListen) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    pinToCpu(cpu);
    int rc;
    {
      auto context = makeContext();
      std::vector<std::string> urls{url};
      if (!alsoListen.empty()) urls.push_back(alsoListen);
      auto listener = context->listen(urls);
      std::string scheme = url.substr(0, url.find("://"));
      std::string line = listener->url(scheme);
      line += "\n";
      (void)!::write(fds[1], line.data(), line.size());
      ::close(fds[1]);
      rc = serveEcho(*listener, pipes);
    }
    std::fflush(stderr);
    ::_exit(rc == 0 ? 0 : 1);
  }
  ::close(fds[1]);
  Server server;
  server.pid = pid;
  char buf[512];
  std::string line;
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) {
    line.append(buf, static_cast<size_t>(n));
    if (line.find('\n') != std::string::npos) break;
  }
  ::close(fds[0]);
  auto nl = line.find('\n');
  server.url = nl == std::string::npos ? std::string() : line.substr(0, nl);
  return server;
}

int waitServer(const Server& server) {
  int status = 0;
  if (::waitpid(server.pid, &status, 0) != server.pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace actorpipe::bench
