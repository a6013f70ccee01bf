#pragma once
// Contracts the code relies on but the compiler cannot check: that a
// loop-only method runs on its loop's thread, that a state machine is in a
// state it can leave. ACTORPIPE_DCHECK(condition) aborts with the condition
// and where it failed in builds that check contracts (every build but
// Release: CMake's ACTORPIPE_DCHECKS), and compiles to nothing otherwise,
// without evaluating the condition. TensorPipe's spelling works too.
namespace actorpipe::detail {
[[noreturn]] void dcheckFailed(const char* condition, const char* file, int line);
// Whether the library was built with contract checks.
bool dchecksEnabled();
} // namespace actorpipe::detail

#ifdef ACTORPIPE_ENABLE_DCHECKS
#define ACTORPIPE_DCHECK(condition) \
  ((condition) ? (void)0 : ::actorpipe::detail::dcheckFailed(#condition, __FILE__, __LINE__))
#else
#define ACTORPIPE_DCHECK(condition) ((void)sizeof(!(condition)))
#endif
#define TP_DCHECK(condition) ACTORPIPE_DCHECK(condition)
