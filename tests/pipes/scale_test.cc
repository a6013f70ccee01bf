// 500 pipes between two processes, each process held to 1024 open files
// (TensorPipe's users hit "too many open files" at 20+ workers).
#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/resource.h>

#include <atomic>

#include "../support/harness.h"

using namespace actorpipe;
using namespace testing;

namespace {

constexpr int kPipes = 500;

int openFiles() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (d != nullptr && ::readdir(d) != nullptr) ++n;
  if (d != nullptr) ::closedir(d);
  return n - 3;  // ".", "..", and the directory itself
}

bool limitFiles() {
  rlimit limit{1024, 1024};
  return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

void scale(const std::string& scheme) {
  Child server = Child::spawn([scheme](Child& self) {
    CHILD_CHECK(limitFiles());
    auto context = makeContext("many-server");
    auto listener = context->listen({scheme == "shm" ? "shm://" : "tcp://127.0.0.1:0"});
    self.send(listener->url(scheme));
    int before = openFiles();
    std::vector<std::shared_ptr<Pipe>> pipes;
    for (int i = 0; i < kPipes; ++i) {
      auto pipe = acceptSync(*listener);
      CHILD_CHECK(pipe != nullptr);
      pipes.push_back(pipe);
    }
    self.send(std::to_string(openFiles() - before));
    for (auto& pipe : pipes) {
      Received r = readSync(*pipe);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(!writeSync(*pipe, messageOver(r.storage, r.descriptor.metadata)));
    }
    for (auto& pipe : pipes) CHILD_CHECK(readSync(*pipe).error);  // the client hangs up
    return 0;
  });
  std::string url = server.receive();
  REQUIRE(!url.empty());
  Child client = Child::spawn([url](Child& self) {
    CHILD_CHECK(limitFiles());
    auto context = makeContext("many-client");
    int before = openFiles();
    std::vector<std::shared_ptr<Pipe>> pipes;
    for (int i = 0; i < kPipes; ++i) pipes.push_back(context->connect(url));
    std::vector<Storage> sent(kPipes);
    for (int i = 0; i < kPipes; ++i) {
      sent[i].tensors.push_back(pattern(1000 + i, i));
      pipes[i]->write(messageOver(sent[i], std::to_string(i)), [](const Error& e) { CHILD_CHECK(!e); });
    }
    for (int i = 0; i < kPipes; ++i) {
      Received r = readSync(*pipes[i]);
      CHILD_CHECK(!r.error);
      CHILD_CHECK(r.descriptor.metadata == std::to_string(i));
      CHILD_CHECK(r.storage.tensors[0] == sent[i].tensors[0]);
    }
    self.send(std::to_string(openFiles() - before));
    pipes.clear();
    context->join();
    return 0;
  });
  int serverFiles = std::stoi(server.receive(std::chrono::seconds(60)));
  int clientFiles = std::stoi(client.receive(std::chrono::seconds(60)));
  MESSAGE(scheme << ": " << kPipes << " pipes cost " << clientFiles << " files in the client, " << serverFiles
                 << " in the server");
  CHECK(clientFiles <= kPipes + 8);
  CHECK(serverFiles <= kPipes + 8);
  CHECK(client.wait(std::chrono::seconds(60)) == 0);
  CHECK(server.wait(std::chrono::seconds(60)) == 0);
}

}  // namespace

TEST_CASE("500 pipes over tcp within 1024 open files") { scale("tcp"); }

TEST_CASE("500 pipes over shm within 1024 open files") { scale("shm"); }
