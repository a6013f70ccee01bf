// A DAG whose stages sit on three processes, shut down by closing its
// source: this process writes tensors into a channel it exports ("raw") and
// closes it; a stage process reads "raw" from here, scales each tensor and
// writes it into a channel it exports ("scaled"); a sink process reads
// "scaled" until it is drained and checks every tensor, in order. Nothing
// but the close of "raw" tells the stage and the sink to finish: the stage
// sees "raw" drained and closes "scaled", the sink sees "scaled" drained.
// Exits non-zero if anything arrived wrong or not at all.
//
//   actorpipe-actors-dag [items] [floats per tensor]
//
// The stage and the sink are forked first, before this process starts any
// thread, and learn their upstream's URL on a pipe.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>

#include <caf/all.hpp>

#include <actorpipe/actors/remote/channel.h>
#include <actorpipe/actors/tensor.h>

using actorpipe::DType;
using actorpipe::Tensor;
using actorpipe::dataflow::Channel;
using actorpipe::dataflow::Status;
namespace remote = actorpipe::remote;

using leave_atom = caf::atom_constant<caf::atom("leave")>;

namespace {

constexpr float kScale = 3.0f;

std::string readLine(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

bool writeLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// Publishes a "leaver" a downstream node tells when it is done; before the
// node's work starts, so the downstream's lookup cannot come too early.
std::future<void> publishLeaver(caf::actor_system& system, remote::Node& node) {
  auto left = std::make_shared<std::promise<void>>();
  node.publish(system.spawn([left](caf::event_based_actor*) -> caf::behavior {
                 return {[left](leave_atom) { left->set_value(); }};
               }),
               "leaver");
  return left->get_future();
}

// Serves this node's channels until told (or `done` says there is no point:
// the downstream process ended), at most 2 minutes.
template <class Done>
void serveUntilLeft(std::future<void>& told, Done done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (told.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready && !done() &&
         std::chrono::steady_clock::now() < deadline) {
  }
}

// This process's actor system and node, made after the fork.
struct NodeProcess {
  NodeProcess() : system(configured(cfg)), node(system) {}
  static caf::actor_system_config& configured(caf::actor_system_config& c) {
    remote::configure(c);
    return c;
  }
  caf::actor_system_config cfg;
  caf::actor_system system;
  remote::Node node;
};

// Reads "raw" at `rawUrl`, scales, writes "scaled"; its URL goes to `out`.
int stage(int in, int out) {
  std::string rawUrl = readLine(in);
  NodeProcess process;
  auto& system = process.system;
  auto& node = process.node;
  Channel<Tensor> scaled(16);
  auto told = publishLeaver(system, node);
  if (remote::exportChannel(node, scaled, "scaled")) return 1;
  auto raw = remote::RemoteChannel<Tensor>::open(node, rawUrl, "raw");
  if (!raw) {
    std::fprintf(stderr, "stage: %s\n", system.render(raw.error()).c_str());
    return 1;
  }
  if (!writeLine(out, node.url("tcp"))) return 1;
  size_t items = 0;
  for (auto read = raw->read(); read; read = raw->read(), ++items) {
    Tensor t = *read.item;
    float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) v[i] *= kScale;
    if (scaled.write(std::move(t)) != Status::kOpen) return 1;
  }
  if (raw->error()) {
    std::fprintf(stderr, "stage: %s\n", system.render(raw->error()).c_str());
    return 1;
  }
  scaled.close();  // the cascade: drained upstream, closed here
  std::printf("stage: \"raw\" drained after %zu tensors; \"scaled\" closed\n", items);
  std::fflush(stdout);
  if (auto source = node.remoteActor(rawUrl, "leaver")) caf::anon_send(*source, leave_atom::value);
  serveUntilLeft(told, [] { return getppid() == 1; });
  return 0;
}

// Reads "scaled" at the stage's URL until drained; checks each tensor.
int sink(int in, int64_t items, int64_t floats) {
  std::string scaledUrl = readLine(in);
  NodeProcess process;
  auto& system = process.system;
  auto& node = process.node;
  auto scaled = remote::RemoteChannel<Tensor>::open(node, scaledUrl, "scaled");
  if (!scaled) {
    std::fprintf(stderr, "sink: %s\n", system.render(scaled.error()).c_str());
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  int64_t seen = 0;
  bool ok = true;
  for (auto read = scaled->read(); read; read = scaled->read(), ++seen) {
    const Tensor& t = *read.item;
    ok = ok && t.dtype() == DType::kFloat32 && t.numel() == floats;
    for (int64_t i = 0; ok && i < floats; ++i) ok = t.data<float>()[i] == kScale * float(seen + i);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (scaled->error()) {
    std::fprintf(stderr, "sink: %s\n", system.render(scaled->error()).c_str());
    ok = false;
  }
  ok = ok && seen == items;
  std::printf("sink: \"scaled\" drained after %lld tensors of %lld floats, %s; %.0f tensors/s, %.1f MB/s through two hops\n",
              static_cast<long long>(seen), static_cast<long long>(floats), ok ? "all correct" : "WRONG",
              double(seen) / seconds, double(seen * floats * 4) / seconds / 1e6);
  std::fflush(stdout);
  if (auto stageLeaver = node.remoteActor(scaledUrl, "leaver")) caf::anon_send(*stageLeaver, leave_atom::value);
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  int64_t items = argc > 1 ? std::atoll(argv[1]) : 1000;
  int64_t floats = argc > 2 ? std::atoll(argv[2]) : 1024;
  if (items < 0 || floats < 1 || floats > (int64_t(1) << 26)) {
    std::fprintf(stderr, "usage: %s [items >= 0] [floats per tensor, 1..2^26]\n", argv[0]);
    return 2;
  }
  int toStage[2], toSink[2];
  if (::pipe(toStage) != 0 || ::pipe(toSink) != 0) return 1;
  pid_t stagePid = ::fork();
  if (stagePid == 0) {
    int rc = stage(toStage[0], toSink[1]);
    std::fflush(stdout);  // _exit does not
    ::_exit(rc);
  }
  pid_t sinkPid = ::fork();
  if (sinkPid == 0) {
    int rc = sink(toSink[0], items, floats);
    std::fflush(stdout);
    ::_exit(rc);
  }
  int rc = 0;
  {
    NodeProcess process;
    auto& system = process.system;
    auto& node = process.node;
    Channel<Tensor> raw(16);
    auto told = publishLeaver(system, node);
    if (remote::exportChannel(node, raw, "raw")) return 1;
    if (!writeLine(toStage[1], node.url("tcp"))) rc = 1;
    for (int64_t n = 0; n < items; ++n) {
      Tensor t = Tensor::zeros({floats}, DType::kFloat32);
      for (int64_t i = 0; i < floats; ++i) t.data<float>()[i] = float(n + i);
      if (raw.write(std::move(t)) != Status::kOpen) rc = 1;
    }
    raw.close();  // the only shutdown signal
    std::printf("source: %lld tensors written, \"raw\" closed\n", static_cast<long long>(items));
    std::fflush(stdout);
    // Until the stage has drained "raw" (or ended).
    int stageStatus = -1;
    serveUntilLeft(told, [&] { return ::waitpid(stagePid, &stageStatus, WNOHANG) == stagePid; });
    if (stageStatus == -1) ::waitpid(stagePid, &stageStatus, 0);
    int sinkStatus = 0;
    ::waitpid(sinkPid, &sinkStatus, 0);
    for (int status : {stageStatus, sinkStatus}) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    }
  }
  std::printf("dag: %s\n", rc == 0 ? "ok" : "FAILED");
  return rc;
}
