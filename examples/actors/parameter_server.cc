// A parameter server across three processes: this one holds a model (a
// float32 vector), two worker nodes pull the weights, compute a gradient
// towards their own half of a target and push it back, many times. Each
// worker checks its loss went down; the server checks the model reached
// the target. Exits non-zero if either fails.
//
// The workers are forked first, before this process starts any thread, and
// wait for the server's URL on a pipe.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>

using actorpipe::DType;
using actorpipe::Tensor;
namespace remote = actorpipe::remote;

using pull_atom = caf::atom_constant<caf::atom("pull")>;
using push_atom = caf::atom_constant<caf::atom("push")>;

namespace {

constexpr int64_t kSize = 4096;
constexpr int kSteps = 200;
constexpr float kRate = 0.1f;

// Worker `rank` wants the model's half `rank` to be rank + 1.
float target(int64_t i) { return i < kSize / 2 ? 1.0f : 2.0f; }

double loss(const Tensor& w, int rank) {
  double sum = 0;
  const float* v = w.data<float>();
  for (int64_t i = rank * kSize / 2; i < (rank + 1) * kSize / 2; ++i) {
    sum += (v[i] - target(i)) * (v[i] - target(i));
  }
  return sum;
}

int worker(int rank, int fd) {
  std::string url;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') url += c;
  caf::actor_system_config cfg;
  remote::configure(cfg);
  caf::actor_system system{cfg};
  remote::Node node(system);
  auto server = node.remoteActor(url, "parameters");
  if (!server) {
    std::fprintf(stderr, "worker %d: %s\n", rank, system.render(server.error()).c_str());
    return 1;
  }
  caf::scoped_actor self{system};
  double first = -1, last = -1;
  for (int step = 0; step < kSteps; ++step) {
    Tensor weights;
    self->request(*server, std::chrono::seconds(10), pull_atom::value)
        .receive([&](const Tensor& w) { weights = w; }, [&](caf::error&) {});
    if (!weights.defined()) return 1;
    last = loss(weights, rank);
    if (first < 0) first = last;
    Tensor gradient = Tensor::zeros({kSize}, DType::kFloat32);
    float* g = gradient.data<float>();
    const float* w = weights.data<float>();
    for (int64_t i = rank * kSize / 2; i < (rank + 1) * kSize / 2; ++i) g[i] = 2 * (w[i] - target(i));
    self->send(*server, push_atom::value, gradient);
  }
  std::printf("worker %d: loss %.3f -> %.6f over %d steps\n", rank, first, last, kSteps);
  return last < first * 1e-3 ? 0 : 1;
}

} // namespace

int main() {
  std::vector<pid_t> workers;
  std::vector<int> pipes;
  for (int rank = 0; rank < 2; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[1]);
      int rc = worker(rank, fds[0]);
      std::fflush(stdout);  // _exit does not
      ::_exit(rc);
    }
    ::close(fds[0]);
    workers.push_back(pid);
    pipes.push_back(fds[1]);
  }
  int rc = 0;
  {
    caf::actor_system_config cfg;
    remote::configure(cfg);
    caf::actor_system system{cfg};
    remote::Node node(system);
    // The model: pulled as a copy (workers read it while others push).
    auto parameters = system.spawn([](caf::stateful_actor<Tensor>* self) -> caf::behavior {
      self->state = Tensor::zeros({kSize}, DType::kFloat32);
      return {
          [=](pull_atom) { return self->state.clone(); },
          [=](push_atom, const Tensor& gradient) {
            float* w = self->state.data<float>();
            const float* g = gradient.data<float>();
            for (int64_t i = 0; i < kSize; ++i) w[i] -= kRate * g[i];
          },
      };
    });
    node.publish(parameters, "parameters");
    std::string url = node.url("tcp") + "\n";
    for (int fd : pipes) {
      if (::write(fd, url.data(), url.size()) < 0) rc = 1;
      ::close(fd);
    }
    for (pid_t pid : workers) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    }
    caf::scoped_actor self{system};
    self->request(parameters, std::chrono::seconds(10), pull_atom::value)
        .receive(
            [&](const Tensor& w) {
              double error = 0;
              for (int64_t i = 0; i < kSize; ++i) error = std::max(error, double(std::fabs(w.data<float>()[i] - target(i))));
              std::printf("server: largest distance from the target %.6f\n", error);
              if (error > 1e-2) rc = 1;
            },
            [&](caf::error&) { rc = 1; });
    self->send_exit(parameters, caf::exit_reason::user_shutdown);
  }
  return rc;
}
