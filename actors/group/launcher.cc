// actorpipe-run: starts N local ranks of a program, like mpirun or torchrun.
//
//   actorpipe-run -n 4 [options] [--] program args...
//
// Each rank gets ACTORPIPE_RANK, ACTORPIPE_WORLD_SIZE, ACTORPIPE_LOCAL_RANK,
// ACTORPIPE_LOCAL_SIZE, ACTORPIPE_JOB_ID and ACTORPIPE_RENDEZVOUS (a file in a
// fresh private directory, where rank 0 publishes its address), and
// ACTORPIPE_SECRET, a fresh random secret for this job (32 bytes from
// getrandom, as hex) that the group's pipes authenticate with, unless
// ACTORPIPE_SECRET or ACTORPIPE_SECRET_FILE is set already (then the ranks
// use that; an empty ACTORPIPE_SECRET runs the job without one). Every line a
// rank prints comes out prefixed with "[rank] ", on the stream it used.
// When a rank fails (non-zero exit or signal), the others get SIGTERM, then
// SIGKILL after a grace period, and actorpipe-run exits with the first
// failure's status (128 + signal for a signal).
//
// Options:
//   -n, --np N              number of ranks (required)
//   --keep-going            do not stop the others when a rank fails
//   --grace SECONDS         between SIGTERM and SIGKILL (default 3)
//   --timeout SECONDS       stop everything after this long, exit 124
//   --fake-slurm-nodes K    give ranks Slurm's variables instead of ours, as if
//                           spread block-wise over K nodes (for tests of
//                           Slurm support without Slurm)
//   --bind-to core|none     core (default, like mpirun for small jobs): rank r
//                           runs on the r-th CPU we may use (round robin), so
//                           a rank's threads wake each other on one CPU
//                           (cheap) instead of across CPUs (~40 us here)
//   --no-prefix             do not prefix output lines
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <actorpipe/runtime/detail/secure_random.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks{0};
  bool keepGoing{false};
  int graceSeconds{3};
  int timeoutSeconds{0};
  int fakeSlurmNodes{0};
  bool prefix{true};
  bool bindToCore{true};
  std::vector<std::string> command;
};

struct Stream {
  int fd{-1};
  int target{1};  // 1: stdout, 2: stderr
  std::string pending;
};

struct Rank {
  pid_t pid{-1};
  bool running{false};
  int status{0};
  Stream out, err;
};

volatile sig_atomic_t interrupted = 0;
void onSignal(int signal) { interrupted = signal; }

void usage(const char* why) {
  std::fprintf(stderr,
               "actorpipe-run: %s\n"
               "usage: actorpipe-run -n N [--keep-going] [--grace S] [--timeout S]\n"
               "                     [--fake-slurm-nodes K] [--bind-to core|none] [--no-prefix]\n"
               "                     [--] program args...\n",
               why);
  std::exit(2);
}

int number(const char* text, const char* option) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 0 || value > 100000) {
    usage((std::string(option) + " takes a number").c_str());
  }
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--") {
      ++i;
      break;
    } else if (arg == "-n" || arg == "--np") {
      o.ranks = number(value(), "-n");
    } else if (arg == "--keep-going") {
      o.keepGoing = true;
    } else if (arg == "--grace") {
      o.graceSeconds = number(value(), "--grace");
    } else if (arg == "--timeout") {
      o.timeoutSeconds = number(value(), "--timeout");
    } else if (arg == "--fake-slurm-nodes") {
      o.fakeSlurmNodes = number(value(), "--fake-slurm-nodes");
    } else if (arg == "--bind-to") {
      const std::string how = value();
      if (how != "core" && how != "none") usage("--bind-to takes core or none");
      o.bindToCore = how == "core";
    } else if (arg == "--no-prefix") {
      o.prefix = false;
    } else if (!arg.empty() && arg[0] == '-') {
      usage(("unknown option " + arg).c_str());
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.ranks <= 0) usage("-n N (at least 1) is required");
  if (o.command.empty()) usage("no program given");
  if (o.fakeSlurmNodes < 0 || o.fakeSlurmNodes > o.ranks) usage("--fake-slurm-nodes must be 1..N");
  return o;
}

