#include <actorpipe/actors/dataflow/status.h>

namespace actorpipe::dataflow {

const char* to_string(Status status) {
  switch (status) {
    case Status::kOpen: return "OPEN";
    case Status::kClosed: return "CLOSED";
    case Status::kDrained: return "DRAINED";
    case Status::kEmpty: return "EMPTY";
    case Status::kFull: return "FULL";
  }
  return "UNKNOWN";
}

} // namespace actorpipe::dataflow
