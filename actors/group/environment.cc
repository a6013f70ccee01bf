#include <actorpipe/actors/group/environment.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <actorpipe/actors/group/errors.h>
#include <actorpipe/actors/group/frames.h>

namespace actorpipe::group {

namespace {

class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& overrides) : overrides_(overrides) {}
  bool has(const char* name) const { return overrides_.count(name) || std::getenv(name); }
  std::string get(const char* name, const std::string& fallback = "") const {
    auto it = overrides_.find(name);
    if (it != overrides_.end()) return it->second;
    const char* value = std::getenv(name);
    return value ? value : fallback;
  }
  // Missing or unparsable -> fallback; *bad is set when present but not a number.
  int number(const char* name, int fallback, std::string* bad) const {
    if (!has(name)) return fallback;
    const std::string text = get(name);
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < 0 || value > (1 << 24)) {
      if (bad && bad->empty()) *bad = std::string(name) + "=\"" + text + "\" is not a rank number";
      return fallback;
    }
    return static_cast<int>(value);
  }

 private:
  const std::map<std::string, std::string>& overrides_;
};

std::string hostName() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
}

std::string rendezvousDir(const Env& env) {
  std::string dir = env.get("ACTORPIPE_RENDEZVOUS_DIR");
  if (dir.empty()) dir = env.get("HOME", "/tmp") + "/.actorpipe";
  return dir;
}

// Secrets longer than this are surely the wrong file.
constexpr size_t kMaxSecretBytes = 4096;

Error readSecretFile(const std::string& path, std::string& secret) {
  const std::string what = "ACTORPIPE_SECRET_FILE \"" + path + "\"";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ACTORPIPE_ERROR(SystemError, "open " + what, errno);
  // Checked on the open file: what we read is what we checked.
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ACTORPIPE_ERROR(SystemError, "stat " + what, error);
  }
  std::string problem;
  if (!S_ISREG(st.st_mode)) {
    problem = " is not a regular file";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    problem = std::string(" has mode ") + mode +
              ": group or others may read or write it (chmod 600 it)";
  } else if (static_cast<size_t>(st.st_size) > kMaxSecretBytes) {
    problem = " is larger than " + std::to_string(kMaxSecretBytes) + " bytes";
  }
  std::string text;
  if (problem.empty()) {
    char buffer[kMaxSecretBytes + 1];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int error = errno;
        ::close(fd);
        return ACTORPIPE_ERROR(SystemError, "read " + what, error);
      }
      if (n == 0) break;
      text.append(buffer, static_cast<size_t>(n));
      if (text.size() > kMaxSecretBytes) {
        problem = " is larger than " + std::to_string(kMaxSecretBytes) + " bytes";
        break;
      }
    }
  }
  ::close(fd);
  if (problem.empty()) {
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.empty()) problem = " holds no secret";
  }
  if (!problem.empty()) return ACTORPIPE_ERROR(RendezvousError, "the secret file " + what + problem);
  secret = std::move(text);
  return Error::kSuccess;
}

} // namespace

Error secretFromEnvironment(std::string& secret, const std::map<std::string, std::string>& overrides) {
  Env env(overrides);
  if (env.has("ACTORPIPE_SECRET_FILE")) return readSecretFile(env.get("ACTORPIPE_SECRET_FILE"), secret);
  secret = env.get("ACTORPIPE_SECRET");
  return Error::kSuccess;
}

std::string resolveIPv4(const std::string& host) {
  in_addr numeric{};
  if (::inet_pton(AF_INET, host.c_str(), &numeric) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  char text[INET_ADDRSTRLEN] = {};
  auto* address = reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text));
  ::freeaddrinfo(found);
  return text;
}

