#pragma once
// Shared helpers for the pipe tests: contexts with uv + basic, child
// processes (real ones, over loopback), and blocking wrappers around the
// callback API with timeouts, so a broken pipe fails a test instead of
// hanging it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <actorpipe/actors/backends.h>
#include <actorpipe/channels/basic/factory.h>
#include <actorpipe/channels/cma/factory.h>
#include <actorpipe/channels/xth/factory.h>
#include <actorpipe/channels/mpt/factory.h>
#include <actorpipe/runtime/context.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>
#include <actorpipe/transports/shm/factory.h>
#include <actorpipe/transports/uv/factory.h>

namespace actorpipe {
// doctest prints the operands of a failed CHECK.
inline std::ostream& operator<<(std::ostream& os, const std::shared_ptr<Pipe>& pipe) {
  return os << (pipe ? "a pipe" : "no pipe");
}
}  // namespace actorpipe

namespace testing {

using namespace std::chrono_literals;

// uv registered as "tcp", shm as "shm", basic as "basic"; with withMpt,
// also a 3-lane mpt channel at a higher priority (so it carries CPU tensors
// when both have it).
std::shared_ptr<actorpipe::Context> makeContext(const std::string& name = "test",
                                                actorpipe::ContextOptions options = {},
                                                bool withMpt = false);

// A forked child process running `body`; its return value is the exit code.
// The child may send lines to the parent (a URL, say). The child is killed
// by SIGALRM if it outlives `lifetime`, so no test leaves a process behind.
class Child {
 public:
  using Body = std::function<int(Child& self)>;
  static Child spawn(Body body, std::chrono::seconds lifetime = std::chrono::seconds(60));
  Child(Child&& other) noexcept;
  ~Child();

  // In the child: send a line to the parent.
  void send(const std::string& line);
  // In the parent: the next line from the child ("" on EOF or timeout).
  std::string receive(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // In the parent: exit status (or 128 + signal); -1 on timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  void kill(int signal);
  pid_t pid() const { return pid_; }

 private:
  Child() = default;
  pid_t pid_{-1};
  int fd_{-1};
  bool reaped_{false};
  int status_{0};
  std::string buffer_;
};

// A checked condition inside a child process: report and exit non-zero.
#define CHILD_CHECK(cond)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "child check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fflush(stderr);                                                            \
      ::_exit(3);                                                                     \
    }                                                                                 \
  } while (0)

// Owned memory for a received or sent message.
struct Storage {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::vector<uint8_t>> tensors;
};

// Payloads and tensors of the given sizes, filled with pattern().
Storage makeStorage(std::vector<size_t> payloads, std::vector<size_t> tensors, int seed);

// Allocates per descriptor; the Allocation points into `storage`.
actorpipe::Allocation allocate(const actorpipe::Descriptor& d, Storage& storage);
// A message over `storage`, with the given metadata.
actorpipe::Message messageOver(Storage& storage, const std::string& metadata);
// Deterministic contents: byte i of region r is (seed + 31 r + i) mod 251.
std::vector<uint8_t> pattern(size_t length, int seed);

actorpipe::Error writeSync(actorpipe::Pipe& pipe, actorpipe::Message message,
                           std::chrono::milliseconds timeout = std::chrono::seconds(20));
struct Received {
  actorpipe::Error error;
  actorpipe::Descriptor descriptor;
  Storage storage;
};
Received readSync(actorpipe::Pipe& pipe, std::chrono::milliseconds timeout = std::chrono::seconds(20));
std::shared_ptr<actorpipe::Pipe> acceptSync(actorpipe::Listener& listener,
                                            actorpipe::Error* error = nullptr,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Child body: listen on tcp://127.0.0.1:0, send the URL, then echo every
// message of `pipes` accepted pipes back until each peer hangs up.
int echoServer(Child& self, int pipes = 1, bool withMpt = false,
               const std::string& listenUrl = "tcp://127.0.0.1:0");

// Every backend that works without hardware: uv ("tcp", 0), shm (10),
// basic (0), cma (10), xth (20).
std::shared_ptr<actorpipe::Context> makeFullContext(const std::string& name);

// A timeout sentinel for futures.
template <typename T>
bool ready(std::future<T>& f, std::chrono::milliseconds timeout) {
  return f.wait_for(timeout) == std::future_status::ready;
}

// The library's warnings while it lives (whatever ACTORPIPE_LOG says),
// captured instead of printed: count() says how many contain a text. For
// tests of what the library reports and carries on from. One at a time.
class LogLines {
 public:
  LogLines();
  ~LogLines();
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;
  int count(const std::string& text);
  void clear();

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

} // namespace testing
