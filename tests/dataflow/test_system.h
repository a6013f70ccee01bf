#pragma once

// An actor system with a chosen number of scheduler threads, destroyed (and
// so shut down, waiting for every actor) at the end of the test's scope.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <optional>

class TestSystem {
public:
  explicit TestSystem(int schedulerThreads) {
    config_.set("scheduler.max-threads", schedulerThreads);
    system_.emplace(config_);
  }
  caf::actor_system& get() { return *system_; }

private:
  caf::actor_system_config config_;
  std::optional<caf::actor_system> system_;
};
