// actorpipe-remote-bench: actors on two nodes (two processes on this host),
// side by side in one run with what they are built on and with CAF 0.17's
// own remote actors (its middleman), alternating case by case and pinned
// (client CPU 0, server CPU 1). Figures and commands: docs/benchmarks.md,
// "Remote actors".
//
//   request/reply, 8 bytes     remote actor (tcp, shm) vs the raw pipe round
//                              trip on the same transport vs CAF's middleman
//   one-way small messages     remote actor over shm vs CAF's middleman
//   64 MiB tensor, echoed      remote actor over shm vs the raw pipe
//   codec                      a one-int64 message encoded and decoded in
//                              the compact form and in CAF's own (one
//                              thread, no pipe)
//   client/server round trip   remote::Client/Server (tcp and shm), send
//                              and receive from plain threads, the
//                              server's thread echoing, vs the remote
//                              actor's request/reply on the same transport
//
// Each round trip is started by the previous reply's handler in an actor
// (no blocking caller in between), as the pipe's ping-pong starts each one
// from the previous callback.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <actorpipe/actors/backends.h>
#include <actorpipe/actors/remote/client_server.h>
#include <actorpipe/actors/remote/detail/message_codec.h>
#include <actorpipe/actors/remote/channel.h>
#include <actorpipe/actors/remote/node.h>
#include <actorpipe/actors/tensor.h>

#include "../pingpong.h"

using namespace actorpipe;
using Clock = std::chrono::steady_clock;
using count_atom = caf::atom_constant<caf::atom("count")>;

