// Two nodes in two network namespaces joined by a veth pair (root only;
// skipped with a message otherwise): a request with a tensor crosses, then
// the link is cut (veth down) and the client's node notices within the
// heartbeat bound, failing its monitors with kNodeLost.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "../support/harness.h"
#include "remote_support.h"

using namespace remote_test;
using testing::Child;

namespace {

bool enter(const std::string& ns) {
  int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  return fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
}

} // namespace

TEST_CASE("nodes in two network namespaces: a tensor crosses, a cut link is noticed") {
  if (::geteuid() != 0 || std::system("ip netns list >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: needs root and iproute2 to make network namespaces");
    return;
  }
  std::string id = std::to_string(::getpid() % 100000);
  std::string a = "rnA" + id, b = "rnB" + id, va = "rva" + id, vb = "rvb" + id;
  std::string setup = "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
                      " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
                      " && ip link set " + vb + " netns " + b + " && ip -n " + a +
                      " addr add 169.254.78.1/30 dev " + va + " && ip -n " + b +
                      " addr add 169.254.78.2/30 dev " + vb + " && ip -n " + a + " link set " +
                      va + " up && ip -n " + b + " link set " + vb + " up && ip -n " + a +
                      " link set lo up && ip -n " + b + " link set lo up";
  int rc = std::system(setup.c_str());
  struct Cleanup {
    std::string a, b;
    ~Cleanup() {
      (void)!std::system(("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null").c_str());
    }
  } cleanup{a, b};
  if (rc != 0) {
    MESSAGE("skipped: could not set up network namespaces here");
    return;
  }

  Child server = Child::spawn(
      [&](Child& self) {
        CHILD_CHECK(enter(a));
        NodeOptions options = TestNode::quick();
        options.listen = {"tcp://169.254.78.1:0"};
        TestNode node(options);
        publishAll(node);
        self.send(node.node().url("tcp") + " " + node.node().id());
        ::pause();
        return 0;
      },
      std::chrono::seconds(60));
  std::string line = server.receive();
  REQUIRE(!line.empty());
  std::string url = line.substr(0, line.find(' '));
  std::string serverId = line.substr(line.find(' ') + 1);

  Child client = Child::spawn(
      [&](Child& self) {
        CHILD_CHECK(enter(b));
        NodeOptions options = TestNode::quick();  // lost after kQuickTimeout of silence
        options.listen = {"tcp://169.254.78.2:0"};
        TestNode node(options);
        auto summer = node.node().remoteActor(url, "summer");
        CHILD_CHECK(summer);
        CHILD_CHECK(node.node().id() != serverId);  // another namespace, another node
        caf::scoped_actor self_{node.system()};
        double sum = -1;
        self_->request(*summer, 10s, Tensor::full<float>({1000}, 2.0f))
            .receive([&](double s, const Tensor&) { sum = s; }, [&](caf::error&) {});
        CHILD_CHECK(sum == 2000.0);
        self_->monitor(*summer);
        self.send("crossed");
        caf::error reason;
        self_->receive([&](caf::down_msg& msg) { reason = msg.reason; }, caf::after(20s) >> [] {});
        CHILD_CHECK(actorpipe::remote::isError(reason, RemoteError::kNodeLost));
        self.send("lost");
        return 0;
      },
      std::chrono::seconds(60));
  REQUIRE(client.receive() == "crossed");
  auto cut = std::chrono::steady_clock::now();
  REQUIRE(std::system(("ip -n " + a + " link set " + va + " down").c_str()) == 0);
  CHECK(client.receive(std::chrono::seconds(10)) == "lost");
  auto noticed = std::chrono::steady_clock::now() - cut;
  CHECK(noticed < TestNode::kQuickTimeout + 2400ms);
  MESSAGE("link cut noticed after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(noticed).count()
          << " ms (heartbeat timeout " << TestNode::kQuickTimeout.count() << " ms)");
  CHECK(client.wait() == 0);
  server.kill(SIGKILL);
  server.wait();
}
