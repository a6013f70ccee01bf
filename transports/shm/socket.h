#pragma once
// Unix domain sockets in the abstract namespace, and file descriptors sent
// over them: the shm transport's plumbing.
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::transport::shm {

// "" -> autobind (the kernel picks a name); otherwise the abstract name.
Error abstractAddress(const std::string& name, sockaddr_un& out, socklen_t& length);
std::string abstractName(const sockaddr_un& address, socklen_t length);

// One message carrying `data` and up to 4 descriptors. Returns bytes sent or -1 (errno).
ssize_t sendWithFds(int socket, const void* data, size_t length, const int* fds, int count);
// Receives one message; `count` gets how many descriptors came (at most 4).
ssize_t recvWithFds(int socket, void* data, size_t length, int* fds, int& count);

// What two processes share if and only if they can use shm with each other:
// the same boot and the same network namespace (abstract socket names live
// in the network namespace).
std::string hostIdentity();

// memfd_create, and the close of what it made. ThreadSanitizer does not
// intercept memfd_create, so it takes a new memfd for the last descriptor of
// that number (often a socket another loop thread closed) and reports every
// use of it (fstat, mmap, close) as a race with that thread. In TSan builds
// createMemfd therefore reopens the memfd through /proc/self/fd (an open()
// TSan sees) and closes the original with closeMemfd, which
// tests/sanitizers/tsan.supp names. Other builds use the memfd as made.
int createMemfd(const char* name, unsigned flags);
// The same for a descriptor that came from another call TSan does not see
// (shm_open opens inside glibc): in TSan builds, a reopened copy of `fd`
// (the original closed with closeMemfd); elsewhere `fd` itself.
int seenBySanitizer(int fd);
void closeMemfd(int fd);

} // namespace actorpipe::transport::shm
