// Leveled logging (runtime/detail/log.h): levels parse, and a pipe's life
// is told at info and not at warn. ACTORPIPE_LOG itself is checked by
// CTest's log_env_test (an example run with ACTORPIPE_LOG=info).
#include <doctest/doctest.h>

#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include <actorpipe/runtime/detail/log.h>

#include "support/harness.h"

using namespace actorpipe;
using namespace testing;
using actorpipe::detail::LogLevel;

namespace {

struct Captured {
  std::mutex mutex;
  std::vector<std::string> lines;
  Captured() {
    detail::setLogSinkForTesting([this](const std::string& line) {
      std::lock_guard<std::mutex> guard(mutex);
      lines.push_back(line);
    });
  }
  ~Captured() {
    detail::setLogSinkForTesting(nullptr);
    detail::setLogLevelForTesting(LogLevel::kWarn);
  }
  size_t count(const std::regex& re) {
    std::lock_guard<std::mutex> guard(mutex);
    size_t n = 0;
    for (const auto& l : lines) n += std::regex_search(l, re) ? 1 : 0;
    return n;
  }
};

// One pipe pair, a message across, then both closed.
void pipeLife() {
  auto context = makeContext("log");
  auto listener = context->listen({"tcp://127.0.0.1:0"});
  auto client = context->connect(listener->url("tcp"));
  auto server = acceptSync(*listener);
  REQUIRE(server != nullptr);
  Storage s = makeStorage({16}, {}, 1);
  REQUIRE(!writeSync(*client, messageOver(s, "hi")));
  REQUIRE(!readSync(*server).error);
  client->close();
  server->close();
  context->join();
}

}  // namespace

TEST_CASE("log levels parse by name, and nothing else parses") {
  LogLevel l = LogLevel::kWarn;
  CHECK((detail::parseLogLevel("off", l) && l == LogLevel::kOff));
  CHECK((detail::parseLogLevel("info", l) && l == LogLevel::kInfo));
  CHECK((detail::parseLogLevel("debug", l) && l == LogLevel::kDebug));
  CHECK((detail::parseLogLevel("trace", l) && l == LogLevel::kTrace));
  CHECK((detail::parseLogLevel("warn", l) && l == LogLevel::kWarn));
  CHECK_FALSE(detail::parseLogLevel("loud", l));
  CHECK_FALSE(detail::parseLogLevel("INFO ", l));
}

TEST_CASE("at info, both ends of a pipe say how it was established; at warn, nothing") {
  {
    Captured captured;
    detail::setLogLevelForTesting(LogLevel::kInfo);
    pipeLife();
    const std::regex established(
        R"(^actorpipe I \d\d:\d\d:\d\d\.\d{6} pipe \d+: established with tcp://\S+ over tcp, channels cpu:basic \(actors/detail/pipe_handshake\.cc:\d+\)\n$)");
    CHECK(captured.count(established) == 2);
    CHECK(captured.count(std::regex("closed by its owner")) == 0);  // debug
  }
  {
    Captured captured;
    detail::setLogLevelForTesting(LogLevel::kDebug);
    pipeLife();
    CHECK(captured.count(std::regex("pipe \\d+: connecting to tcp://")) == 1);
    CHECK(captured.count(std::regex("pipe \\d+: accepted from tcp://")) == 1);
    CHECK(captured.count(std::regex("closed by its owner")) == 2);
  }
  {
    Captured captured;
    detail::setLogLevelForTesting(LogLevel::kWarn);
    pipeLife();
    CHECK(captured.lines.empty());
  }
}
