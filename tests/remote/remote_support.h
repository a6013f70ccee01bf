#pragma once
// Nodes for the remote-actor tests: an actor system with actorpipe's
// message types, a Node on loopback, and the actors the tests publish.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/all.hpp>

#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>

namespace remote_test {

using namespace std::chrono_literals;
using actorpipe::DType;
using actorpipe::Tensor;
using actorpipe::remote::Node;
using actorpipe::remote::NodeOptions;
using actorpipe::remote::RemoteError;

using get_atom = caf::atom_constant<caf::atom("get")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;

class TestNode {
 public:
  explicit TestNode(NodeOptions options = quick()) {
    actorpipe::remote::configure(config_);
    config_.add_message_type<std::vector<int32_t>>("std::vector<int32_t>");
    config_.set("scheduler.max-threads", 2);
    system_.emplace(config_);
    node_.emplace(*system_, std::move(options));
  }
  ~TestNode() {
    // A sleeper's promises hold the sleeper itself: it ends only when told.
    for (auto& actor : owned_) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    node_.reset();
  }
  caf::actor own(caf::actor actor) {
    owned_.push_back(actor);
    return actor;
  }
  caf::actor_system& system() { return *system_; }
  Node& node() { return *node_; }
  void leave() { node_->leave(); }

  // Short heartbeats, so the tests see losses quickly. Instrumented, and
  // beside other tests on 2 CPUs, a process can stall for over a second (a
  // group test's rank did, in CI under TSan): sanitizer builds wait longer
  // before they call a silent peer lost.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  static constexpr std::chrono::milliseconds kQuickInterval{500}, kQuickTimeout{3000};
  // What "at once" may take: a killed sanitized child's teardown (its
  // sockets close after its large mappings go) on loaded CPUs.
  static constexpr std::chrono::milliseconds kPromptly{5000};
#else
  static constexpr std::chrono::milliseconds kQuickInterval{100}, kQuickTimeout{600};
  static constexpr std::chrono::milliseconds kPromptly{1000};
#endif
  static NodeOptions quick() {
    NodeOptions options;
    options.listen = {"tcp://127.0.0.1:0", "shm://"};
    options.heartbeatInterval = kQuickInterval;
    options.heartbeatTimeout = kQuickTimeout;
    options.lookupTimeout = 5000ms;
    return options;
  }

 private:
  caf::actor_system_config config_;
  std::optional<caf::actor_system> system_;
  std::optional<Node> node_;
  std::vector<caf::actor> owned_;
};

// Element sum of a host tensor of any dtype, as a double.
inline double sumOf(const Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32: sum += t.data<float>()[i]; break;
      case DType::kFloat64: sum += t.data<double>()[i]; break;
      case DType::kInt32: sum += t.data<int32_t>()[i]; break;
      case DType::kInt64: sum += static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::kUint8: sum += t.data<uint8_t>()[i]; break;
    }
  }
  return sum;
}

// The actors a serving node publishes:
//  "summer":   Tensor -> (sum, the same tensor back); string -> "echo:" + string
//  "collector": int32 appended; get -> every int so far, in arrival order
//  "sleeper":  hold -> never answered (the promise is kept)
inline caf::behavior summer(caf::event_based_actor*) {
  return {
      [](const Tensor& t) { return caf::make_message(sumOf(t), t); },
      [](const std::string& s) { return "echo:" + s; },
  };
}

inline caf::behavior collector(caf::stateful_actor<std::vector<int32_t>>* self) {
  return {
      [=](int32_t value) { self->state.push_back(value); },
      [=](get_atom) { return self->state; },
  };
}

inline caf::behavior sleeper(caf::stateful_actor<std::vector<caf::response_promise>>* self) {
  return {
      [=](hold_atom) {
        self->state.push_back(self->make_response_promise());
        return caf::delegated<int32_t>();
      },
  };
}

// A URL for a forked child, sent after the fork: the child is forked
// before the test starts threads (under TSan a child forked from threads
// cannot start its own), so the node whose URL it needs is made after.
class UrlPipe {
 public:
  UrlPipe() {
    if (::pipe(fds_) != 0) throw std::runtime_error("pipe() failed");
  }
  UrlPipe(const UrlPipe&) = delete;
  UrlPipe& operator=(const UrlPipe&) = delete;
  ~UrlPipe() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  // In the child: the URL, once the parent sent it ("" once the parent
  // closed its end without sending, or ended).
  std::string receive() {
    closeEnd(1);
    std::string url;
    char c;
    while (::read(fds_[0], &c, 1) == 1 && c != '\n') url += c;
    return url;
  }
  // In the parent, right after the fork.
  void forked() { closeEnd(0); }
  // In the parent.
  bool send(const std::string& url) {
    std::string line = url + "\n";
    bool sent = ::write(fds_[1], line.data(), line.size()) == ssize_t(line.size());
    closeEnd(1);
    return sent;
  }

 private:
  void closeEnd(int end) {
    if (fds_[end] >= 0) ::close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2]{-1, -1};
};

inline void publishAll(TestNode& node) {
  auto& system = node.system();
  node.node().publish(system.spawn(summer), "summer");
  node.node().publish(system.spawn(collector), "collector");
  node.node().publish(node.own(system.spawn(sleeper)), "sleeper");
}

// An actor of `node` links itself to `target` (an actor on another node),
// then ends with an error, as a user's actor that fails would: CAF's link
// carries that end to `target`. Returns once it has ended.
template <class Handle>
void linkThenFail(TestNode& node, const Handle& target) {
  auto linker = node.system().spawn([target](caf::event_based_actor* self) -> caf::behavior {
    self->link_to(target);
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  });
  caf::scoped_actor self{node.system()};
  self->monitor(linker);
  self->receive([](caf::down_msg&) {});
}

// True if `target` (an actor on another node, as `node` sees it) is still
// there after `within`: watched from now on, and a watch of an actor that
// is gone already is answered at once.
template <class Handle>
bool outlives(TestNode& node, const Handle& target, std::chrono::milliseconds within) {
  caf::scoped_actor self{node.system()};
  self->monitor(target);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(within) >> [] {});
  return !down;
}

} // namespace remote_test
