// torch-ipc's client/server on nodes (actors/remote/client_server.h):
// Tensors and plain values both ways, order and fairness, backpressure, a
// server that starts late, strangers, a killed client, closes, and peers
// that are not clients.
#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

#include "../support/harness.h"
#include "attacker.h"
#include "remote_support.h"

#include <actorpipe/actors/remote/client_server.h>

using namespace remote_test;
using actorpipe::remote::Client;
using actorpipe::remote::ClientServerOptions;
using actorpipe::remote::kForever;
using actorpipe::remote::Server;
using actorpipe::remote::Timeout;
using testing::Child;

namespace {

NodeOptions withSecret() {
  NodeOptions options = TestNode::quick();
  options.secret = "the job's secret";
  return options;
}

std::unique_ptr<Server> serve(TestNode& node, const std::string& name,
                              ClientServerOptions options = {}) {
  auto server = Server::create(node.node(), name, options);
  REQUIRE(server);
  return std::move(*server);
}

std::unique_ptr<Client> connect(TestNode& node, TestNode& at, const std::string& name,
                                const std::string& transport = "tcp") {
  auto client = Client::connect(node.node(), at.node().url(transport), name);
  REQUIRE_MESSAGE(client, node.system().render(client.error()));
  return std::move(*client);
}

// A hand-made client: `raw`'s hello to `server` names itself as the agent.
// Its client id, or -1.
int rawHello(caf::scoped_actor& raw, const caf::actor& server) {
  int id = -1;
  raw->request(server, 10s, caf::atom("cshello"), caf::actor_cast<caf::actor>(raw))
      .receive([&](int32_t given) { id = given; }, [](caf::error&) {});
  return id;
}

// A server whose queue for its one client holds one message, and holds it.
struct FullQueue {
  FullQueue() {
    ClientServerOptions one;
    one.queueMessages = 1;
    server = serve(host, "full", one);
    client = connect(node, host, "full");
    REQUIRE(!client->send(caf::make_message(int32_t(0))));
  }
  TestNode host, node;
  std::unique_ptr<Server> server;
  std::unique_ptr<Client> client;
};

}  // namespace

TEST_CASE("client/server: tensors and plain values both ways, between nodes with a secret") {
  TestNode host(withSecret()), first(withSecret()), second(withSecret());
  auto server = serve(host, "params");
  auto a = connect(first, host, "params", "shm");
  auto b = connect(second, host, "params", "tcp");
  REQUIRE(!server->waitForClients(2, 10s));
  CHECK(server->clients() == std::vector<int>{a->id(), b->id()});
  CHECK(a->id() != b->id());

  Tensor grads = Tensor::full<float>({3, 4}, 1.5f);
  REQUIRE(!a->send(caf::make_message(grads, std::string("grads"), int32_t(7))));
  REQUIRE(!b->send(caf::make_message(Tensor::full<int64_t>({5}, int64_t(-2)),
                                     std::vector<int32_t>{1, 2, 3}, 2.5)));
  for (int k = 0; k < 2; ++k) {
    int from = -1;
    caf::message m;
    REQUIRE(!server->receiveAny(from, m, 10s));
    if (from == a->id()) {
      REQUIRE(m.match_elements<Tensor, std::string, int32_t>());
      const auto& t = m.get_as<Tensor>(0);
      CHECK(t.dtype() == DType::kFloat32);
      CHECK(t.shape() == std::vector<int64_t>{3, 4});
      CHECK(sumOf(t) == 18.0);
      CHECK(m.get_as<std::string>(1) == "grads");
      CHECK(m.get_as<int32_t>(2) == 7);
    } else {
      REQUIRE(from == b->id());
      REQUIRE(m.match_elements<Tensor, std::vector<int32_t>, double>());
      CHECK(sumOf(m.get_as<Tensor>(0)) == -10.0);
      CHECK(m.get_as<std::vector<int32_t>>(1) == std::vector<int32_t>{1, 2, 3});
      CHECK(m.get_as<double>(2) == 2.5);
    }
  }
  REQUIRE(!server->send(a->id(), caf::make_message(Tensor::full<double>({1000}, 0.25),
                                                   std::string("weights"))));
  caf::message m;
  REQUIRE(!a->receive(m, 10s));
  REQUIRE(m.match_elements<Tensor, std::string>());
  CHECK(sumOf(m.get_as<Tensor>(0)) == 250.0);
  REQUIRE(!server->broadcast(caf::make_message(std::string("stop"), int64_t(3))));
  for (auto* c : {a.get(), b.get()}) {
    REQUIRE(!c->receive(m, 10s));
    REQUIRE(m.match_elements<std::string, int64_t>());
    CHECK(m.get_as<std::string>(0) == "stop");
  }
  // Nothing more is there: a receive with a timeout says so.
  auto none = a->receive(m, 50ms);
  CHECK(none == caf::sec::request_timeout);
}

