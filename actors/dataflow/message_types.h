#pragma once

// Lets actorpipe::Tensor travel in CAF messages between local actors.
//
// Tensors are handles, so a message holding one carries a reference to the
// storage, never the bytes: copy-on-write of the message only copies the
// handle. They are not serializable (a remote hop would need to ship the
// storage), hence the "unsafe" whitelist, which CAF wants for local-only
// types. Include this wherever an actor sends or receives tensors.

#include <actorpipe/actors/tensor.h>

#include <caf/allowed_unsafe_message_type.hpp>

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(actorpipe::Tensor)
