#include <actorpipe/channels/detail/ack_page.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438  // Linux 5.6; glibc's headers before 2.32 lack the name
#endif

namespace actorpipe::channel::detail {
namespace {

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

}  // namespace

Error makeAckPage(int& fd, void*& page, const char* purpose) {
  const std::string name = std::string("actorpipe-") + purpose;
  int file = static_cast<int>(::syscall(SYS_memfd_create, name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (file < 0) return ACTORPIPE_ERROR(SystemError, std::string("memfd_create (") + purpose + " page)", errno);
  void* mapped = MAP_FAILED;
  if (::ftruncate(file, kAckPageSize) != 0 ||
      ::fcntl(file, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      (mapped = ::mmap(nullptr, kAckPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0)) == MAP_FAILED) {
    int error = errno;
    ::close(file);
    return ACTORPIPE_ERROR(SystemError, std::string(purpose) + " page", error);
  }
  fd = file;
  page = mapped;
  return Error();
}

Error mapPeerAckPage(const std::optional<actorpipe::detail::PeerProcess>& peer, uint64_t fd, void*& page,
                     int& pidfd, const char* purpose) {
  const std::string who = purpose;
  page = nullptr;
  pidfd = -1;
  if (!peer || peer->pid <= 0) {
    return ACTORPIPE_ERROR(ProtocolError, who + ": the transport cannot tell which process the peer is");
  }
  if (peer->uid != ::geteuid()) {
    return ACTORPIPE_ERROR(ProtocolError, who + ": the peer process runs as uid " + std::to_string(peer->uid) +
                                              ", this one as " + std::to_string(::geteuid()));
  }
  if (fd > 0x7fffffff) return ACTORPIPE_ERROR(ProtocolError, who + ": page fd out of range");
  int watch = static_cast<int>(::syscall(SYS_pidfd_open, peer->pid, 0));
  if (watch < 0) {
    return ACTORPIPE_ERROR(SystemError, "pidfd_open of the peer (pid " + std::to_string(peer->pid) + ")", errno);
  }
  // The peer's file itself, duplicated through its pidfd: nothing is
  // opened, so an fd of a FUSE file, a fifo or a device cannot block us or
  // act on open (an open of /proc/<pid>/fd/<n> would). Where that is not
  // there (before Linux 5.6) or not allowed (it asks for ptrace's attach
  // right, which Yama's ptrace_scope 1 refuses, and cuda_ipc works
  // without), that path, opened so that a fifo cannot block it nor a
  // terminal become ours; a FUSE file's open still asks its daemon.
  const std::string path = "/proc/" + std::to_string(peer->pid) + "/fd/" + std::to_string(fd);
  std::string how = "pidfd_getfd of the peer's fd " + std::to_string(fd);
  int file = static_cast<int>(::syscall(SYS_pidfd_getfd, watch, static_cast<int>(fd), 0));
  int failure = file < 0 ? errno : 0;
  if (file < 0 && (failure == ENOSYS || failure == EPERM)) {
    how = "open " + path;
    file = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    failure = file < 0 ? errno : 0;
  }
  Error error;
  struct stat st {};
  // Seals first: only memfd and hugetlbfs files answer, no filesystem's code runs.
  int seals = file >= 0 ? ::fcntl(file, F_GET_SEALS) : -1;
  if (file < 0) {
    error = exited(watch) ? ACTORPIPE_ERROR(EOFError) : ACTORPIPE_ERROR(SystemError, how, failure);
  } else if (exited(watch)) {
    error = ACTORPIPE_ERROR(EOFError);  // the peer exited: its pid may name another process now
  } else if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || ::fstat(file, &st) != 0 || !S_ISREG(st.st_mode) ||
             st.st_size != static_cast<off_t>(kAckPageSize)) {
    error = ACTORPIPE_ERROR(ProtocolError,
                            who + ": the peer's fd " + std::to_string(fd) + " is not a sealed one-page file");
  } else {
    void* mapped = ::mmap(nullptr, kAckPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    if (mapped == MAP_FAILED) {
      error = ACTORPIPE_ERROR(SystemError, "mmap of the peer's " + who + " page", errno);
    } else {
      page = mapped;
    }
  }
  if (file >= 0) ::close(file);
  if (error) {
    ::close(watch);
  } else {
    pidfd = watch;
  }
  return error;
}

} // namespace actorpipe::channel::detail
