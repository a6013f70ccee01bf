#include "harness.h"

#include <actorpipe/runtime/detail/log.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <execinfo.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

namespace testing {

using namespace actorpipe;

std::shared_ptr<Context> makeContext(const std::string& name, ContextOptions options, bool withMpt) {
  auto context = std::make_shared<Context>(options.name(name));
  // basic (and mpt) only: the tests that use this choose their channel.
  DefaultBackends backends;
  backends.cma = false;
  backends.xth = false;
  backends.mptLanes = withMpt ? 3 : 0;
  registerDefaultBackends(*context, backends);
  return context;
}

namespace {

// The first `limit` bytes of a /proc file, trailing newline dropped.
std::string readSmallFile(const std::string& path, size_t limit = 256) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[512];
    size_t n;
    while (out.size() < limit && (n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  if (out.size() > limit) out.resize(limit);
  if (!out.empty() && out.back() == '\n' && limit <= 256) out.pop_back();
  return out;
}

// In a child, a crash prints where it happened (doctest's own handler would
// report it as if the parent's test case had crashed).
void crashHandler(int signal) {
  void* frames[64];
  int n = ::backtrace(frames, 64);
  std::fprintf(stderr, "child %d: fatal signal %d\n", ::getpid(), signal);
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

std::set<std::string> threadIds() {
  std::set<std::string> ids;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ids.insert(e->d_name);
    }
    ::closedir(d);
  }
  return ids;
}

// The threads every test process has before its tests: the main one, and
// under ThreadSanitizer the runtime's own, which it starts with a program's
// first thread and keeps (started here, so it is no thread to wait for:
// forks waited 2 s each for it).
const std::set<std::string> gBaseline = [] {
#if defined(__SANITIZE_THREAD__)
  std::thread([] {}).join();
#endif
  return threadIds();
}();

// The names of this process's threads but the caller's and the baseline's
// ("" when none).
std::string otherThreads() {
  std::string names;
  const std::string self = std::to_string(::syscall(SYS_gettid));
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.' || self == e->d_name || gBaseline.count(e->d_name)) continue;
      std::string comm = readSmallFile(std::string("/proc/self/task/") + e->d_name + "/comm");
      names += (names.empty() ? "" : ", ") + std::string(e->d_name) + " " + comm;
    }
    ::closedir(d);
  }
  return names;
}

// A fork copies every lock that another thread holds at that instant into a
// child with no thread to release it (and GCC 12's TSan runtime does not
// lock its own allocator around fork). So a child is forked only once this
// process runs no other thread: the previous test's loop threads end as its
// contexts are joined, and the cma/xth copy helper retires after 200 ms
// idle. A test that keeps a context alive across a spawn forks anyway,
// after the wait, and says so.
void waitUntilSingleThreaded() {
  // Long enough for a loaded, instrumented machine to end the previous
  // test's threads (CI once forked beside an actor system's four threads
  // still ending after 2 s, and TSan's child died of it).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string others;
  while (!(others = otherThreads()).empty()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "harness: forking a child while this process still runs threads: %s\n",
                   others.c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// What a child that stopped answering is doing, from the kernel's view of
// each of its threads (and gdb's, where gdb is installed): a hang in a
// test's child is then diagnosed from the CI log alone.
void describeStuckChild(pid_t pid) {
  std::fprintf(stderr, "harness: child %d sent nothing in time; its threads:\n", pid);
  const std::string base = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = ::opendir(base.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string task = base + "/" + e->d_name;
      std::fprintf(stderr, "  thread %s %s: wchan %s, syscall %s\n%s", e->d_name,
                   readSmallFile(task + "/comm").c_str(), readSmallFile(task + "/wchan").c_str(),
                   readSmallFile(task + "/syscall").c_str(), readSmallFile(task + "/stack", 4096).c_str());
    }
    ::closedir(d);
  }
  if (::access("/usr/bin/gdb", X_OK) == 0) {
    const std::string command =
        "/usr/bin/gdb -p " + std::to_string(pid) + " -batch -ex 'thread apply all bt' 2>&1 | tail -n 200 >&2";
    std::fflush(stderr);
    (void)!std::system(command.c_str());
  }
  std::fflush(stderr);
}

}  // namespace

