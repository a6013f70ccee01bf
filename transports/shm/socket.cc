#include <actorpipe/transports/shm/socket.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace actorpipe::transport::shm {

Error abstractAddress(const std::string& name, sockaddr_un& out, socklen_t& length) {
  std::memset(&out, 0, sizeof(out));
  out.sun_family = AF_UNIX;
  if (name.empty()) {
    length = sizeof(sa_family_t);  // autobind
    return Error();
  }
  if (name.size() + 1 > sizeof(out.sun_path)) {
    return ACTORPIPE_ERROR(LogicError, "shm address '" + name + "' is longer than " +
                                           std::to_string(sizeof(out.sun_path) - 2) + " bytes");
  }
  if (name.find('\0') != std::string::npos) {
    return ACTORPIPE_ERROR(LogicError, "shm address must not contain NUL bytes");
  }
  std::memcpy(out.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return Error();
}

std::string abstractName(const sockaddr_un& address, socklen_t length) {
  size_t pathLength = length > offsetof(sockaddr_un, sun_path) ? length - offsetof(sockaddr_un, sun_path) : 0;
  if (pathLength < 1 || address.sun_path[0] != '\0') return std::string();
  return std::string(address.sun_path + 1, pathLength - 1);
}

ssize_t sendWithFds(int socket, const void* data, size_t length, const int* fds, int count) {
  iovec iov{const_cast<void*>(data), length};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL);
}

ssize_t recvWithFds(int socket, void* data, size_t length, int* fds, int& count) {
  iovec iov{data, length};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  count = 0;
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int received = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < received; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (count < 4) {
          fds[count++] = fd;
        } else {
          ::close(fd);  // more than we asked for: not ours to keep
        }
      }
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    for (int i = 0; i < count; ++i) ::close(fds[i]);
    count = 0;
    errno = EPROTO;
    return -1;
  }
  return n;
}

std::string hostIdentity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  std::string net = ::stat("/proc/self/ns/net", &ns) == 0 ? std::to_string(ns.st_ino) : "?";
  return boot + "/net:" + net;
}

__attribute__((noinline)) void closeMemfd(int fd) { ::close(fd); }

int seenBySanitizer(int fd) {
#if defined(__SANITIZE_THREAD__)
  if (fd >= 0) {
    int seen = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
    int error = errno;
    closeMemfd(fd);
    errno = error;
    fd = seen;
  }
#endif
  return fd;
}

int createMemfd(const char* name, unsigned flags) { return seenBySanitizer(::memfd_create(name, flags)); }

} // namespace actorpipe::transport::shm
