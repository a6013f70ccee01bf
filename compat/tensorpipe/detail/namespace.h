#pragma once
// TensorPipe's names are actorpipe's: `tensorpipe::Pipe` is actorpipe::Pipe.
// An alias, so a forward declaration `namespace tensorpipe { class Pipe; }`
// is not accepted (see docs/tensorpipe-compat.md).
namespace actorpipe {}
namespace tensorpipe = actorpipe;
