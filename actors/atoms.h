#pragma once
// The vocabulary of actorpipe's actors, and the value types they exchange.
// Included by every translation unit that talks to a pipe or listener actor.
#include <memory>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/message.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe {

using write_atom = caf::atom_constant<caf::atom("ap_write")>;
using read_descriptor_atom = caf::atom_constant<caf::atom("ap_readd")>;
using read_atom = caf::atom_constant<caf::atom("ap_read")>;
using close_atom = caf::atom_constant<caf::atom("ap_close")>;
using accept_atom = caf::atom_constant<caf::atom("ap_accept")>;
using ok_atom = caf::atom_constant<caf::atom("ap_ok")>;

namespace detail {
// Internal: a handshaken pipe arriving at its listener's actor; a listener
// on one transport failing.
using ready_atom = caf::atom_constant<caf::atom("ap_ready")>;
using failed_atom = caf::atom_constant<caf::atom("ap_failed")>;
using ping_atom = caf::atom_constant<caf::atom("ap_ping")>;
using watch_atom = caf::atom_constant<caf::atom("ap_watch")>;
} // namespace detail

} // namespace actorpipe

// Local-only message types: they hold raw pointers and callbacks, so they
// never cross a process boundary through CAF (pipes carry data between
// processes; CAF's middleman carries only control messages).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Descriptor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Allocation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Error)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Pipe::write_callback_fn)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Pipe::read_descriptor_callback_fn)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Listener::accept_callback_fn)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<actorpipe::Pipe>)
