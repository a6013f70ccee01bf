#pragma once
// What a node received, made visible to ThreadSanitizer as handed over.
//
// A remote message is read (its tensors' bytes included) on a pipe's loop
// thread and reaches the thread that uses it through CAF mailboxes. CAF 0.17
// comes from Debian without TSan instrumentation, so the happens-before edge
// of its lock-free mailboxes is invisible, and a user thread reading a
// received Tensor after a blocking receive looks like a race with the loop
// thread that wrote it. The link releases this edge after each pipe read,
// before it delivers what it read; the blocking calls of RemoteChannel and
// RemoteWorker acquire it in their receive handlers. No-ops unless the
// library is built with -fsanitize=thread.
namespace actorpipe::remote::detail {

void releaseHandoff();
void acquireHandoff();

} // namespace actorpipe::remote::detail
