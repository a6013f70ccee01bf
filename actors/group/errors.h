#pragma once
// Errors of groups and collectives. They travel as actorpipe::Error, so
// `error.castToType<RankFailedError>()->rank()` says which rank to blame.
#include <string>

#include <actorpipe/runtime/error.h>

namespace actorpipe::group {

// A rank went away (died, closed, or stopped answering) during a collective
// or a rendezvous. Every rank still running reports the same rank number.
class RankFailedError final : public BaseError {
 public:
  RankFailedError(int rank, std::string reason) : rank_(rank), reason_(std::move(reason)) {}
  std::string what() const override {
    return "rank " + std::to_string(rank_) + " failed: " + reason_;
  }
  int rank() const { return rank_; }
  const std::string& reason() const { return reason_; }

 private:
  int rank_;
  std::string reason_;
};

// The group could not be formed: a rank never showed up, rank 0's address
// could not be found, or the environment names no group.
class RendezvousError final : public BaseError {
 public:
  explicit RendezvousError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "rendezvous failed: " + reason_; }

 private:
  std::string reason_;
};

// Another rank's collective failed with an error of a kind that does not
// travel between ranks (a RankFailedError, LogicError, TimeoutError or
// ProtocolError arrives as itself); its text does.
class AbortedError final : public BaseError {
 public:
  explicit AbortedError(std::string reason) : reason_(std::move(reason)) {}
  std::string what() const override { return "collective aborted: " + reason_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// An operation did not complete within its deadline: the library's one
// TimeoutError, so isOfType<actorpipe::TimeoutError>() holds for a group's.
using TimeoutError = ::actorpipe::TimeoutError;

} // namespace actorpipe::group
