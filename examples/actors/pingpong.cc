// Two processes, two nodes, tensor messages between their actors.
//
// The parent forks a "pong" node, which publishes an actor that answers a
// float32 tensor with a new tensor of each element plus one. The parent's
// "ping" actor sends a tensor, checks the answer, and sends the answer
// back, round after round. Exits non-zero if any value is wrong.
//
//   actorpipe-actors-pingpong [rounds] [elements]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>

#include <caf/all.hpp>

#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>

using actorpipe::DType;
using actorpipe::Tensor;
namespace remote = actorpipe::remote;

namespace {

int pongNode(int fd) {
  caf::actor_system_config cfg;
  remote::configure(cfg);
  caf::actor_system system{cfg};
  remote::NodeOptions options;
  options.listen = {"tcp://127.0.0.1:0", "shm://"};
  remote::Node node(system, options);
  auto pong = system.spawn([]() -> caf::behavior {
    return {[](const Tensor& in) {
      Tensor out = Tensor::empty(in.shape(), DType::kFloat32);
      const float* src = in.data<float>();
      float* dst = out.data<float>();
      for (int64_t i = 0; i < in.numel(); ++i) dst[i] = src[i] + 1.0f;
      return out;
    }};
  });
  node.publish(pong, "pong");
  std::string url = node.url("shm") + "\n";
  if (::write(fd, url.data(), url.size()) < 0) return 1;
  ::close(fd);
  ::pause();  // until the parent is done with us
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
  int64_t elements = argc > 2 ? std::atoll(argv[2]) : 1024;
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::_exit(pongNode(fds[1]));
  }
  ::close(fds[1]);
  std::string url;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') url += c;
  ::close(fds[0]);

  int rc = 0;
  {
    caf::actor_system_config cfg;
    remote::configure(cfg);
    caf::actor_system system{cfg};
    remote::Node node(system);
    auto pong = node.remoteActor(url, "pong");
    if (!pong) {
      std::fprintf(stderr, "no pong at %s: %s\n", url.c_str(), system.render(pong.error()).c_str());
      rc = 1;
    } else {
      auto result = std::make_shared<std::promise<std::string>>();
      auto start = std::chrono::steady_clock::now();
      system.spawn([=, pong = *pong](caf::event_based_actor* self) {
        auto step = std::make_shared<std::function<void(Tensor, int)>>();
        *step = [=](Tensor t, int round) {
          self->request(pong, std::chrono::seconds(10), t)
              .then(
                  [=](const Tensor& back) {
                    // Every element went up by one on the other node.
                    const float* v = back.data<float>();
                    for (int64_t i = 0; i < back.numel(); ++i) {
                      if (v[i] != static_cast<float>(round + 1)) {
                        result->set_value("round " + std::to_string(round) + ": element " +
                                          std::to_string(i) + " is " + std::to_string(v[i]));
                        *step = nullptr;
                        return;
                      }
                    }
                    if (round + 1 == rounds) {
                      result->set_value("");
                      *step = nullptr;
                    } else {
                      (*step)(back, round + 1);
                    }
                  },
                  [=](caf::error& e) {
                    result->set_value(self->system().render(e));
                    *step = nullptr;
                  });
        };
        (*step)(Tensor::zeros({elements}, DType::kFloat32), 0);
      });
      std::string failure = result->get_future().get();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      if (!failure.empty()) {
        std::fprintf(stderr, "ping-pong failed: %s\n", failure.c_str());
        rc = 1;
      } else {
        std::printf("%d round trips of a %lld-element float32 tensor between two nodes (%s): "
                    "%.1f us each\n",
                    rounds, static_cast<long long>(elements), url.c_str(), us / rounds);
      }
    }
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return rc;
}
