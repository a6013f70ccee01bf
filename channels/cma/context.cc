#include <actorpipe/channels/cma/factory.h>

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include <actorpipe/channels/detail/host_identity.h>
#include <actorpipe/channels/detail/pull_endpoint.h>
#include <actorpipe/runtime/device.h>

namespace actorpipe::channel::cma {
namespace {

// What the acceptor reads out of the connector during the handshake.
const char kProbe[] = "actorpipe cma probe";

using detail::readFirstWord;

// Empty when cma can work from this process; otherwise why not.
std::string whyNot() {
  std::string scope = readFirstWord("/proc/sys/kernel/yama/ptrace_scope");
  if (!scope.empty() && scope != "0") {
    return "Yama ptrace_scope is " + scope + " (cma needs 0)";
  }
  if (::prctl(PR_GET_DUMPABLE) != 1) {
    return "this process is not dumpable";
  }
  char copy[sizeof(kProbe)] = {0};
  iovec local{copy, sizeof(copy)};
  iovec remote{const_cast<char*>(kProbe), sizeof(kProbe)};
  if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof(kProbe))) {
    return std::string("process_vm_readv fails here: ") + std::strerror(errno);
  }
  return std::string();
}

class CmaContext final : public Context {
 public:
  CmaContext()
      : domain_(detail::sameHostDomain("cma")),
        whyNot_(whyNot()) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%d:%" PRIxPTR ":%zu", static_cast<int>(::getpid()),
                  reinterpret_cast<uintptr_t>(kProbe), sizeof(kProbe));
    detail_ = buf;
  }

  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  bool isViable() const override { return whyNot_.empty(); }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  void close() override {}
  void join() override {}
  bool sendsInline() const override { return false; }
  std::string helloDetail() const override { return detail_; }

  // The real test: can we read the peer's probe? Only ever in the process
  // the kernel names (`current`); the pid in the peer's detail must match it.
  // Without the kernel's word now (the hello came over tcp and the pipe moves
  // to shm), the first read checks the identity instead (pull_endpoint.h).
  bool reachable(const std::string& peer, const actorpipe::detail::PeerProcess* current,
                 std::string& why) const override {
    long long pid = 0;
    uintptr_t address = 0;
    size_t length = 0;
    int consumed = 0;
    if (std::sscanf(peer.c_str(), "%lld:%" SCNxPTR ":%zu%n", &pid, &address, &length, &consumed) != 3 ||
        static_cast<size_t>(consumed) != peer.size() || length != sizeof(kProbe)) {
      why = "the peer sent no usable probe";
      return false;
    }
    if (current == nullptr) return true;
    if (current->uid != ::geteuid()) {
      why = "the peer process runs as uid " + std::to_string(current->uid) + ", this one as " +
            std::to_string(::geteuid());
      return false;
    }
    if (pid != current->pid) {
      why = "the peer says it is pid " + std::to_string(pid) + ", the kernel says pid " +
            std::to_string(current->pid);
      return false;
    }
    char copy[sizeof(kProbe)] = {0};
    iovec local{copy, sizeof(copy)};
    iovec remote{reinterpret_cast<void*>(address), sizeof(kProbe)};
    if (::process_vm_readv(current->pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof(kProbe))) {
      why = std::string("cannot read the peer's memory: ") + std::strerror(errno);
      return false;
    }
    if (std::memcmp(copy, kProbe, sizeof(kProbe)) != 0) {
      why = "the peer's probe reads wrong";
      return false;
    }
    return true;
  }
  bool needsPeerProcess() const override { return true; }

  std::shared_ptr<Endpoint> acceptEndpoint(std::string&, Error&) override { return make(); }
  std::shared_ptr<Endpoint> connectEndpoint(const std::string&, Error&) override { return make(); }

 private:
  std::shared_ptr<Endpoint> make() {
    // Two system calls and a page walk cost more than copying small tensors
    // through the transport (measured: docs/benchmarks.md).
    return std::make_shared<detail::PullEndpoint>(detail::PullFormat::kCrossProcess, "cma", 64 * 1024);
  }
  std::vector<std::string> deviceTypes_{kCpuDeviceType};
  std::string domain_;
  std::string whyNot_;
  std::string detail_;
  std::string id_{"cma"};
};

}  // namespace

std::shared_ptr<Context> create() { return std::make_shared<CmaContext>(); }

} // namespace actorpipe::channel::cma
