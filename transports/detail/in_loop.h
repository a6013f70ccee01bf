#pragma once
// Connections are used from any thread but live on their loop: run `fn`
// there (at once if we are on it), or tell `refused` the loop has stopped.
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/error.h>

namespace actorpipe::detail {

template <typename Fn, typename Refused>
void inLoop(Loop& loop, Fn fn, Refused refused) {
  if (loop.inLoop()) {
    fn();
    return;
  }
  if (!loop.post(std::move(fn))) {
    refused(ACTORPIPE_ERROR(ContextClosedError));
  }
}

} // namespace actorpipe::detail
