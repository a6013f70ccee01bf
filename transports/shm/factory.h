#pragma once
// The shm transport: two processes of one host exchange bytes through a pair
// of rings in shared memory (memfd), set up over a Unix domain socket in the
// abstract namespace, which then carries only wake-ups. Addresses:
// "shm://name" listens on the abstract name "name"; "shm://" lets the kernel
// pick one (the listener's url() tells it).
//
// Readers poll their ring while their loop is busy and sleep in epoll once
// it is idle; a writer wakes a sleeping reader with one byte on the socket.
// One file descriptor per connection and side.
#include <cstddef>
#include <memory>

#include <actorpipe/transports/context.h>

namespace actorpipe::transport::shm {

// `ringSize` bytes per direction per connection (rounded up to a power of 2).
// It is also the most a connecting peer may ask of our listeners: a peer
// whose rings are larger is refused (ProtocolError), so both sides of a
// pair should use the same size.
std::shared_ptr<Context> create(size_t ringSize = size_t{2} << 20);

// A listener sets up at most this many connections at once (each holds a
// descriptor until its peer's setup arrives or times out); further ones wait
// in the kernel's backlog until one is done.
constexpr size_t kMaxSetups = 128;

} // namespace actorpipe::transport::shm