std::shared_ptr<Context> makeFullContext(const std::string& name) {
  auto context = std::make_shared<Context>(ContextOptions().name(name));
  DefaultBackends backends;
  backends.cma = true;  // every backend, the one left out by default too
  registerDefaultBackends(*context, backends);
  return context;
}

Child Child::spawn(Body body, std::chrono::seconds lifetime) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  std::fflush(stdout);
  std::fflush(stderr);
  waitUntilSingleThreaded();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(static_cast<unsigned>(lifetime.count()));
    for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) ::signal(sig, crashHandler);
    Child self;
    self.fd_ = fds[1];
    int rc = 0;
    try {
      rc = body(self);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child threw: %s\n", e.what());
      rc = 4;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  ::close(fds[1]);
  Child parent;
  parent.pid_ = pid;
  parent.fd_ = fds[0];
  return parent;
}

Child::Child(Child&& other) noexcept
    : pid_(other.pid_), fd_(other.fd_), reaped_(other.reaped_), status_(other.status_),
      buffer_(std::move(other.buffer_)) {
  other.pid_ = -1;
  other.fd_ = -1;
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) ::close(fd_);
}

void Child::send(const std::string& line) {
  std::string s = line + "\n";
  (void)!::write(fd_, s.data(), s.size());
}

std::string Child::receive(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      siginfo_t info{};
      // WNOWAIT: look without reaping, so that wait() still gets the status.
      if (!reaped_ && ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == 0) {
        describeStuckChild(pid_);
      }
      return "";
    }
    char buf[256];
    ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n <= 0) return "";
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

int Child::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return status_;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Child::kill(int signal) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, signal);
}

std::vector<uint8_t> pattern(size_t length, int seed) {
  std::vector<uint8_t> v(length);
  for (size_t i = 0; i < length; ++i) v[i] = static_cast<uint8_t>((seed + i) % 251);
  return v;
}

Storage makeStorage(std::vector<size_t> payloads, std::vector<size_t> tensors, int seed) {
  Storage s;
  int r = 0;
  for (size_t n : payloads) s.payloads.push_back(pattern(n, seed + 31 * r++));
  for (size_t n : tensors) s.tensors.push_back(pattern(n, seed + 31 * r++));
  return s;
}

Allocation allocate(const Descriptor& d, Storage& storage) {
  Allocation a;
  storage.payloads.resize(d.payloads.size());
  storage.tensors.resize(d.tensors.size());
  for (size_t i = 0; i < d.payloads.size(); ++i) {
    storage.payloads[i].resize(d.payloads[i].length);
    a.payloads.push_back({storage.payloads[i].data()});
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    storage.tensors[i].resize(d.tensors[i].length);
    a.tensors.push_back({CpuBuffer{storage.tensors[i].data()}});
  }
  return a;
}

Message messageOver(Storage& storage, const std::string& metadata) {
  Message m;
  m.metadata = metadata;
  for (size_t i = 0; i < storage.payloads.size(); ++i) {
    m.payloads.push_back({storage.payloads[i].data(), storage.payloads[i].size(), "p" + std::to_string(i)});
  }
  for (size_t i = 0; i < storage.tensors.size(); ++i) {
    Message::Tensor t;
    t.buffer = CpuBuffer{storage.tensors[i].data()};
    t.length = storage.tensors[i].size();
    t.metadata = "t" + std::to_string(i);
    m.tensors.push_back(std::move(t));
  }
  return m;
}

Error writeSync(Pipe& pipe, Message message, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<Error>>();
  auto future = promise->get_future();
  pipe.write(std::move(message), [promise](const Error& e) { promise->set_value(e); });
  if (!ready(future, timeout)) {
    return ACTORPIPE_ERROR(LogicError, "test timeout: write did not complete");
  }
  return future.get();
}

