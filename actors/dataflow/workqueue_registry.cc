#include <actorpipe/actors/dataflow/workqueue.h>

#include <map>
#include <mutex>

namespace actorpipe::dataflow::detail {

namespace {

struct NamedEntry {
  std::type_index type;
  std::shared_ptr<void> state;
};

struct NamedTable {
  std::mutex mutex;
  std::map<std::string, NamedEntry> entries;
};

NamedTable& table() {
  // Leaked on purpose: queues may be closed from static destructors of other
  // translation units, after a function-local static would be gone.
  static auto* instance = new NamedTable;
  return *instance;
}

} // namespace

std::shared_ptr<void>
findOrCreateNamed(const std::string& name, std::type_index type,
                     const std::function<std::shared_ptr<void>()>& create) {
  auto& named = table();
  std::lock_guard<std::mutex> guard(named.mutex);
  auto it = named.entries.find(name);
  if (it != named.entries.end()) {
    if (it->second.type != type)
      throw std::invalid_argument("workqueue '" + name
                                  + "' is already open with other types");
    return it->second.state;
  }
  auto state = create();
  named.entries.emplace(name, NamedEntry{type, state});
  return state;
}

void forgetNamed(const std::string& name, const void* state) {
  auto& named = table();
  std::lock_guard<std::mutex> guard(named.mutex);
  auto it = named.entries.find(name);
  // Only the queue that was closed leaves; a fresh one under the same name
  // (opened after an earlier close) stays.
  if (it != named.entries.end() && it->second.state.get() == state)
    named.entries.erase(it);
}

} // namespace actorpipe::dataflow::detail