namespace {

struct Options {
  int rounds{3};
  int iterations{2000};
  int messages{200000};
  int tensorIterations{20};
  bool json{false};
  // CAF's scheduler in every actor system here, the middleman's too:
  // "sharing" (remote::configure's; idle workers block) or "stealing"
  // (CAF's default; idle workers poll, then sleep in steps).
  std::string scheduler{"sharing"};
  std::string only;  // measure only the rows whose name contains it
  int window{0};     // NodeOptions::windowMessages of both nodes (0: default)
};

Options gOptions;

void configure(caf::actor_system_config& cfg) {
  if (gOptions.scheduler == "sharing") cfg.set("scheduler.policy", caf::atom("sharing"));
  else cfg.set("scheduler.policy", caf::atom("stealing"));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The actor every serving process publishes: echoes an int64 or a tensor,
// counts int32s.
caf::behavior echo(caf::stateful_actor<int64_t>* self) {
  return {
      [](int64_t x) { return x; },
      [](const Tensor& t) { return t; },
      [=](int32_t) { ++self->state; },
      [=](count_atom) { return self->state; },
  };
}

// A child process; `body` writes what the parent needs on `fd` as one line.
struct Child {
  pid_t pid{-1};
  std::string line;
};

Child forkChild(const std::function<void(int fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    bench::pinToCpu(1);
    body(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  Child child;
  child.pid = pid;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') child.line += c;
  ::close(fds[0]);
  return child;
}

void stop(Child& child) {
  ::kill(child.pid, SIGKILL);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
}

void say(int fd, const std::string& line) {
  std::string out = line + "\n";
  if (::write(fd, out.data(), out.size()) < 0) std::abort();
}

// With shm the nodes' pipe goes over shm (negotiated up from tcp too); without,
// over tcp.
remote::NodeOptions nodeOptions(bool shm) {
  remote::NodeOptions options;
  options.listen = {"tcp://127.0.0.1:0"};
  if (shm) options.listen.push_back("shm://");
  options.backends.shm = shm;
  if (gOptions.window > 0) options.windowMessages = gOptions.window;
  return options;
}

Child serveNode(bool shm) {
  return forkChild([shm](int fd) {
    caf::actor_system_config cfg;
    remote::configure(cfg);
    configure(cfg);
    caf::actor_system system{cfg};
    remote::Node node(system, nodeOptions(shm));
    node.publish(system.spawn(echo), "echo");
    auto hosted = system.spawn(echo);
    node.runOnLoop(hosted);
    node.publish(hosted, "echo-on-loop");
    // Channels for remote writes (drained here) and remote reads (kept
    // full here), so neither side ever waits for the other.
    dataflow::Channel<int64_t> sink(1024), source(1024);
    remote::exportChannel(node, sink, "sink");
    remote::exportChannel(node, source, "source");
    std::thread drain([sink] { while (sink.read()) {} });
    std::thread fill([source] { while (source.write(int64_t(8)) == dataflow::Status::kOpen) {} });
    // Client/server echoes.
    auto server = remote::Server::create(node, "echo");
    if (!server) std::abort();
    std::thread echoNode([&server] {
      int from;
      caf::message m;
      while (!(*server)->receiveAny(from, m)) (*server)->send(from, std::move(m));
    });
    say(fd, node.url(shm ? "shm" : "tcp"));
    ::pause();
  });
}

Child serveMiddleman() {
  return forkChild([](int fd) {
    caf::actor_system_config cfg;
    configure(cfg);
    cfg.load<caf::io::middleman>();
    caf::actor_system system{cfg};
    auto port = system.middleman().publish(system.spawn(echo), 0, "127.0.0.1");
    say(fd, port ? std::to_string(*port) : "0");
    ::pause();
  });
}

// Round trips of `message` to `target`, each started by the previous reply;
// with `host`, the asking actor runs on that node's loop (Node::runOnLoop).
template <class Reply>
std::vector<double> pingPong(caf::actor_system& system, caf::actor target, caf::message message,
                             int warmup, int iterations, remote::Node* host = nullptr) {
  auto done = std::make_shared<std::promise<std::vector<double>>>();
  auto future = done->get_future();
  // Lazy: it starts with its first message, once it is hosted.
  auto asker = system.spawn<caf::lazy_init>([=](caf::event_based_actor* self) -> caf::behavior {
    auto samples = std::make_shared<std::vector<double>>();
    samples->reserve(iterations);
    auto next = std::make_shared<std::function<void(int)>>();
    *next = [=](int left) {
      auto start = Clock::now();
      self->request(target, caf::infinite, message)
          .then(
              [=](const Reply&) {
                if (left <= iterations) {
                  samples->push_back(
                      std::chrono::duration<double, std::micro>(Clock::now() - start).count());
                }
                if (left > 1) {
                  (*next)(left - 1);
                } else {
                  done->set_value(*samples);
                  *next = nullptr;  // the closure held itself
                  self->quit();
                }
              },
              [=](caf::error&) {
                done->set_value({});
                *next = nullptr;
                self->quit();
              });
    };
    return {[=](int) { (*next)(warmup + iterations); }};
  });
  if (host) host->runOnLoop(asker);
  caf::anon_send(asker, 0);
  return future.get();
}

// `count` int32 messages, then a request that returns once they are all in.
double oneWay(caf::actor_system& system, caf::actor target, int count) {
  caf::scoped_actor self{system};
  int64_t before = 0;
  self->request(target, caf::infinite, count_atom::value).receive([&](int64_t n) { before = n; },
                                                                  [](caf::error&) {});
  auto start = Clock::now();
  for (int32_t i = 0; i < count; ++i) self->send(target, i);
  int64_t after = 0;
  self->request(target, caf::infinite, count_atom::value).receive([&](int64_t n) { after = n; },
                                                                  [](caf::error&) {});
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (after - before != count) return 0;
  return count / seconds;
}

// Nanoseconds per encode (or decode) of a one-int64 message, `count` times:
// in the compact form the nodes use for plain values, or in CAF's own
// (its binary_serializer, as every message went before the compact form).
double codecNs(bool compact, bool decode, int count) {
  caf::actor_system_config cfg;
  remote::configure(cfg);
  caf::actor_system system{cfg};
  caf::message message = caf::make_message(int64_t(8));
  remote::detail::EncodedMessage encoded;
  auto encode = [&] {
    if (compact) return !remote::detail::encodeMessage(system, message, encoded);
    encoded.bytes.clear();
    caf::binary_serializer sink(system, encoded.bytes);
    return !message.save(sink);
  };
  if (!encode()) return 0;
  caf::message out;
  auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    bool ok = decode ? !remote::detail::decodeMessage(system, encoded.bytes.data(),
                                                      encoded.bytes.size(), {}, out)
                     : encode();
    if (!ok) return 0;
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / count;
}

// Microseconds per call of `op` (a remote channel's write or read), `count` calls.
template <class Op>
double perCall(int count, Op op) {
  for (int i = 0; i < count / 10; ++i) op();
  auto start = Clock::now();
  for (int i = 0; i < count; ++i) op();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / count;
}

// The default backends, with or without shm (as the nodes have them).
std::shared_ptr<Context> pipeContext(bool shm) {
  auto context = std::make_shared<Context>();
  DefaultBackends which;
  which.shm = shm;
  registerDefaultBackends(*context, which);
  return context;
}

double pipeRoundTrip(bool shm, const bench::Shape& shape, int iterations,
                     double* gbps = nullptr) {
  auto server = bench::forkEchoServer(shm ? "shm://" : "tcp://127.0.0.1:0", 1, 1,
                                      [shm] { return pipeContext(shm); });
  auto context = pipeContext(shm);
  auto pipe = context->connect(server.url);
  auto stats = bench::measure(*pipe, shape, iterations / 10 + 1, iterations);
  if (gbps) *gbps = stats.gigabytesPerSecond;
  pipe->close();
  context->join();
  bench::waitServer(server);
  return stats.p50;
}

struct Row {
  std::string name;
  std::vector<double> values;
  std::string unit;
};

} // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--rounds") o.rounds = next();
    else if (a == "--iterations") o.iterations = next();
    else if (a == "--messages") o.messages = next();
    else if (a == "--tensor-iterations") o.tensorIterations = next();
    else if (a == "--json") o.json = true;
    else if (a == "--scheduler" && i + 1 < argc) o.scheduler = argv[++i];
    else if (a == "--only" && i + 1 < argc) o.only = argv[++i];
    else if (a == "--window") o.window = next();
    else {
      std::fprintf(stderr,
                   "usage: actorpipe-remote-bench [--rounds R] [--iterations N] [--messages M]\n"
                   "                              [--tensor-iterations T] [--json]\n"
                   "                              [--scheduler stealing|sharing]\n"
                   "                              [--only TEXT]  (rows whose name has TEXT)\n"
                   "                              [--window MESSAGES]  (both nodes' window)\n");
      return 2;
    }
  }
  gOptions = o;
  bench::pinToCpu(0);
  std::map<std::string, Row> rows;
  // Measures a row unless --only leaves it out.
  auto add = [&](const std::string& name, const std::function<double()>& measure,
                 const std::string& unit) {
    if (!o.only.empty() && name.find(o.only) == std::string::npos) return;
    auto& row = rows[name];
    row.name = name;
    row.unit = unit;
    row.values.push_back(measure());
  };
  const size_t kBig = size_t{64} << 20;
  for (int round = 0; round < o.rounds; ++round) {
    for (bool compact : {true, false}) {
      std::string form = compact ? "compact" : "CAF's form";
      add("codec encode, int64, " + form, [&] { return codecNs(compact, false, o.messages); }, "ns");
      add("codec decode, int64, " + form, [&] { return codecNs(compact, true, o.messages); }, "ns");
    }
    // Raw pipes: the floor the remote actors are measured against.
    bench::Shape small;
    add("pipe round trip, 8 B, tcp", [&] { return pipeRoundTrip(false, small, o.iterations); }, "us");
    add("pipe round trip, 8 B, shm", [&] { return pipeRoundTrip(true, small, o.iterations); }, "us");
    bench::Shape smallTensor;
    smallTensor.tensors = 1;
    smallTensor.tensorSize = 32;
    add("pipe round trip, 32 B tensor, shm + basic", [&] { return pipeRoundTrip(true, smallTensor, o.iterations); }, "us");
    bench::Shape big;
    big.tensors = 1;
    big.tensorSize = kBig;
    add("pipe 64 MiB tensor echo, shm + basic", [&] {
      double gbps = 0;
      pipeRoundTrip(true, big, o.tensorIterations, &gbps);
      return gbps;
    }, "GB/s");

    // What two CAF actors cost without any wire: a request/reply between an
    // asker and the echo in one process, on one scheduler thread (no
    // thread hand-off). A remote round trip with both actors on their
    // nodes' loops adds these two resumes to the pipe's round trip.
    add("CAF request/reply in one process, one thread, 8 B", [&] {
      caf::actor_system_config cfg;
      configure(cfg);
      cfg.set("scheduler.max-threads", 1);
      caf::actor_system system{cfg};
      return median(pingPong<int64_t>(system, system.spawn(echo), caf::make_message(int64_t(8)),
                                      o.iterations / 10, o.iterations));
    }, "us");
    // The same two actors both run on one node's loop, as the remote rows
    // "on loop" run them at each end (Node::runOnLoop).
    add("CAF request/reply in one process, on a node's loop, 8 B", [&] {
      caf::actor_system_config cfg;
      remote::configure(cfg);
      configure(cfg);
      caf::actor_system system{cfg};
      remote::Node node(system, nodeOptions(false));
      auto hosted = system.spawn(echo);
      node.runOnLoop(hosted);
      double us = median(pingPong<int64_t>(system, hosted, caf::make_message(int64_t(8)),
                                           o.iterations / 10, o.iterations, &node));
      caf::anon_send_exit(hosted, caf::exit_reason::user_shutdown);
      return us;
    }, "us");

    for (bool shm : {false, true}) {
      std::string name = shm ? "shm" : "tcp";
      Child server = serveNode(shm);
      std::string url = server.line;
      caf::actor_system_config cfg;
      remote::configure(cfg);
      configure(cfg);
      caf::actor_system system{cfg};
      {
        remote::Node node(system, nodeOptions(shm));
        {
          auto target = node.remoteActor(url, "echo");
          if (!target) {
            std::fprintf(stderr, "remote actor over %s: %s\n", name.c_str(),
                         system.render(target.error()).c_str());
            return 1;
          }
          add("remote actor request/reply, 8 B, " + name, [&] {
            return median(pingPong<int64_t>(system, *target, caf::make_message(int64_t(8)),
                                            o.iterations / 10, o.iterations));
          }, "us");
          auto onLoop = node.remoteActor(url, "echo-on-loop");
          if (!onLoop) return 1;
          add("remote actor request/reply, 8 B, " + name + ", on loop", [&] {
            return median(pingPong<int64_t>(system, *onLoop, caf::make_message(int64_t(8)),
                                            o.iterations / 10, o.iterations, &node));
          }, "us");
          auto client = remote::Client::connect(node, url, "echo");
          if (!client) return 1;
          add("client/server round trip, int64, nodes, " + name, [&] {
            caf::message m;
            return perCall(o.iterations, [&] {
              (*client)->send(caf::make_message(int64_t(8)));
              (*client)->receive(m);
            });
          }, "us");
          if (name == "shm") {
            add("remote actor request/reply, 32 B tensor, shm", [&] {
              return median(pingPong<Tensor>(system, *target,
                                             caf::make_message(Tensor::zeros({32}, DType::kUint8)),
                                             o.iterations / 10, o.iterations));
            }, "us");
            add("remote actor one-way, int32, shm", [&] { return oneWay(system, *target, o.messages) / 1e6; },
                "M msgs/s");
            add("remote actor one-way, int32, shm, on loop", [&] { return oneWay(system, *onLoop, o.messages) / 1e6; }, "M msgs/s");
            auto sink = remote::RemoteChannel<int64_t>::open(node, url, "sink");
            auto source = remote::RemoteChannel<int64_t>::open(node, url, "source");
            if (!sink || !source) {
              std::fprintf(stderr, "remote channels: %s\n",
                           system.render(sink ? source.error() : sink.error()).c_str());
              return 1;
            }
            add("remote channel write, int64, shm", [&] { return perCall(o.iterations, [&] { sink->write(int64_t(8)); }); }, "us");
            add("remote channel read, int64, shm", [&] { return perCall(o.iterations, [&] { source->read(); }); }, "us");
            add("remote actor 64 MiB tensor echo, shm", [&] {
              Tensor t = Tensor::zeros({int64_t(kBig)}, DType::kUint8);
              double us = median(pingPong<Tensor>(system, *target, caf::make_message(t), 2,
                                                  o.tensorIterations));
              return us > 0 ? kBig / (us / 2) / 1e3 : 0;
            }, "GB/s");
          }
        }
      }
      stop(server);
    }
    {
      Child server = serveMiddleman();
      caf::actor_system_config cfg;
      configure(cfg);
      cfg.load<caf::io::middleman>();
      caf::actor_system system{cfg};
      auto target = system.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(std::stoi(server.line)));
      if (!target) {
        std::fprintf(stderr, "CAF middleman: %s\n", system.render(target.error()).c_str());
        return 1;
      }
      add("CAF middleman request/reply, 8 B, tcp", [&] {
        return median(pingPong<int64_t>(system, *target, caf::make_message(int64_t(8)),
                                        o.iterations / 10, o.iterations));
      }, "us");
      add("CAF middleman one-way, int32, tcp", [&] { return oneWay(system, *target, o.messages) / 1e6; },
          "M msgs/s");
      stop(server);
    }
  }
  auto med = [&](const std::string& name) { return median(rows[name].values); };
  if (o.json) std::printf("{\n");
  bool first = true;
  for (auto& [name, row] : rows) {
    if (o.json) {
      std::printf("%s  \"%s\": {\"median\": %.3f, \"unit\": \"%s\"}", first ? "" : ",\n",
                  name.c_str(), median(row.values), row.unit.c_str());
    } else {
      std::printf("%-52s %10.2f %-9s (", name.c_str(), median(row.values), row.unit.c_str());
      for (size_t i = 0; i < row.values.size(); ++i) std::printf("%s%.2f", i ? " " : "", row.values[i]);
      std::printf(")\n");
    }
    first = false;
  }
  if (o.json) {
    std::printf("\n}\n");
    return 0;
  }
  if (!o.only.empty()) return 0;  // the ratios need every row
  std::printf("\nratios (medians of %d rounds)\n", o.rounds);
  std::printf("  codec, compact / CAF's form: encode %.2f, decode %.2f\n",
              med("codec encode, int64, compact") / med("codec encode, int64, CAF's form"),
              med("codec decode, int64, compact") / med("codec decode, int64, CAF's form"));
  std::printf("  remote request/reply tcp / pipe round trip tcp:   %.2f\n",
              med("remote actor request/reply, 8 B, tcp") / med("pipe round trip, 8 B, tcp"));
  std::printf("  remote request/reply shm / pipe round trip shm:   %.2f\n",
              med("remote actor request/reply, 8 B, shm") / med("pipe round trip, 8 B, shm"));
  std::printf("  on loop: request/reply tcp / pipe round trip tcp: %.2f\n",
              med("remote actor request/reply, 8 B, tcp, on loop") / med("pipe round trip, 8 B, tcp"));
  std::printf("  on loop: request/reply shm / pipe round trip shm: %.2f\n",
              med("remote actor request/reply, 8 B, shm, on loop") / med("pipe round trip, 8 B, shm"));
  std::printf("  (pipe shm + CAF's own request/reply) / pipe shm: %.2f (one thread), %.2f (on a loop)\n",
              (med("pipe round trip, 8 B, shm") + med("CAF request/reply in one process, one thread, 8 B")) /
                  med("pipe round trip, 8 B, shm"),
              (med("pipe round trip, 8 B, shm") +
               med("CAF request/reply in one process, on a node's loop, 8 B")) /
                  med("pipe round trip, 8 B, shm"));
  std::printf("  CAF middleman / remote request/reply tcp:         %.1f x slower\n",
              med("CAF middleman request/reply, 8 B, tcp") / med("remote actor request/reply, 8 B, tcp"));
  std::printf("  CAF middleman / remote request/reply tcp, on loop: %.1f x slower\n",
              med("CAF middleman request/reply, 8 B, tcp") /
                  med("remote actor request/reply, 8 B, tcp, on loop"));
  std::printf("  remote one-way shm / CAF middleman one-way:       %.1f x\n",
              med("remote actor one-way, int32, shm") / med("CAF middleman one-way, int32, tcp"));
  std::printf("  remote one-way shm, on loop / CAF middleman:      %.1f x\n",
              med("remote actor one-way, int32, shm, on loop") /
                  med("CAF middleman one-way, int32, tcp"));
  std::printf("  remote 64 MiB echo / pipe 64 MiB echo:            %.2f\n",
              med("remote actor 64 MiB tensor echo, shm") /
                  med("pipe 64 MiB tensor echo, shm + basic"));
  std::printf("  client/server tcp / remote request/reply tcp:    %.2f\n",
              med("client/server round trip, int64, nodes, tcp") /
                  med("remote actor request/reply, 8 B, tcp"));
  std::printf("  remote channel write shm / request/reply shm:     %.2f\n",
              med("remote channel write, int64, shm") / med("remote actor request/reply, 8 B, shm"));
  return 0;
}