void removeDirectory(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// The variables another launcher may have left us; a rank must see only ours.
const char* const kForeignVariables[] = {
    "ACTORPIPE_RANK", "ACTORPIPE_WORLD_SIZE", "ACTORPIPE_LOCAL_RANK", "ACTORPIPE_LOCAL_SIZE",
    "ACTORPIPE_RENDEZVOUS", "ACTORPIPE_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_JOBID",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURMD_NODENAME", "SLURM_STEP_NODELIST",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

void setRankEnvironment(const Options& o, int rank, const std::string& dir,
                        const std::string& jobId, const std::string& secret) {
  for (const char* name : kForeignVariables) ::unsetenv(name);
  auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
  if (!secret.empty()) set("ACTORPIPE_SECRET", secret);
  if (o.fakeSlurmNodes > 0) {
    // Block distribution, as Slurm's default: the first ceil(N/K) ranks on node 0, ...
    const int perNode = (o.ranks + o.fakeSlurmNodes - 1) / o.fakeSlurmNodes;
    const int node = rank / perNode;
    set("SLURM_PROCID", std::to_string(rank));
    set("SLURM_NTASKS", std::to_string(o.ranks));
    set("SLURM_JOB_NUM_NODES", std::to_string(o.fakeSlurmNodes));
    set("SLURM_NODEID", std::to_string(node));
    set("SLURM_LOCALID", std::to_string(rank % perNode));
    set("SLURM_JOBID", jobId);
    set("SLURM_STEP_ID", "0");
    set("SLURMD_NODENAME", "fake-node" + std::to_string(node));
    set("SLURM_STEP_NODELIST", "fake-node[0-" + std::to_string(o.fakeSlurmNodes - 1) + "]");
    // The fake nodes are this machine: keep every address on loopback.
    set("ACTORPIPE_ADDRESS", "127.0.0.1");
    set("ACTORPIPE_RENDEZVOUS_DIR", dir);
    return;
  }
  set("ACTORPIPE_RANK", std::to_string(rank));
  set("ACTORPIPE_WORLD_SIZE", std::to_string(o.ranks));
  set("ACTORPIPE_LOCAL_RANK", std::to_string(rank));
  set("ACTORPIPE_LOCAL_SIZE", std::to_string(o.ranks));
  set("ACTORPIPE_JOB_ID", jobId);
  set("ACTORPIPE_RENDEZVOUS", "file://" + dir + "/rank0");
}

void emit(const Options& o, int rank, int target, const std::string& line) {
  std::string text = o.prefix ? "[" + std::to_string(rank) + "] " + line : line;
  FILE* stream = target == 1 ? stdout : stderr;
  std::fwrite(text.data(), 1, text.size(), stream);
  std::fflush(stream);
}

// Reads what is there; returns false at EOF.
bool drain(const Options& o, int rank, Stream& s) {
  char buffer[65536];
  ssize_t n = ::read(s.fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!s.pending.empty()) emit(o, rank, s.target, s.pending + "\n");
    s.pending.clear();
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
  s.pending.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t newline; (newline = s.pending.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    emit(o, rank, s.target, s.pending.substr(start, newline + 1 - start));
  }
  s.pending.erase(0, start);
  return true;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended";
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);

  char dirTemplate[] = "/tmp/actorpipe-run-XXXXXX";
  if (::mkdtemp(dirTemplate) == nullptr) {
    std::fprintf(stderr, "actorpipe-run: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string dir = dirTemplate;
  const std::string jobId = std::to_string(::getpid()) + "-" + dir.substr(dir.size() - 6);
  // The job's secret: strangers on this host cannot join or read the group.
  const bool userSecret = std::getenv("ACTORPIPE_SECRET") || std::getenv("ACTORPIPE_SECRET_FILE");
  const std::string secret = userSecret ? "" : actorpipe::detail::secureRandomHex(32);

  struct sigaction action {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<int> cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    }
  }

  std::vector<Rank> ranks(o.ranks);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < o.ranks; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "actorpipe-run: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "actorpipe-run: fork: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: stopping a rank stops what it started
      ::signal(SIGPIPE, SIG_DFL);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      setRankEnvironment(o, r, dir, jobId, secret);
      if (o.bindToCore && !cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[r % cpus.size()], &one);
        ::sched_setaffinity(0, sizeof(one), &one);
      }
      std::vector<char*> args;
      for (auto& word : o.command) args.push_back(const_cast<char*>(word.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "actorpipe-run: cannot start %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);
    ranks[r].pid = pid;
    ranks[r].running = true;
    ranks[r].out = Stream{out[0], 1, {}};
    ranks[r].err = Stream{err[0], 2, {}};
  }

  const auto started = Clock::now();
  int firstFailure = -1;  // rank
  int exitCode = 0;
  bool stopping = false;
  Clock::time_point killAt{};
  auto stopOthers = [&](int signal) {
    for (auto& rank : ranks) {
      if (rank.running) ::kill(-rank.pid, signal);
    }
  };
  auto beginStopping = [&] {
    if (stopping) return;
    stopping = true;
    stopOthers(SIGTERM);
    killAt = Clock::now() + std::chrono::seconds(o.graceSeconds);
  };

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, Stream*>> owners;
    for (int r = 0; r < o.ranks; ++r) {
      for (Stream* s : {&ranks[r].out, &ranks[r].err}) {
        if (s->fd >= 0) {
          fds.push_back(pollfd{s->fd, POLLIN, 0});
          owners.emplace_back(r, s);
        }
      }
    }
    bool anyRunning = false;
    for (auto& rank : ranks) anyRunning = anyRunning || rank.running;
    if (!anyRunning && fds.empty()) break;

    ::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) drain(o, owners[i].first, *owners[i].second);
    }

    for (int r = 0; r < o.ranks; ++r) {
      Rank& rank = ranks[r];
      if (!rank.running) continue;
      int status = 0;
      if (::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      rank.status = status;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && firstFailure < 0 && !stopping) {
        firstFailure = r;
        exitCode = exitCodeOf(status);
        std::fprintf(stderr, "actorpipe-run: rank %d %s%s\n", r, describe(status).c_str(),
                     o.keepGoing ? "" : "; stopping the other ranks");
        std::fflush(stderr);
        if (!o.keepGoing) beginStopping();
      } else if (failed && o.keepGoing) {
        std::fprintf(stderr, "actorpipe-run: rank %d %s\n", r, describe(status).c_str());
      }
    }
    // A rank's children may keep its output open after it is gone: once
    // every rank is reaped, stop waiting for their streams.
    bool allReaped = true;
    for (auto& rank : ranks) allReaped = allReaped && !rank.running;
    if (allReaped) {
      for (auto& rank : ranks) {
        for (Stream* s : {&rank.out, &rank.err}) {
          while (s->fd >= 0) {
            pollfd p{s->fd, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) {
              ::close(s->fd);
              s->fd = -1;
              break;
            }
            drain(o, static_cast<int>(&rank - ranks.data()), *s);
          }
        }
      }
    }

    if (interrupted && !stopping) {
      std::fprintf(stderr, "actorpipe-run: interrupted; stopping every rank\n");
      exitCode = 128 + interrupted;
      beginStopping();
    }
    if (o.timeoutSeconds > 0 && !stopping &&
        Clock::now() - started > std::chrono::seconds(o.timeoutSeconds)) {
      std::fprintf(stderr, "actorpipe-run: timed out after %d s; stopping every rank\n",
                   o.timeoutSeconds);
      exitCode = 124;
      beginStopping();
    }
    if (stopping && Clock::now() >= killAt) {
      stopOthers(SIGKILL);
      killAt = Clock::now() + std::chrono::hours(1);
    }
  }
  removeDirectory(dir);
  return exitCode;
}
