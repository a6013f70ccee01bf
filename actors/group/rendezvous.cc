#include <actorpipe/actors/group/rendezvous.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <actorpipe/actors/group/errors.h>
#include <actorpipe/runtime/listener.h>
#include <actorpipe/runtime/pipe.h>

namespace actorpipe::group {

namespace {

using Clock = std::chrono::steady_clock;

std::string filePathOf(const std::string& rendezvous) {
  return rendezvous.substr(std::string("file://").size());
}

bool isFile(const std::string& rendezvous) { return rendezvous.rfind("file://", 0) == 0; }

void makeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0700);
  }
}

// Written under a temporary name, then renamed: readers never see half a URL
// (torch-ipc wrote its file in place, and readers raced the writer).
Error publishAtomically(const std::string& path, const std::string& content) {
  makeDirectories(path);
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << content << "\n";
    out.flush();
    if (!out) return ACTORPIPE_ERROR(SystemError, "write " + temporary, errno);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return ACTORPIPE_ERROR(SystemError, "rename " + temporary + " to " + path, error);
  }
  return Error::kSuccess;
}

std::string readPublished(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

Message textMessage(std::string text) {
  Message message;
  message.metadata = std::move(text);
  return message;
}

// Waits for a callback-delivered value with a deadline.
template <typename T>
struct Slot {
  std::mutex mutex;
  std::condition_variable cv;
  bool set{false};
  T value;
  void put(T v) {
    std::lock_guard<std::mutex> lock(mutex);
    if (set) return;
    value = std::move(v);
    set = true;
    cv.notify_all();
  }
  bool waitUntil(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_until(lock, deadline, [&] { return set; });
  }
};

struct Hello {
  int rank{-1};
  std::string host;
  std::string url;
};

bool parseHello(const std::string& text, Hello& hello) {
  std::istringstream in(text);
  std::string word;
  return (in >> word) && word == "hello" && (in >> hello.rank >> hello.host >> hello.url);
}

// Rank 0's side.
Error gather(Context& context, const RankInfo& me, const std::string& myUrl,
             std::chrono::milliseconds timeout, std::vector<Member>& table) {
  const auto deadline = Clock::now() + timeout;
  const bool viaFile = isFile(me.rendezvous);
  auto listener = context.listen({viaFile ? "tcp://" + me.address + ":0" : me.rendezvous});

  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<Member> table;
    std::vector<std::shared_ptr<Pipe>> pipes;
    int arrived{1};
    Error error;
  };
  auto state = std::make_shared<State>();
  state->table.resize(me.worldSize);
  state->pipes.resize(me.worldSize);
  state->table[0] = Member{me.host, myUrl};

  std::weak_ptr<Listener> weakListener = listener;
  auto acceptNext = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> again = acceptNext;  // weak: no cycle through itself
  *acceptNext = [state, weakListener, again]() {
    auto listener = weakListener.lock();
    if (!listener) return;
    listener->accept([state, again](const Error& error, std::shared_ptr<Pipe> pipe) {
      if (error) {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->error) state->error = error;
        state->cv.notify_all();
        return;
      }
      pipe->readDescriptor([state, pipe](const Error& error, Descriptor descriptor) {
        if (error) return;  // a rank that hung up before saying hello retries
        pipe->read(Allocation{}, [](const Error&) {});
        Hello hello;
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!parseHello(descriptor.metadata, hello) || hello.rank <= 0 ||
            hello.rank >= static_cast<int>(state->table.size())) {
          return;
        }
        if (!state->pipes[hello.rank]) ++state->arrived;
        state->pipes[hello.rank] = pipe;  // a retrying rank replaces its earlier pipe
        state->table[hello.rank] = Member{hello.host, hello.url};
        state->cv.notify_all();
      });
      if (auto next = again.lock()) (*next)();
    });
  };
  (*acceptNext)();

  if (viaFile) {
    std::string address;
    try {
      address = listener->url("tcp");
    } catch (const std::exception&) {
    }
    if (address.empty()) {
      std::lock_guard<std::mutex> lock(state->mutex);
      return state->error ? state->error
                          : ACTORPIPE_ERROR(RendezvousError, "could not listen on " + me.address);
    }
    Error error = publishAtomically(filePathOf(me.rendezvous), address);
    if (error) return error;
  }

  std::unique_lock<std::mutex> lock(state->mutex);
  const bool complete = state->cv.wait_until(lock, deadline, [&] {
    return state->arrived == me.worldSize || static_cast<bool>(state->error);
  });
  std::string answer;
  Error result;
  if (complete && !state->error) {
    std::ostringstream out;
    out << "table " << me.worldSize << "\n";
    for (const auto& member : state->table) out << member.host << " " << member.url << "\n";
    answer = out.str();
    table = state->table;
  } else {
    std::string missing;
    int count = 0;
    for (int r = 1; r < me.worldSize; ++r) {
      if (!state->pipes[r]) {
        if (count++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    if (count > 16) missing += ", ...";
    const std::string reason =
        state->error ? "rank 0 could not listen on " + me.rendezvous + ": " + state->error.what()
                     : (count == 1 ? "rank " : "ranks ") + missing + " of " +
                           std::to_string(me.worldSize) + " never showed up within " +
                           std::to_string(timeout.count()) + " ms";
    answer = "error " + reason;
    result = ACTORPIPE_ERROR(RendezvousError, reason);
  }
  auto pipes = state->pipes;
  lock.unlock();

  // Answer everyone who came, and wait (briefly) until the answers are out.
  auto pending = std::make_shared<Slot<int>>();
  auto remaining = std::make_shared<std::atomic<int>>(0);
  for (auto& pipe : pipes) {
    if (pipe) ++*remaining;
  }
  if (*remaining == 0) pending->put(0);
  for (auto& pipe : pipes) {
    if (!pipe) continue;
    pipe->write(textMessage(answer), [pending, remaining](const Error&) {
      if (--*remaining == 0) pending->put(0);
    });
  }
  pending->waitUntil(Clock::now() + std::chrono::seconds(5));
  listener->close();
  return result;
}

// Every other rank's side: one attempt. Returns true when it got an answer
// (table or error) that ends the rendezvous.
bool askRankZero(Context& context, const RankInfo& me, const std::string& myUrl,
                 const std::string& url, Clock::time_point deadline,
                 std::vector<Member>& table, Error& result, std::string& lastProblem) {
  auto pipe = context.connect(url);
  pipe->write(textMessage("hello " + std::to_string(me.rank) + " " + me.host + " " + myUrl),
              [](const Error&) {});
  struct Answer {
    Error error;
    std::string text;
  };
  auto answer = std::make_shared<Slot<Answer>>();
  pipe->readDescriptor([answer, pipe](const Error& error, Descriptor descriptor) {
    answer->put(Answer{error, descriptor.metadata});
  });
  if (!answer->waitUntil(deadline)) {
    pipe->close();
    lastProblem = "rank 0 at " + url + " did not answer";
    return false;
  }
  pipe->close();
  const Answer& got = answer->value;
  if (got.error) {
    lastProblem = got.error.what();
    return false;
  }
  if (got.text.rfind("error ", 0) == 0) {
    result = ACTORPIPE_ERROR(RendezvousError, got.text.substr(6));
    return true;
  }
  std::istringstream in(got.text);
  std::string word;
  int size = 0;
  if (!(in >> word >> size) || word != "table" || size != me.worldSize) {
    result = ACTORPIPE_ERROR(RendezvousError,
                             "rank 0 at " + url + " answered with a table for another world size");
    return true;
  }
  table.assign(size, Member{});
  for (auto& member : table) {
    if (!(in >> member.host >> member.url)) {
      result = ACTORPIPE_ERROR(RendezvousError, "rank 0 sent a truncated table");
      return true;
    }
  }
  result = Error::kSuccess;
  return true;
}

} // namespace

Error rendezvous(Context& context, const RankInfo& me, const std::string& myUrl,
                 std::chrono::milliseconds timeout, std::vector<Member>& table) {
  const auto start = Clock::now();
  if (me.worldSize == 1) {
    table = {Member{me.host, myUrl}};
    return Error::kSuccess;
  }
  if (me.rank == 0) return gather(context, me, myUrl, timeout, table);

  // Rank 0 waits `timeout` for everyone and then says who is missing; we wait
  // a little longer so that its explanation, not our own timeout, is what
  // the user reads.
  const auto deadline = start + timeout + std::chrono::seconds(2);
  std::string lastProblem = "nothing published yet";
  while (Clock::now() < deadline) {
    std::string url = me.rendezvous;
    if (isFile(me.rendezvous)) {
      url = readPublished(filePathOf(me.rendezvous));
      if (url.empty()) {
        lastProblem = "no address in " + filePathOf(me.rendezvous) + " yet";
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
    }
    Error result;
    if (askRankZero(context, me, myUrl, url, deadline, table, result, lastProblem)) return result;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ACTORPIPE_ERROR(
      RendezvousError,
      "rank 0 never answered within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
          " ms (" + lastProblem + ")");
}

void removeRendezvousFile(const RankInfo& me) {
  if (me.rank == 0 && isFile(me.rendezvous)) std::remove(filePathOf(me.rendezvous).c_str());
}

} // namespace actorpipe::group
