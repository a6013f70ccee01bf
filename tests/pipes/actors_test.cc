// The actor side of pipes: a user's own actor system, the typed pipe
// interface driven by requests, and supervision of transports and channels.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <actorpipe/actors/pipe_actor.h>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;

TEST_CASE("a user's actor drives a pipe by requests, in the user's actor system") {
  caf::actor_system_config config;
  caf::actor_system system{config};
  {
    auto server = makeContext("server", ContextOptions().actorSystem(system));
    auto client = makeContext("client", ContextOptions().actorSystem(system));
    auto listener = server->listen({"tcp://127.0.0.1:0"});
    auto pipe = client->connect(listener->url("tcp"));
    auto accepted = acceptSync(*listener);
    REQUIRE(accepted != nullptr);

    auto payload = pattern(5000, 11);
    std::vector<uint8_t> received(payload.size());
    caf::scoped_actor self{system};
    Message m;
    m.metadata = "by request";
    m.payloads.push_back({payload.data(), payload.size(), ""});
    bool wrote = false;
    self->request(asActor(pipe), std::chrono::seconds(10), write_atom::value, m)
        .receive([&](ok_atom) { wrote = true; },
                 [&](caf::error& e) { FAIL("write failed: " << system.render(e)); });
    CHECK(wrote);

    Descriptor descriptor;
    self->request(asActor(accepted), std::chrono::seconds(10), read_descriptor_atom::value)
        .receive([&](Descriptor& d) { descriptor = d; },
                 [&](caf::error& e) { FAIL("readDescriptor failed: " << system.render(e)); });
    CHECK(descriptor.metadata == "by request");
    REQUIRE(descriptor.payloads.size() == 1);
    Allocation allocation;
    allocation.payloads.push_back({received.data()});
    bool read = false;
    self->request(asActor(accepted), std::chrono::seconds(10), read_atom::value, allocation)
        .receive([&](ok_atom) { read = true; },
                 [&](caf::error& e) { FAIL("read failed: " << system.render(e)); });
    CHECK(read);
    CHECK(received == payload);

    // Errors come back as caf::error carrying our message.
    std::string reason;
    self->request(asActor(accepted), std::chrono::seconds(10), read_atom::value, Allocation())
        .receive([&](ok_atom) { FAIL("read without a descriptor succeeded"); },
                 [&](caf::error& e) { reason = system.render(e); });
    CHECK(reason.find("no descriptor waiting") != std::string::npos);
  }
  // Every actor of the contexts is gone: the system shuts down without waiting.
}

TEST_CASE("an event-based actor reads from a pipe without blocking") {
  auto server = makeContext("server");
  auto client = makeContext("client");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  caf::actor_system_config config;
  caf::actor_system system{config};
  std::promise<std::string> result;
  auto reader = system.spawn([&result, p = asActor(accepted)](caf::event_based_actor* self) {
    self->request(p, std::chrono::seconds(10), read_descriptor_atom::value)
        .then([&result, self, p](Descriptor& d) {
          auto storage = std::make_shared<std::vector<uint8_t>>(d.tensors.at(0).length);
          Allocation a;
          a.tensors.push_back({CpuBuffer{storage->data()}});
          self->request(p, std::chrono::seconds(10), read_atom::value, a)
              .then([&result, storage](ok_atom) {
                result.set_value(std::string(storage->begin(), storage->end()));
              });
        });
  });
  std::string text = "tensor bytes, read by an actor";
  Message m;
  m.tensors.push_back({CpuBuffer{text.data()}, text.size(), nullopt, ""});
  REQUIRE(!writeSync(*pipe, m));
  auto f = result.get_future();
  REQUIRE(ready(f, std::chrono::seconds(10)));
  CHECK(f.get() == text);
  caf::anon_send_exit(reader, caf::exit_reason::user_shutdown);
}