Received readSync(Pipe& pipe, std::chrono::milliseconds timeout) {
  auto result = std::make_shared<Received>();
  auto promise = std::make_shared<std::promise<void>>();
  auto future = promise->get_future();
  Pipe* p = &pipe;
  pipe.readDescriptor([result, promise, p](const Error& e, Descriptor d) {
    if (e) {
      result->error = e;
      promise->set_value();
      return;
    }
    result->descriptor = std::move(d);
    Allocation a = allocate(result->descriptor, result->storage);
    p->read(std::move(a), [result, promise](const Error& e) {
      result->error = e;
      promise->set_value();
    });
  });
  if (!ready(future, timeout)) {
    Received r;
    r.error = ACTORPIPE_ERROR(LogicError, "test timeout: read did not complete");
    return r;
  }
  return std::move(*result);
}

std::shared_ptr<Pipe> acceptSync(Listener& listener, Error* error, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::pair<Error, std::shared_ptr<Pipe>>>>();
  auto future = promise->get_future();
  listener.accept([promise](const Error& e, std::shared_ptr<Pipe> p) { promise->set_value({e, p}); });
  if (!ready(future, timeout)) {
    if (error) *error = ACTORPIPE_ERROR(LogicError, "test timeout: accept did not complete");
    return nullptr;
  }
  auto r = future.get();
  if (error) *error = r.first;
  return r.second;
}

int echoServer(Child& self, int pipes, bool withMpt, const std::string& listenUrl) {
  auto context = makeContext("echo-server", ContextOptions(), withMpt);
  auto listener = context->listen({listenUrl});
  self.send(listener->url(listenUrl.substr(0, listenUrl.find(':'))));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < pipes; ++i) {
    Error error;
    auto pipe = acceptSync(*listener, &error, std::chrono::seconds(30));
    if (!pipe) {
      std::fprintf(stderr, "echo server: accept failed: %s\n", error.what().c_str());
      return 5;
    }
    threads.emplace_back([pipe, &failures] {
      for (;;) {
        Received r = readSync(*pipe, std::chrono::seconds(30));
        if (r.error) {
          if (!r.error.isOfType<EOFError>()) {
            std::fprintf(stderr, "echo server: read failed: %s\n", r.error.what().c_str());
            failures++;
          }
          return;
        }
        Message m = messageOver(r.storage, r.descriptor.metadata);
        for (size_t t = 0; t < m.tensors.size(); ++t) {
          m.tensors[t].targetDevice = r.descriptor.tensors[t].targetDevice;
          m.tensors[t].metadata = r.descriptor.tensors[t].metadata;
        }
        for (size_t p = 0; p < m.payloads.size(); ++p) m.payloads[p].metadata = r.descriptor.payloads[p].metadata;
        Error e = writeSync(*pipe, std::move(m));
        if (e) {
          std::fprintf(stderr, "echo server: write failed: %s\n", e.what().c_str());
          failures++;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures.load() == 0 ? 0 : 6;
}

LogLines::LogLines() {
  actorpipe::detail::setLogLevelForTesting(actorpipe::detail::LogLevel::kWarn);
  actorpipe::detail::setLogSinkForTesting([this](const std::string& line) {
    std::lock_guard<std::mutex> guard(mutex_);
    lines_.push_back(line);
  });
}

LogLines::~LogLines() { actorpipe::detail::setLogSinkForTesting(nullptr); }

int LogLines::count(const std::string& text) {
  std::lock_guard<std::mutex> guard(mutex_);
  return static_cast<int>(std::count_if(lines_.begin(), lines_.end(), [&](const std::string& line) {
    return line.find(text) != std::string::npos;
  }));
}

void LogLines::clear() {
  std::lock_guard<std::mutex> guard(mutex_);
  lines_.clear();
}

} // namespace testing
