#pragma once
// mpt's setup string, "token;address0;address1;...", which the accepting
// side writes into its welcome and the connecting side parses. The welcome
// is the peer's: the parser is strict and CAF-free (fuzz target mpt_setup).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <actorpipe/runtime/error.h>

namespace actorpipe::channel::mpt {

std::string formatSetup(uint64_t token, const std::vector<std::string>& addresses);
// Exactly `lanes` non-empty addresses after a decimal token that fits in 64
// bits; anything else is a ProtocolError.
Error parseSetup(const std::string& setup, size_t lanes, uint64_t& token, std::vector<std::string>& addresses);

} // namespace actorpipe::channel::mpt
