#include <actorpipe/actors/detail/auth.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <actorpipe/actors/detail/frames.h>

namespace actorpipe::detail {

std::string freshNonce() {
  std::string nonce(32, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(&nonce[0]), static_cast<int>(nonce.size()));
  return nonce;
}

std::string proof(const std::string& secret, const char* role, const std::string& first,
                  const std::string& second) {
  std::string data = std::string(role) + '\0' + first + second;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &length);
  return std::string(reinterpret_cast<char*>(out), length);
}

bool sameProof(const std::string& a, const std::string& b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void refuse(const std::shared_ptr<transport::Connection>& connection, const std::string& reason) {
  auto frame = std::make_shared<std::string>(
      frameOf(wire::FrameType::kReject, wire::Reject{reason, wire::Reject::kAuthentication}));
  connection->write(frame->data(), frame->size(), [connection, frame, reason](const Error&) {
    connection->close(ACTORPIPE_ERROR(AuthenticationError, reason));
  });
}

void authenticateAsConnector(const std::shared_ptr<transport::Connection>& connection,
                             const std::string& secret, const Limits& limits, auth_fn done) {
  if (secret.empty()) return done(Error());
  auto mine = std::make_shared<std::string>(freshNonce());
  auto challenge = std::make_shared<std::string>(frameOf(wire::FrameType::kChallenge, wire::Challenge{*mine, ""}));
  connection->write(challenge->data(), challenge->size(), [challenge](const Error&) {});
  readFrame(connection, handshakeLimits(limits),
            [connection, secret, limits, mine, done](const Error& e, wire::FrameType type,
                                                     std::vector<uint8_t>& body) {
    if (e) return done(e);
    if (type == wire::FrameType::kReject) {
      wire::Reject reject;
      wire::decode(body.data(), body.size(), limits, reject);
      return done(ACTORPIPE_ERROR(AuthenticationError, "the peer refused us: " + reject.reason));
    }
    wire::Challenge theirs;
    if (type != wire::FrameType::kChallenge || wire::decode(body.data(), body.size(), limits, theirs)) {
      // A peer that answers anything else has no secret (or is not actorpipe).
      connection->close(ACTORPIPE_ERROR(AuthenticationError, "the peer does not authenticate"));
      return done(ACTORPIPE_ERROR(AuthenticationError, "the peer does not authenticate"));
    }
    if (!sameProof(theirs.mac, proof(secret, "actorpipe acceptor", *mine, theirs.nonce))) {
      connection->close(ACTORPIPE_ERROR(AuthenticationError, "the peer does not know our secret"));
      return done(ACTORPIPE_ERROR(AuthenticationError, "the peer does not know our secret"));
    }
    auto auth = std::make_shared<std::string>(
        frameOf(wire::FrameType::kAuth, wire::Auth{proof(secret, "actorpipe connector", theirs.nonce, *mine)}));
    connection->write(auth->data(), auth->size(), [auth](const Error&) {});
    done(Error());
  });
}

void authenticateAsAcceptor(const std::shared_ptr<transport::Connection>& connection,
                            const std::string& secret, const Limits& limits, uint8_t firstType,
                            const std::vector<uint8_t>& firstBody, auth_fn done) {
  auto type = static_cast<wire::FrameType>(firstType);
  if (secret.empty()) {
    if (type == wire::FrameType::kChallenge) {
      refuse(connection, "this peer does not use authentication (no secret set)");
      return done(ACTORPIPE_ERROR(AuthenticationError, "the connector wants a secret we do not have"));
    }
    return done(Error());
  }
  wire::Challenge theirs;
  if (type != wire::FrameType::kChallenge || wire::decode(firstBody.data(), firstBody.size(), limits, theirs) ||
      theirs.nonce.size() < 16) {
    refuse(connection, "authentication required: set the shared secret (ContextOptions::secret)");
    return done(ACTORPIPE_ERROR(AuthenticationError, "the connector did not authenticate"));
  }
  std::string mine = freshNonce();
  auto challenge = std::make_shared<std::string>(frameOf(
      wire::FrameType::kChallenge, wire::Challenge{mine, proof(secret, "actorpipe acceptor", theirs.nonce, mine)}));
  connection->write(challenge->data(), challenge->size(), [challenge](const Error&) {});
  readFrame(connection, handshakeLimits(limits),
            [connection, secret, limits, mine, theirs, done](const Error& e, wire::FrameType type,
                                                            std::vector<uint8_t>& body) {
    if (e) return done(e);
    wire::Auth auth;
    if (type != wire::FrameType::kAuth || wire::decode(body.data(), body.size(), limits, auth) ||
        !sameProof(auth.mac, proof(secret, "actorpipe connector", mine, theirs.nonce))) {
      refuse(connection, "wrong secret");
      return done(ACTORPIPE_ERROR(AuthenticationError, "the connector does not know our secret"));
    }
    done(Error());
  });
}

} // namespace actorpipe::detail
