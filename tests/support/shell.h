#pragma once
// Runs a shell command (stderr into stdout) and collects what it printed, its
// status and how long it took: for tests that check programs from outside
// (actorpipe-run, group_check).
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace testing {

struct ShellRun {
  int status{-1};  // exit code, or 128 + signal; -1 if it could not start
  std::string output;
  double seconds{0};
};

inline ShellRun runShell(const std::string& shellCommand) {
  const auto start = std::chrono::steady_clock::now();
  ShellRun result;
  FILE* pipe = ::popen((shellCommand + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace testing
