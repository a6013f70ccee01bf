#pragma once
// Mutual authentication by a shared secret, before any other frame:
//
//   connector                               acceptor
//   CHALLENGE {nonce_c} ------------------>
//           <------------------ CHALLENGE {nonce_a, mac_a}    mac_a proves the acceptor
//   AUTH {mac_c}, then HELLO or JOIN ------>                   mac_c proves the connector
//
// mac_a = HMAC-SHA256(secret, "actorpipe acceptor" | nonce_c | nonce_a)
// mac_c = HMAC-SHA256(secret, "actorpipe connector" | nonce_a | nonce_c)
// Each side's nonce is fresh (32 random bytes), so a recorded exchange
// cannot be replayed. A side that fails to prove itself is refused (REJECT,
// then close) and costs the other a few small frames and one HMAC.
#include <functional>
#include <memory>
#include <string>

#include <actorpipe/runtime/error.h>
#include <actorpipe/runtime/options.h>
#include <actorpipe/transports/context.h>

namespace actorpipe::detail {

std::string freshNonce();
std::string proof(const std::string& secret, const char* role, const std::string& first,
                  const std::string& second);
bool sameProof(const std::string& a, const std::string& b);

using auth_fn = std::function<void(const Error&)>;

// Connecting side, on a fresh connection. With no secret, succeeds at once.
void authenticateAsConnector(const std::shared_ptr<transport::Connection>& connection,
                             const std::string& secret, const Limits& limits, auth_fn done);

// Accepting side: called with the connection's first frame already read.
// On success `done(Error())` and the next frame (HELLO or JOIN) is the
// caller's to read; on failure the peer has been told and the connection is
// being closed.
void authenticateAsAcceptor(const std::shared_ptr<transport::Connection>& connection,
                            const std::string& secret, const Limits& limits, uint8_t firstType,
                            const std::vector<uint8_t>& firstBody, auth_fn done);

// Tells the peer why (REJECT), then closes.
void refuse(const std::shared_ptr<transport::Connection>& connection, const std::string& reason);

} // namespace actorpipe::detail