TEST_CASE("client/server: each client's order is kept, and receiveAny takes clients in turn") {
  TestNode host, first, second;
  auto server = serve(host, "q");
  auto a = connect(first, host, "q");
  auto b = connect(second, host, "q");
  constexpr int kEach = 50;
  std::thread ta([&] { for (int i = 0; i < kEach; ++i) CHECK(!a->send(caf::make_message(int32_t(i)))); });
  std::thread tb([&] { for (int i = 0; i < kEach; ++i) CHECK(!b->send(caf::make_message(int32_t(i)))); });
  ta.join();  // every message is queued at the server when send returns
  tb.join();
  std::map<int, int32_t> next{{a->id(), 0}, {b->id(), 0}};
  int previous = -1;
  for (int k = 0; k < 2 * kEach; ++k) {
    int from = -1;
    caf::message m;
    REQUIRE(!server->receiveAny(from, m, 10s));
    REQUIRE(m.match_elements<int32_t>());
    CHECK(m.get_as<int32_t>(0) == next[from]++);
    CHECK(from != previous);  // both have messages waiting: strictly in turn
    previous = from;
  }
  CHECK(next[a->id()] == kEach);
  CHECK(next[b->id()] == kEach);
}

TEST_CASE("client/server: a sender past the receiver's queue waits until it takes one") {
  TestNode host, node;
  ClientServerOptions small;
  small.queueMessages = 4;
  auto server = serve(host, "slow", small);
  auto client = connect(node, host, "slow");
  std::atomic<int> sent{0};
  std::thread sender([&] {
    for (int i = 0; i < 20; ++i) {
      CHECK(!client->send(caf::make_message(int32_t(i))));
      ++sent;
    }
  });
  for (int i = 0; i < 2000 && sent.load() < 4; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(200ms);
  CHECK(sent.load() == 4);  // the fifth waits for room
  caf::message m;
  for (int i = 0; i < 20; ++i) {
    REQUIRE(!server->receive(client->id(), m, 10s));
    CHECK(m.get_as<int32_t>(0) == i);
  }
  sender.join();
  CHECK(sent.load() == 20);
}

TEST_CASE("client/server: a client's send that times out says so; later sends and receives work") {
  FullQueue full;
  auto& server = full.server;
  auto& client = full.client;
  for (int32_t i = 1; i <= 3; ++i) {
    auto began = std::chrono::steady_clock::now();
    auto error = client->send(caf::make_message(i), 100ms);
    auto took = std::chrono::steady_clock::now() - began;
    CHECK(error == caf::sec::request_timeout);
    CHECK(took >= 90ms);
    CHECK(took < 5s);
  }
  // The timed-out ones still arrive (they were parked at the server), in
  // order, and before a send without a timeout made after them (another of
  // the client's actors makes that one); their late answers go nowhere.
  caf::error untimed = caf::make_error(caf::sec::invalid_argument);
  std::thread sender([&] { untimed = client->send(caf::make_message(int32_t(4))); });
  caf::message m;
  for (int32_t i = 0; i <= 4; ++i) {
    REQUIRE(!server->receive(client->id(), m, 10s));
    CHECK(m.get_as<int32_t>(0) == i);
  }
  sender.join();
  CHECK(!untimed);
  REQUIRE(!client->send(caf::make_message(int32_t(5)), 10s));
  REQUIRE(!server->receive(client->id(), m, 10s));
  CHECK(m.get_as<int32_t>(0) == 5);
  REQUIRE(!server->send(client->id(), caf::make_message(std::string("back")), 10s));
  REQUIRE(!client->receive(m, 10s));
  CHECK(m.get_as<std::string>(0) == "back");
}

TEST_CASE("client/server: closing a client ends its send that waits for room, at once") {
  // Both kinds: without a timeout (the calling thread's actor asks) and
  // with one (the client's agent asks, and ends with the close).
  for (Timeout timeout : {kForever, Timeout(30s)}) {
    CAPTURE(timeout.count());
    FullQueue full;
    auto& client = full.client;
    caf::error waited;
    std::atomic<bool> returned{false};
    std::thread sender([&] {
      waited = client->send(caf::make_message(int32_t(1)), timeout);  // waits for room
      returned = true;
    });
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(returned.load());
    auto began = std::chrono::steady_clock::now();
    client->close();
    sender.join();
    CHECK(std::chrono::steady_clock::now() - began < 5s);
    CHECK(actorpipe::remote::isError(waited, RemoteError::kClosed));
  }
}

TEST_CASE("client/server: a client waits for a server that starts late; a stranger is refused") {
  TestNode host(withSecret()), node(withSecret());
  std::string url = host.node().url("tcp");
  caf::expected<std::unique_ptr<Client>> early = caf::make_error(caf::sec::invalid_argument);
  std::thread connecting([&] { early = Client::connect(node.node(), url, "late", 10s); });
  std::this_thread::sleep_for(200ms);
  auto server = serve(host, "late");
  connecting.join();
  REQUIRE_MESSAGE(early, node.system().render(early.error()));
  REQUIRE(!server->waitForClients(1, 10s));

  NodeOptions wrong = TestNode::quick();
  wrong.secret = "a guess";
  TestNode stranger(wrong);
  auto refused = Client::connect(stranger.node(), url, "late", 300ms);
  REQUIRE(!refused);
  CHECK(actorpipe::remote::isError(refused.error(), RemoteError::kNodeLost));
  CHECK(server->clients().size() == 1);
}

TEST_CASE("client/server: a killed client's process: its messages are taken, then its loss, once") {
  // Forked before this process starts threads (UrlPipe): sends two
  // messages, says so, and waits to be killed.
  UrlPipe url;
  Child child = Child::spawn(
      [&url](Child& self) {
        TestNode node;
        auto client = Client::connect(node.node(), url.receive(), "s");
        CHILD_CHECK(client);
        CHILD_CHECK(!(*client)->send(caf::make_message(int32_t(1))));
        CHILD_CHECK(!(*client)->send(caf::make_message(int32_t(2))));
        self.send("sent " + std::to_string((*client)->id()));
        std::this_thread::sleep_for(60s);
        return 0;
      },
      std::chrono::seconds(60));
  url.forked();
  TestNode host, local;
  auto server = serve(host, "s");
  REQUIRE(url.send(host.node().url("tcp")));
  std::string said = child.receive();
  REQUIRE(said.rfind("sent ", 0) == 0);
  int killedId = std::stoi(said.substr(5));
  auto survivor = connect(local, host, "s");
  child.kill(SIGKILL);
  child.wait();
  REQUIRE(!survivor->send(caf::make_message(int32_t(100))));
  std::vector<int32_t> fromKilled;
  bool lossTold = false, survivorHeard = false;
  for (int k = 0; k < 4; ++k) {
    int from = -1;
    caf::message m;
    auto error = server->receiveAny(from, m, 10s);
    if (error) {
      CAPTURE(host.system().render(error));
      CHECK(from == killedId);
      CHECK(actorpipe::remote::isError(error, RemoteError::kNodeLost));
      CHECK(host.system().render(error).find("client " + std::to_string(killedId)) != std::string::npos);
      CHECK(fromKilled.size() == 2);  // what it sent came first
      CHECK(!lossTold);
      lossTold = true;
    } else if (from == killedId) {
      fromKilled.push_back(m.get_as<int32_t>(0));
    } else {
      CHECK(m.get_as<int32_t>(0) == 100);
      survivorHeard = true;
    }
  }
  CHECK(fromKilled == std::vector<int32_t>{1, 2});
  CHECK(lossTold);
  CHECK(survivorHeard);
  CHECK(server->clients() == std::vector<int>{survivor->id()});
  // Told once: it is no client any more.
  caf::message m;
  CHECK(server->receive(killedId, m, 50ms) == caf::sec::invalid_argument);
}

TEST_CASE("client/server: closes are told to the other side as kClosed") {
  TestNode host, node;
  auto server = serve(host, "c");
  auto client = connect(node, host, "c");
  auto other = connect(node, host, "c");
  int id = client->id();
  client->close();
  caf::message m;
  auto error = server->receive(id, m, 10s);
  CAPTURE(host.system().render(error));
  CHECK(actorpipe::remote::isError(error, RemoteError::kClosed));
  CHECK(client->send(caf::make_message(int32_t(1))));  // closed here too

  server->close();
  error = other->receive(m, 10s);
  CAPTURE(node.system().render(error));
  CHECK(actorpipe::remote::isError(error, RemoteError::kClosed));
  CHECK(other->send(caf::make_message(int32_t(1))));
  CHECK(!Client::connect(node.node(), host.node().url("tcp"), "c", 200ms));
}

TEST_CASE("client/server: only clients are heard, and one node's clients are bounded") {
  TestNode host, node;
  ClientServerOptions few;
  few.maxClientsPerNode = 2;
  auto server = serve(host, "b", few);
  auto one = connect(node, host, "b");
  auto two = connect(node, host, "b");
  auto three = Client::connect(node.node(), host.node().url("tcp"), "b", 10s);  // refused at once; the bound is for a slow hello
  REQUIRE(!three);
  CHECK(node.system().render(three.error()).find("maxClientsPerNode") != std::string::npos);

  // A peer that skips the hello: refused, nothing queued.
  auto actor = node.node().remoteActor(host.node().url("tcp"), "clientserver:b");
  REQUIRE(actor);
  caf::scoped_actor self{node.system()};
  caf::error refused;
  self->request(*actor, 10s, caf::atom("csmsg"), caf::make_message(int32_t(666)))
      .receive([](bool) {}, [&](caf::error& e) { refused = std::move(e); });
  CAPTURE(node.system().render(refused));
  CHECK(node.system().render(refused).find("not a client") != std::string::npos);
  int from = -1;
  caf::message m;
  CHECK(server->receiveAny(from, m, 100ms) == caf::sec::request_timeout);
  // The clients it has still work.
  REQUIRE(!two->send(caf::make_message(int32_t(2))));
  REQUIRE(!server->receiveAny(from, m, 10s));
  CHECK(from == two->id());
}

TEST_CASE("client/server: a hello naming another client's agent or sender as its agent is refused") {
  // A client's sends are heard from its sender and from its agent: a
  // second hello naming either would make one client's sends count as
  // another's.
  TestNode host, node;
  auto server = serve(host, "a");
  auto actor = node.node().remoteActor(host.node().url("tcp"), "clientserver:a");
  REQUIRE(actor);
  auto agent = node.own(node.system().spawn([]() -> caf::behavior { return {[](int32_t) {}}; }));
  caf::scoped_actor first{node.system()}, second{node.system()};
  auto hello = [&](caf::scoped_actor& from, const caf::actor& naming) {
    caf::error refused;
    int id = -1;
    from->request(*actor, 10s, caf::atom("cshello"), naming)
        .receive([&](int32_t given) { id = given; }, [&](caf::error& e) { refused = std::move(e); });
    return std::make_pair(id, node.system().render(refused));
  };
  CHECK(hello(first, agent).first >= 0);
  auto again = hello(second, agent);
  CHECK(again.first == -1);
  CHECK(again.second.find("another client's") != std::string::npos);
  auto sender = hello(second, caf::actor_cast<caf::actor>(first));
  CHECK(sender.first == -1);
  CHECK(sender.second.find("another client's") != std::string::npos);
  CHECK(server->clients().size() == 1);
}

TEST_CASE("client/server: a peer's sends waiting for room are bounded per client") {
  TestNode host, node;
  ClientServerOptions one;
  one.queueMessages = 1;
  auto server = serve(host, "h", one);
  // A hand-made client: its hello names itself as the agent, then it fires
  // 40 sends without waiting for their answers.
  auto actor = node.node().remoteActor(host.node().url("tcp"), "clientserver:h");
  REQUIRE(actor);
  caf::scoped_actor raw{node.system()};
  int id = rawHello(raw, *actor);
  REQUIRE(id >= 0);
  constexpr int kSends = 40, kWaiting = 16;
  for (int i = 0; i < kSends; ++i) raw->send(*actor, caf::atom("csmsg"), caf::make_message(int32_t(i)));
  int queued = 0, refused = 0;
  // One queued, kWaiting parked (no answer yet), the rest refused at once.
  for (int k = 0; k < kSends - kWaiting; ++k) {
    raw->receive([&](bool ok) { queued += ok ? 1 : 0; }, [&](caf::error&) { ++refused; },
                 caf::after(10s) >> [&] { FAIL("an answer did not come"); });
  }
  CHECK(queued == 1);
  CHECK(refused == kSends - kWaiting - 1);
  // Taking messages lets the parked ones in, in order.
  caf::message m;
  for (int i = 0; i <= kWaiting; ++i) {
    REQUIRE(!server->receive(id, m, 10s));
    CHECK(m.get_as<int32_t>(0) == i);
  }
  for (int k = 0; k < kWaiting; ++k) {
    raw->receive([&](bool ok) { queued += ok ? 1 : 0; }, [&](caf::error&) { ++refused; },
                 caf::after(10s) >> [&] { FAIL("a parked send was not answered"); });
  }
  CHECK(queued == 1 + kWaiting);
}

TEST_CASE("client/server: a client hears only actors of its server's node") {
  // A fake server hands the client's agent to an actor on the client's own
  // node, which tries to send to it; then the fake server sends itself.
  TestNode host, node;
  auto injected = std::make_shared<std::promise<std::string>>();
  auto catcher = node.system().spawn([injected](caf::event_based_actor* self) -> caf::behavior {
    return {[self, injected](caf::actor& agent) {
      self->request(agent, 10s, caf::atom("csmsg"), caf::make_message(std::string("injected")))
          .then([injected](bool) { injected->set_value("taken"); },
                [self, injected](caf::error& e) { injected->set_value(self->system().render(e)); });
    }};
  });
  REQUIRE(!node.node().publish(catcher, "catcher"));
  auto toCatcher = host.node().remoteActor(node.node().url("tcp"), "catcher");
  REQUIRE(toCatcher);
  auto sent = std::make_shared<std::promise<bool>>();
  auto fake = host.system().spawn([sent, to = *toCatcher](caf::event_based_actor* self) -> caf::behavior {
    auto agent = std::make_shared<caf::actor>();
    return {
        [self, agent, to](caf::atom_value, caf::actor& a) {
          *agent = a;
          self->send(to, a);  // the agent's handle, to another node's actor
          return int32_t(0);
        },
        [self, agent, sent](const std::string& text) {
          self->request(*agent, 10s, caf::atom("csmsg"), caf::make_message(text))
              .then([sent](bool ok) { sent->set_value(ok); }, [sent](caf::error&) { sent->set_value(false); });
        },
    };
  });
  REQUIRE(!host.node().publish(fake, "clientserver:fake"));
  auto client = connect(node, host, "fake");
  auto refused = injected->get_future();
  REQUIRE(refused.wait_for(10s) == std::future_status::ready);
  CHECK(refused.get().find("only the server's node") != std::string::npos);
  caf::anon_send(fake, std::string("genuine"));
  auto ok = sent->get_future();
  REQUIRE(ok.wait_for(10s) == std::future_status::ready);
  CHECK(ok.get());
  caf::message m;
  REQUIRE(!client->receive(m, 10s));
  CHECK(m.get_as<std::string>(0) == "genuine");
  CHECK(client->receive(m, 50ms) == caf::sec::request_timeout);
  caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(catcher, caf::exit_reason::user_shutdown);
}

TEST_CASE("client/server: a client that does not take its messages holds up only its own sends") {
  TestNode host, node;
  ClientServerOptions one;
  one.queueMessages = 1;
  auto server = serve(host, "s");
  auto slow = Client::connect(node.node(), host.node().url("tcp"), "s", 10s, one);
  REQUIRE(slow);
  auto fast = connect(node, host, "s");
  REQUIRE(!server->send((*slow)->id(), caf::make_message(int32_t(1))));  // fills its queue
  std::thread blocked([&] {
    // Waits for room until the slow client takes one (below).
    CHECK(!server->send((*slow)->id(), caf::make_message(int32_t(2))));
  });
  std::this_thread::sleep_for(50ms);
  CHECK(server->send((*slow)->id(), caf::make_message(int32_t(3)), 100ms) == caf::sec::request_timeout);
  // Meanwhile sends to the other client go through.
  for (int i = 0; i < 10; ++i) REQUIRE(!server->send(fast->id(), caf::make_message(int32_t(i)), 10s));
  caf::message m;
  for (int i = 0; i < 10; ++i) REQUIRE(!fast->receive(m, 10s));
  REQUIRE(!(*slow)->receive(m, 10s));
  CHECK(m.get_as<int32_t>(0) == 1);
  blocked.join();
}

TEST_CASE("client/server: a hello naming another node's actor as its agent is refused") {
  TestNode host, node, third;
  auto server = serve(host, "h");
  third.node().publish(third.system().spawn(summer), "summer");
  auto foreign = node.node().remoteActor(third.node().url("tcp"), "summer");  // a proxy here
  REQUIRE(foreign);
  // The host links to the third node too, so the handle reaches the
  // server (nodes do not relay) and its check is what refuses it.
  REQUIRE(host.node().remoteActor(third.node().url("tcp"), "summer"));
  auto actor = node.node().remoteActor(host.node().url("tcp"), "clientserver:h");
  REQUIRE(actor);
  caf::scoped_actor raw{node.system()};
  caf::error refused;
  raw->request(*actor, 10s, caf::atom("cshello"), *foreign)
      .receive([](int32_t) {}, [&](caf::error& e) { refused = std::move(e); });
  CHECK(node.system().render(refused).find("another node's actor") != std::string::npos);
  CHECK(server->clients().empty());
}

TEST_CASE("client/server: closing a server leaves a name published since alone") {
  TestNode host, node;
  auto old = serve(host, "r");
  // Restarted by assignment: the new one publishes before the old one closes.
  auto replacement = Server::create(host.node(), "r");
  REQUIRE(replacement);
  old = std::move(*replacement);  // the first server closes here
  auto client = connect(node, host, "r");
  REQUIRE(!old->waitForClients(1, 10s));
}

TEST_CASE("client/server: clients gone and not yet told still count against their node") {
  // Else a peer could churn clients (hello, fill the queue, leave) and make
  // the server hold any number of full queues.
  TestNode host, node;
  ClientServerOptions two;
  two.maxClientsPerNode = 2;
  auto server = serve(host, "g", two);
  for (int k = 0; k < 2; ++k) {
    auto client = connect(node, host, "g");
    REQUIRE(!client->send(caf::make_message(int32_t(k))));
  }  // both closed
  for (int i = 0; i < 2000 && !server->clients().empty(); ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(server->clients().empty());
  auto refused = Client::connect(node.node(), host.node().url("tcp"), "g", 10s);
  REQUIRE(!refused);
  CHECK(node.system().render(refused.error()).find("maxClientsPerNode") != std::string::npos);
  // Taking their messages and their losses frees the places.
  int from;
  caf::message m;
  int messages = 0, losses = 0;
  for (int k = 0; k < 4; ++k) (server->receiveAny(from, m, 10s) ? losses : messages)++;
  CHECK(messages == 2);
  CHECK(losses == 2);
  auto again = Client::connect(node.node(), host.node().url("tcp"), "g", 10s);
  CHECK(again);
}

TEST_CASE("client/server: many threads sending to one slow client all get through") {
  // The client's agent refuses a 17th send parked for room (a hostile
  // server's flood); the server's own sends to one client go one at a time,
  // so 24 threads at a queue of 1 all succeed once the client reads.
  TestNode host, node;
  ClientServerOptions one;
  one.queueMessages = 1;
  auto server = serve(host, "m");
  auto client = Client::connect(node.node(), host.node().url("tcp"), "m", 10s, one);
  REQUIRE(client);
  REQUIRE(!server->waitForClients(1, 10s));
  constexpr int kThreads = 24;
  std::atomic<int> failed{0};
  std::vector<std::thread> senders;
  for (int i = 0; i < kThreads; ++i)
    senders.emplace_back([&, i] {
      if (server->send((*client)->id(), caf::make_message(int32_t(i)))) ++failed;
    });
  std::this_thread::sleep_for(200ms);
  std::set<int32_t> seen;
  caf::message m;
  for (int i = 0; i < kThreads; ++i) {
    if ((*client)->receive(m, 10s)) break;  // a refused send never comes
    seen.insert(m.get_as<int32_t>(0));
  }
  for (auto& t : senders) t.join();
  CHECK(failed.load() == 0);
  CHECK(seen.size() == size_t(kThreads));
}

TEST_CASE("client/server: a peer with the secret that claims a client's node id cannot send as that client") {
  // Clients are known by their senders' handles, not addresses (actor id
  // and node id): before, the hand-made peer's actor of the client's id
  // was that client.
  auto patient = TestNode::quick();
  patient.heartbeatTimeout = 120s;  // the hand-made peer sends no BEATs
  TestNode host(patient), node;
  auto server = serve(host, "f");
  auto actor = node.node().remoteActor(host.node().url("tcp"), "clientserver:f");
  REQUIRE(actor);
  caf::scoped_actor raw{node.system()};
  int id = rawHello(raw, *actor);
  REQUIRE(id >= 0);
  auto context = testing::makeContext("attacker");
  auto pipe = context->connect(host.node().url("tcp"));
  uint64_t target = attackerHello(*pipe, "clientserver:f", node.system().node());
  attackerAsk(*pipe, host.system(), target, raw->id(), 1,
              caf::make_message(caf::atom("csmsg"), caf::make_message(std::string("forged"))));
  REQUIRE(attackerAnswered(*pipe, raw->id(), 1));
  raw->send(*actor, caf::atom("csmsg"), caf::make_message(std::string("genuine")));
  caf::message m;
  REQUIRE(!server->receive(id, m, 10s));
  CHECK(m.get_as<std::string>(0) == "genuine");
  pipe->close();
  context->join();
}

TEST_CASE("client/server: a peer with the secret that claims the server's node id is not heard by its client") {
  // A client hears its server's link, not whoever states its node id.
  auto patient = TestNode::quick();
  patient.heartbeatTimeout = 120s;  // the hand-made peer sends no BEATs
  TestNode host, node(patient);
  auto agentId = std::make_shared<std::atomic<uint64_t>>(0);
  auto fake = host.system().spawn([agentId]() -> caf::behavior {
    return {[agentId](caf::atom_value, caf::actor& agent) {
      *agentId = agent.id();
      return int32_t(0);
    }};
  });
  REQUIRE(!host.node().publish(fake, "clientserver:fake"));
  auto client = connect(node, host, "fake");
  REQUIRE(*agentId != 0);
  REQUIRE(!node.node().publish(node.own(node.system().spawn(summer)), "door"));
  auto context = testing::makeContext("attacker");
  auto pipe = context->connect(node.node().url("tcp"));
  attackerHello(*pipe, "door", host.system().node());
  attackerAsk(*pipe, node.system(), *agentId, 9, 1, caf::make_message(caf::atom("csmsg"), caf::make_message(std::string("forged"))));
  REQUIRE(attackerAnswered(*pipe, 9, 1));
  caf::message m;
  CHECK(client->receive(m, 50ms) == caf::sec::request_timeout);
  pipe->close();
  context->join();
  caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
}