TEST_CASE("a transport whose actor dies fails its pipes; the context stays usable") {
  auto makeTwo = [](const std::string& name) {
    auto context = std::make_shared<Context>(ContextOptions().name(name));
    context->registerTransport(0, "tcp", transport::uv::create());
    context->registerTransport(0, "tcp2", transport::uv::create());
    context->registerChannel(0, "basic", channel::basic::create());
    return context;
  };
  auto server = makeTwo("server");
  auto client = makeTwo("client");
  // One listener per transport: a listener on both would move pipes to the
  // transport it prefers.
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto listener2 = server->listen({"tcp2://127.0.0.1:0"});
  auto doomed = client->connect(listener2->url("tcp2"));
  auto doomedPeer = acceptSync(*listener2);
  auto healthy = client->connect(listener->url("tcp"));
  auto healthyPeer = acceptSync(*listener);
  REQUIRE(doomedPeer != nullptr);
  REQUIRE(healthyPeer != nullptr);
  REQUIRE(!writeSync(*doomed, Message()));
  REQUIRE(!readSync(*doomedPeer).error);

  std::promise<Error> pending;
  doomed->readDescriptor([&](const Error& e, Descriptor) { pending.set_value(e); });
  caf::anon_send_exit(TransportActor(*client, "tcp2"), caf::exit_reason::kill);
  auto f = pending.get_future();
  REQUIRE(ready(f, std::chrono::seconds(10)));
  Error e = f.get();
  CHECK(e.isOfType<BackendDownError>());
  CHECK(e.what().find("tcp2") != std::string::npos);

  // The other transport carries on, and the dead one is refused clearly.
  Storage s;
  s.payloads.push_back(pattern(1000, 5));
  REQUIRE(!writeSync(*healthy, messageOver(s, "still here")));
  Received r = readSync(*healthyPeer);
  REQUIRE(!r.error);
  CHECK(r.storage.payloads[0] == s.payloads[0]);
  Error refused;
  // The supervisor hears of the death asynchronously: try until it has, with
  // a deadline (not a count of tries) that only fails a test that would hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto again = client->connect(listener2->url("tcp2"));
    refused = writeSync(*again, Message());
    if (refused.isOfType<BackendDownError>() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(refused.isOfType<BackendDownError>());
}

TEST_CASE("a channel whose actor dies fails the pipes that use it") {
  auto server = makeContext("server");
  auto client = makeContext("client");
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  REQUIRE(!writeSync(*pipe, Message()));  // the handshake is done
  REQUIRE(!readSync(*accepted).error);
  std::promise<Error> pending;
  pipe->readDescriptor([&](const Error& e, Descriptor) { pending.set_value(e); });
  caf::anon_send_exit(ChannelActor(*client, "basic"), caf::exit_reason::kill);
  auto f = pending.get_future();
  REQUIRE(ready(f, std::chrono::seconds(10)));
  Error e = f.get();
  CHECK(e.isOfType<BackendDownError>());
}

namespace {
// A channel that counts the times it is closed (the rest is basic's).
class CountingChannel final : public channel::Context {
 public:
  std::shared_ptr<channel::Context> inner = channel::basic::create();
  std::atomic<int> closes{0};
  const std::vector<std::string>& deviceTypes() const override { return inner->deviceTypes(); }
  bool isViable() const override { return inner->isViable(); }
  const std::string& domainDescriptor() const override { return inner->domainDescriptor(); }
  void setId(std::string id) override { inner->setId(std::move(id)); }
  void close() override {
    ++closes;
    inner->close();
  }
  void join() override { inner->join(); }
  bool sendsInline() const override { return inner->sendsInline(); }
};
}  // namespace

TEST_CASE("a channel's actor owns its channel: however the actor ends, the channel is closed") {
  auto context = std::make_shared<Context>(ContextOptions().name("owner"));
  auto killed = std::make_shared<CountingChannel>();
  auto kept = std::make_shared<CountingChannel>();
  context->registerChannel(0, "killed", killed);
  context->registerChannel(1, "kept", kept);
  caf::anon_send_exit(ChannelActor(*context, "killed"), caf::exit_reason::kill);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (killed->closes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling step of a deadline loop
  }
  CHECK(killed->closes >= 1);
  CHECK(kept->closes == 0);
  context->join();  // stops "kept"'s actor, which closes it
  CHECK(kept->closes >= 1);
}

TEST_CASE("peers with different priorities agree; no common channel is a clear error") {
  auto server = std::make_shared<Context>(ContextOptions().name("server"));
  server->registerTransport(5, "tcp", transport::uv::create());
  server->registerChannel(1, "basic", channel::basic::create());
  server->registerChannel(7, "basic-too", channel::basic::create());
  auto client = std::make_shared<Context>(ContextOptions().name("client"));
  client->registerTransport(-3, "tcp", transport::uv::create());
  client->registerChannel(100, "basic", channel::basic::create());
  client->registerChannel(2, "basic-too", channel::basic::create());
  auto listener = server->listen({"tcp://127.0.0.1:0"});
  auto pipe = client->connect(listener->url("tcp"));
  auto accepted = acceptSync(*listener);
  REQUIRE(accepted != nullptr);
  CHECK(accepted->getRemoteName() == "client");
  Storage s;
  s.tensors.push_back(pattern(300, 1));
  REQUIRE(!writeSync(*pipe, messageOver(s, "agreed")));
  Received r = readSync(*accepted);
  REQUIRE(!r.error);
  CHECK(r.storage.tensors[0] == s.tensors[0]);

  auto stranger = std::make_shared<Context>(ContextOptions().name("stranger"));
  stranger->registerTransport(0, "tcp", transport::uv::create());
  stranger->registerChannel(0, "something-else", channel::basic::create());
  auto lonely = stranger->connect(listener->url("tcp"));
  Error e = writeSync(*lonely, Message());
  CHECK(e.isOfType<NegotiationError>());
  CHECK(e.what().find("no common channel") != std::string::npos);
}

TEST_CASE("registering a name twice is refused at the call") {
  auto context = makeContext();
  CHECK_THROWS_AS(context->registerTransport(0, "tcp", transport::uv::create()), std::invalid_argument);
  CHECK_THROWS_AS(context->registerChannel(0, "basic", channel::basic::create()), std::invalid_argument);
}
