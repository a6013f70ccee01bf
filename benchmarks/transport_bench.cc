// actorpipe-transport-bench: the transport alone, without pipes or actors:
// 8-byte ping-pong over one connection between two processes, chained in
// callbacks on the transport's loop (like TensorPipe's benchmark_transport).
//   actorpipe-transport-bench [shm|tcp] [round trips]
// Anything else is refused with a usage line (exit status 2).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

#include "pingpong.h"

using namespace actorpipe;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<transport::Context> make(const std::string& kind) {
  return kind == "shm" ? transport::shm::create() : transport::uv::create();
}

// Echoes 8-byte messages until the peer hangs up.
void echo(std::shared_ptr<transport::Connection> c, std::shared_ptr<std::promise<void>> done,
          std::shared_ptr<uint64_t> word) {
  c->read(word.get(), 8, [c, done, word](const Error& e) {
    if (e) return done->set_value();
    c->write(word.get(), 8, [](const Error&) {});
    echo(c, done, word);
  });
}

struct Run {
  std::shared_ptr<transport::Connection> c;
  uint64_t out{42}, in{0};
  int left;
  Clock::time_point start;
  std::vector<double> samples;
  std::promise<void> finished;

  void next() {
    start = Clock::now();
    c->write(&out, 8, [](const Error&) {});
    c->read(&in, 8, [this](const Error& e) {
      if (e) return finished.set_value();
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      if (--left == 0) return finished.set_value();
      next();
    });
  }
};

int usage() {
  std::fprintf(stderr, "usage: actorpipe-transport-bench [shm|tcp] [round trips, 100 to 100000000]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3) return usage();
  std::string kind = argc > 1 ? argv[1] : "shm";
  if (kind == "uv") kind = "tcp";  // the transport's name, as in TensorPipe
  if (kind != "shm" && kind != "tcp") return usage();
  long rounds = 20000;
  if (argc > 2) {
    char* end = nullptr;
    errno = 0;
    rounds = std::strtol(argv[2], &end, 10);
    if (errno != 0 || end == argv[2] || *end != '\0' || rounds < 100 || rounds > 100000000) return usage();
  }
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  pid_t pid = ::fork();
  if (pid == 0) {
    bench::pinToCpu(0);
    auto context = make(kind);
    auto listener = context->listen(kind == "shm" ? "" : "127.0.0.1:0");
    std::string addr = listener->addr() + "\n";
    (void)!::write(fds[1], addr.data(), addr.size());
    std::promise<std::shared_ptr<transport::Connection>> accepted;
    listener->accept([&](const Error& e, std::shared_ptr<transport::Connection> c) { accepted.set_value(c); });
    auto c = accepted.get_future().get();
    auto done = std::make_shared<std::promise<void>>();
    if (c) echo(c, done, std::make_shared<uint64_t>(0));
    done->get_future().wait();
    context->join();
    ::_exit(0);
  }
  bench::pinToCpu(1);
  std::string addr;
  char ch;
  while (::read(fds[0], &ch, 1) == 1 && ch != '\n') addr += ch;
  auto context = make(kind);
  Run run;
  run.c = context->connect(addr);
  run.left = static_cast<int>(rounds);
  // Touched now, not one page fault per 512 samples inside the timed loop.
  run.samples.assign(static_cast<size_t>(rounds), 0.0);
  run.samples.clear();
  auto finished = run.finished.get_future();
  run.next();
  finished.wait();
  run.c->close();
  context->join();
  ::waitpid(pid, nullptr, 0);
  auto& s = run.samples;
  if (s.size() < 100) {
    std::fprintf(stderr, "transport bench failed after %zu round trips\n", s.size());
    return 1;
  }
  s.erase(s.begin(), s.begin() + s.size() / 10);  // warm-up
  std::sort(s.begin(), s.end());
  std::printf("%s transport, 8-byte round trip: p50 %.2f us  p90 %.2f us  p99 %.2f us (%zu round trips)\n",
              kind.c_str(), s[s.size() / 2], s[s.size() * 9 / 10], s[s.size() * 99 / 100], s.size());
  return 0;
}
