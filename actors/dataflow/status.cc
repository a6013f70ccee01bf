#include <actorpipe/actors/dataflow/status.h>

namespace actorpipe::dataflow {

const char* to_string(Status status) {
  switch (status) {
    case Status::open: return "OPEN";
    case Status::closed: return "CLOSED";
    case Status::drained: return "DRAINED";
    case Status::empty: return "EMPTY";
    case Status::full: return "FULL";
  }
  return "UNKNOWN";
}

} // namespace actorpipe::dataflow
