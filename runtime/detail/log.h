#pragma once
// Leveled logging to stderr, chosen by the environment at the first use:
//   ACTORPIPE_LOG=off|warn|info|debug|trace   (default warn)
// warn: something went wrong that no caller will hear of (an exception out
// of a callback, a backend that failed). info: a pipe's life (established
// with which transport and channels, failed or closed and why). debug: the
// steps of handshakes and listeners. trace: every message.
// A line: "actorpipe I 18:04:12.345678 pipe 7: established ... (file:line)".
// Pipes are numbered in the order this process made them.
#include <functional>
#include <sstream>
#include <string>

namespace actorpipe::detail {

enum class LogLevel { kOff = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// The level in force (ACTORPIPE_LOG, read once).
LogLevel logLevel();
// "off", "warn", ... -> level; false for anything else.
bool parseLogLevel(const std::string& text, LogLevel& level);
// Writes one line at `level` (callers check logLevel() first).
void logLine(LogLevel level, const char* file, int line, const std::string& text);

// Inside a catch block: logs (at warn) the exception being handled, as
// having escaped `where` (and `name`, when given): "an exception escaped a
// task on loop 'tcp': ...". Never throws.
void logEscaped(const char* where, const char* name = nullptr) noexcept;
// Inside a catch block: the exception being handled, in words: what() of a
// std::exception, else that it was something else.
std::string describeThrown();

// For tests: replace the level and where lines go (an empty sink: stderr).
void setLogLevelForTesting(LogLevel level);
void setLogSinkForTesting(std::function<void(const std::string&)> sink);

} // namespace actorpipe::detail

// ACTORPIPE_LOG(kInfo, "pipe " << id << ": established"): the stream
// expression is evaluated only when the level is on.
#define ACTORPIPE_LOG(level, stream)                                                  \
  do {                                                                                \
    if (::actorpipe::detail::logLevel() >= ::actorpipe::detail::LogLevel::level) {    \
      std::ostringstream actorpipe_log_line_;                                         \
      actorpipe_log_line_ << stream;                                                  \
      ::actorpipe::detail::logLine(::actorpipe::detail::LogLevel::level, __FILE__,    \
                                   __LINE__, actorpipe_log_line_.str());              \
    }                                                                                 \
  } while (0)
