#pragma once
// A CAF message as bytes plus tensors, for a message that crosses nodes.
//
// The bytes are CAF's own binary encoding (its serializer and every
// inspectable type registered in the actor system's config), so any type a
// user can send to a remote CAF actor can be sent here. A message of at
// most 16 plain values (bool, fixed-width integers, float, double,
// std::string, atoms) goes in a compact form of ours instead (message_codec.cc
// says why and how): CAF's costs ~400 ns a message here. A Tensor inside the
// message is not encoded: its inspect() (actors/tensor.h) appends it to the
// message's tensor list and writes its index, and the list travels as pipe
// tensors on the negotiated channel. Decoding puts them back by index.
//
// The bytes come from a peer, so decoding does not use CAF's
// binary_deserializer: that one resizes a byte vector to whatever count the
// input announces before it checks the input holds it (5 bytes can ask for
// 4 GiB) and shifts a varint past 32 bits on long input. Ours (message_codec.cc)
// reads the same format with every count checked against the bytes that
// remain; an index must name a received tensor, each exactly once.
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/message.hpp>

#include <actorpipe/actors/tensor.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::remote::detail {

struct EncodedMessage {
  std::vector<char> bytes;
  std::vector<Tensor> tensors;
};

// Fails for a type the actor system does not know (not registered with
// add_message_type) or one whose inspect() fails.
Error encodeMessage(caf::actor_system& system, const caf::message& message, EncodedMessage& out);

// `tensors` are those that came with the bytes; each must be used once.
// Actor handles inside resolve through `unit`'s proxy registry (other
// nodes' actors: the registry of the link the message came on, through its
// decoding unit); without one, only this node's actors in CAF's registry resolve
// and any other handle fails the decoding.
Error decodeMessage(caf::actor_system& system, const char* data, size_t size,
                    std::vector<Tensor> tensors, caf::message& out,
                    caf::execution_unit* unit = nullptr);

// A CAF node id as CAF serializes it (a node's HELLO carries its own), and
// back, strictly: a valid id and nothing after it.
std::string encodeNodeId(caf::actor_system& system, const caf::node_id& id);
Error decodeNodeId(caf::actor_system& system, const std::string& bytes, caf::node_id& out);

// Messages CAF's runtime treats as control, not content (exit_msg, down_msg,
// stream messages...): never sent to a peer, refused from one (a peer that
// could send an exit_msg to a published actor could kill it).
bool isSystemMessage(const caf::message& message);

} // namespace actorpipe::remote::detail
