// Writes the fuzzers' seed corpus: real encodings of every frame, as
// actorpipe itself produces them, and typical addresses.
//   fuzz_make_corpus DIR   -> DIR/<target>/<name>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>

#include <actorpipe/runtime/detail/wire.h>

using namespace actorpipe;

namespace {

std::string root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  std::string dir = root + "/" + target;
  ::mkdir(root.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string frame(wire::FrameType type, const std::string& body) {
  return wire::encodeHeader(type, body.size()) + body;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus DIR\n");
    return 2;
  }
  root = argv[1];

  wire::Hello hello;
  hello.contextName = "client";
  hello.transports.push_back({"tcp", 0, "tcp:v1", {}, ""});
  hello.transports.push_back({"shm", 10, "shm:boot-id/netns", {}, ""});
  hello.channels.push_back({"basic", 0, "", {kCpuDeviceType}, ""});
  hello.channels.push_back({"cma", 10, "cma:host", {kCpuDeviceType}, "pid 1234"});
  hello.channels.push_back({"mpt", 5, "mpt", {kCpuDeviceType, kCudaDeviceType}, "lanes 2"});
  std::string helloBody = wire::encode(hello);
  put("hello", "typical", helloBody);
  put("hello", "empty", wire::encode(wire::Hello{}));

  wire::Welcome welcome;
  welcome.contextName = "server";
  welcome.transport = "shm";
  welcome.channels.emplace_back(kCpuDeviceType, "cma");
  welcome.setups.emplace_back("mpt", "127.0.0.1:4000,127.0.0.1:4001");
  welcome.address = "actorpipe-1234-5";
  welcome.joinToken = 0x1122334455667788ull;
  welcome.notes = {"shm: same host", "cma: same host, ptrace allowed"};
  std::string welcomeBody = wire::encode(welcome);
  put("welcome", "typical", welcomeBody);
  put("welcome", "empty", wire::encode(wire::Welcome{}));

  std::string rejectBody = wire::encode(wire::Reject{"no transport in common"});
  put("reject", "typical", rejectBody);
  std::string joinBody = wire::encode(wire::Join{42});
  put("join", "typical", joinBody);

  wire::MessageFrame m;
  m.descriptor.metadata = "step 7";
  m.descriptor.payloads.push_back({16, "p0"});
  m.descriptor.payloads.push_back({0, ""});
  Descriptor::Tensor t;
  t.length = 1 << 20;
  t.sourceDevice = Device{kCpuDeviceType, 0};
  t.metadata = "weights";
  m.descriptor.tensors.push_back(t);
  t.targetDevice = Device{kCudaDeviceType, 1};
  t.length = 4096;
  m.descriptor.tensors.push_back(t);
  m.routes.push_back({"basic", true, ""});
  m.routes.push_back({"cma", false, "pid 1234 addr 0x7f0000 len 4096"});
  std::string messageBody = wire::encode(m);
  put("message", "typical", messageBody);
  put("message", "empty", wire::encode(wire::MessageFrame{}));

  // A connection's byte stream: hello, welcome, join, message, reject.
  put("frames", "handshake", frame(wire::FrameType::kHello, helloBody) +
                                 frame(wire::FrameType::kWelcome, welcomeBody) +
                                 frame(wire::FrameType::kMessage, messageBody));
  put("frames", "join", frame(wire::FrameType::kJoin, joinBody) + frame(wire::FrameType::kMessage, messageBody));
  put("frames", "reject", frame(wire::FrameType::kReject, rejectBody));

  for (const char* url : {"tcp://127.0.0.1:80", "tcp://[::1]:4000", "tcp://0.0.0.0:0", "tcp://::1",
                          "tcp://[fe80::1%lo]:1", "shm://", "shm://actorpipe-1", "ibv://10.0.0.1:7",
                          "tcp://1.2.3.4:65535", "tcp://127.1"}) {
    std::string u = url;
    std::string name;
    for (char c : u) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    put("url", name, u);
  }
  put("shm_address", "empty", "");
  put("shm_address", "typical", "actorpipe-1234-0");
  put("shm_address", "long", std::string(107, 'x'));
  return 0;
}