Error rankInfoFromEnvironment(RankInfo& info, const std::map<std::string, std::string>& overrides) {
  Env env(overrides);
  std::string bad;
  RankInfo r;
  if (env.has("ACTORPIPE_RANK")) {
    r.source = "actorpipe";
    r.rank = env.number("ACTORPIPE_RANK", -1, &bad);
    r.worldSize = env.number("ACTORPIPE_WORLD_SIZE", 0, &bad);
    r.localRank = env.number("ACTORPIPE_LOCAL_RANK", r.rank, &bad);
    r.localSize = env.number("ACTORPIPE_LOCAL_SIZE", r.worldSize, &bad);
    r.jobId = env.get("ACTORPIPE_JOB_ID");
  } else if (env.has("SLURM_PROCID")) {
    r.source = "slurm";
    r.rank = env.number("SLURM_PROCID", -1, &bad);
    r.worldSize = env.number("SLURM_NTASKS", 0, &bad);
    r.nodes = env.number("SLURM_JOB_NUM_NODES", env.number("SLURM_NNODES", 1, &bad), &bad);
    r.node = env.number("SLURM_NODEID", 0, &bad);
    r.localRank = env.number("SLURM_LOCALID", 0, &bad);
    const int perNode = r.nodes > 0 ? (r.worldSize + r.nodes - 1) / r.nodes : r.worldSize;
    r.localSize = perNode;
    r.jobId = env.get("SLURM_JOBID", env.get("SLURM_JOB_ID"));
    if (env.has("SLURM_STEP_ID")) r.jobId += "." + env.get("SLURM_STEP_ID");
    r.host = env.get("SLURMD_NODENAME");
  } else if (env.has("OMPI_COMM_WORLD_RANK")) {
    r.source = "openmpi";
    r.rank = env.number("OMPI_COMM_WORLD_RANK", -1, &bad);
    r.worldSize = env.number("OMPI_COMM_WORLD_SIZE", 0, &bad);
    r.localRank = env.number("OMPI_COMM_WORLD_LOCAL_RANK", 0, &bad);
    r.localSize = env.number("OMPI_COMM_WORLD_LOCAL_SIZE", r.worldSize, &bad);
    r.jobId = env.get("PMIX_NAMESPACE", env.get("OMPI_MCA_ess_base_jobid"));
  } else if (env.has("RANK") && env.has("WORLD_SIZE")) {
    r.source = "torchrun";
    r.rank = env.number("RANK", -1, &bad);
    r.worldSize = env.number("WORLD_SIZE", 0, &bad);
    r.localRank = env.number("LOCAL_RANK", 0, &bad);
    r.localSize = env.number("LOCAL_WORLD_SIZE", r.worldSize, &bad);
    r.jobId = env.get("TORCHELASTIC_RUN_ID");
  } else {
    return ACTORPIPE_ERROR(RendezvousError,
                           "no rank in the environment (start the program with actorpipe-run, "
                           "srun, mpirun or torchrun, or set ACTORPIPE_RANK and ACTORPIPE_WORLD_SIZE)");
  }
  if (!bad.empty()) return ACTORPIPE_ERROR(RendezvousError, bad);
  if (r.worldSize <= 0 || r.rank < 0 || r.rank >= r.worldSize) {
    return ACTORPIPE_ERROR(RendezvousError, "rank " + std::to_string(r.rank) +
                                                " does not fit a world of size " +
                                                std::to_string(r.worldSize) + " (" + r.source + ")");
  }

  if (env.has("ACTORPIPE_HOST")) r.host = env.get("ACTORPIPE_HOST");
  if (r.host.empty()) r.host = hostName();
  // It travels in the rank's hello, where rank 0 takes only a printable
  // name without spaces (frames.h): say so here, not by a hello dropped.
  bool printable = !r.host.empty() && r.host.size() <= kMaxHostBytes;
  for (unsigned char c : r.host) printable = printable && c > ' ' && c < 0x7f;
  if (!printable) {
    return ACTORPIPE_ERROR(RendezvousError, "host name \"" + r.host +
                                                "\" (ACTORPIPE_HOST or the machine's) is not 1 to " +
                                                std::to_string(kMaxHostBytes) +
                                                " printable characters without spaces");
  }

  if (env.has("ACTORPIPE_ADDRESS")) {
    r.address = env.get("ACTORPIPE_ADDRESS");
  } else if (r.nodes <= 1) {
    r.address = "127.0.0.1";
  } else {
    r.address = resolveIPv4(hostName());
    if (r.address.empty()) r.address = "127.0.0.1";
  }

  if (env.has("ACTORPIPE_RENDEZVOUS")) {
    r.rendezvous = env.get("ACTORPIPE_RENDEZVOUS");
  } else if (env.has("MASTER_ADDR") && env.has("MASTER_PORT")) {
    const std::string ip = resolveIPv4(env.get("MASTER_ADDR"));
    if (ip.empty()) {
      return ACTORPIPE_ERROR(RendezvousError,
                             "MASTER_ADDR \"" + env.get("MASTER_ADDR") + "\" does not resolve");
    }
    r.rendezvous = "tcp://" + ip + ":" + env.get("MASTER_PORT");
  } else if (!r.jobId.empty()) {
    r.rendezvous = "file://" + rendezvousDir(env) + "/" + r.source + "-" + r.jobId;
  } else {
    return ACTORPIPE_ERROR(RendezvousError,
                           "no rendezvous: set ACTORPIPE_RENDEZVOUS (tcp://host:port or "
                           "file:///shared/path) or MASTER_ADDR and MASTER_PORT");
  }
  if (r.rendezvous.rfind("tcp://", 0) != 0 && r.rendezvous.rfind("file://", 0) != 0) {
    return ACTORPIPE_ERROR(RendezvousError, "rendezvous \"" + r.rendezvous +
                                                "\" is neither tcp://host:port nor file:///path");
  }
  info = r;
  return Error::kSuccess;
}

} // namespace actorpipe::group
