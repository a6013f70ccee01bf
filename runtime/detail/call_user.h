#pragma once
// callUser(what, fn, args...): calls one of the user's callbacks (a pipe's
// write, readDescriptor or read, a listener's accept) from inside the
// library. One that throws is logged (detail::logEscaped, at warn) and
// otherwise ignored, as Loop's task runner does with a task.
//
// Why not let it unwind: the callbacks run in the middle of our state
// machines, on a loop thread under libuv's frames or in a CAF actor's
// handler. An exception there would leave a transition half made (a pipe
// whose next read never starts), end the process (std::terminate out of a
// noexcept frame), or end the actor running it (CAF's default handler exits
// the actor: a listener that never accepts again). A try block costs nothing
// on the path where nothing is thrown.
#include <utility>

#include <actorpipe/runtime/detail/log.h>

namespace actorpipe::detail {

template <typename Fn, typename... Args>
void callUser(const char* what, Fn& fn, Args&&... args) noexcept {
  try {
    fn(std::forward<Args>(args)...);
  } catch (...) {
    logEscaped(what);
  }
}

} // namespace actorpipe::detail
