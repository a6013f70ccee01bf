#include <actorpipe/runtime/detail/log.h>

#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace actorpipe::detail {
namespace {

std::atomic<int> level{-1};  // -1: not read from the environment yet

std::mutex& sinkMutex() {
  static auto* mutex = new std::mutex();  // never destroyed: logging may outlive main
  return *mutex;
}
std::function<void(const std::string&)>& sink() {
  static auto* fn = new std::function<void(const std::string&)>();
  return *fn;
}

const char* letter(LogLevel l) {
  switch (l) {
    case LogLevel::kWarn: return "W";
    case LogLevel::kInfo: return "I";
    case LogLevel::kDebug: return "D";
    case LogLevel::kTrace: return "T";
    default: return "?";
  }
}

// The file's path from the source root: "actors/detail/pipe_core.cc".
const char* shortPath(const char* file) {
  const std::string f(file);
  for (const char* top : {"runtime/", "actors/", "transports/", "channels/"}) {
    auto pos = f.rfind(top);
    if (pos != std::string::npos) return file + pos;
  }
  return file;
}

}  // namespace

bool parseLogLevel(const std::string& text, LogLevel& out) {
  static const struct {
    const char* name;
    LogLevel level;
  } names[] = {{"off", LogLevel::kOff},     {"warn", LogLevel::kWarn},   {"info", LogLevel::kInfo},
               {"debug", LogLevel::kDebug}, {"trace", LogLevel::kTrace}};
  for (const auto& n : names) {
    if (text == n.name) {
      out = n.level;
      return true;
    }
  }
  return false;
}

LogLevel logLevel() {
  int l = level.load(std::memory_order_relaxed);
  if (l >= 0) return static_cast<LogLevel>(l);
  LogLevel parsed = LogLevel::kWarn;
  const char* env = std::getenv("ACTORPIPE_LOG");
  const bool bad = env != nullptr && *env != '\0' && !parseLogLevel(env, parsed);
  int expected = -1;
  if (level.compare_exchange_strong(expected, static_cast<int>(parsed)) && bad) {
    logLine(LogLevel::kWarn, __FILE__, __LINE__,
            std::string("ACTORPIPE_LOG=\"") + env + "\" is not off, warn, info, debug or trace; using warn");
  }
  return static_cast<LogLevel>(level.load(std::memory_order_relaxed));
}

void logLine(LogLevel l, const char* file, int line, const std::string& text) {
  timeval now{};
  ::gettimeofday(&now, nullptr);
  tm local{};
  ::localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%06ld", local.tm_hour, local.tm_min, local.tm_sec,
                static_cast<long>(now.tv_usec));
  const std::string out = std::string("actorpipe ") + letter(l) + " " + stamp + " " + text + " (" +
                          shortPath(file) + ":" + std::to_string(line) + ")\n";
  std::lock_guard<std::mutex> guard(sinkMutex());
  if (sink()) {
    sink()(out);
  } else {
    std::fwrite(out.data(), 1, out.size(), stderr);
  }
}

std::string describeThrown() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "something that is not a std::exception";
  }
}

void logEscaped(const char* where, const char* name) noexcept {
  try {
    std::string at = where;
    if (name != nullptr) at += std::string(" '") + name + "'";
    ACTORPIPE_LOG(kWarn, "an exception escaped " << at << ": " << describeThrown());
  } catch (...) {
    // Out of memory for the line: the exception is dropped unlogged.
  }
}

void setLogLevelForTesting(LogLevel l) { level.store(static_cast<int>(l), std::memory_order_relaxed); }

void setLogSinkForTesting(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> guard(sinkMutex());
  sink() = std::move(fn);
}

} // namespace actorpipe::detail
