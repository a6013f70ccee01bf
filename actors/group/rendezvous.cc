#include <actorpipe/actors/group/rendezvous.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
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

Message frameMessage(const RendezvousFrame& frame) {
  Message message;
  message.metadata = encode(frame);
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

// After the rendezvous failed for a reason every rank must hear (a rank
// claimed twice, a world size that differs), rank 0 keeps answering late
// hellos with it for this long at most, or until every rank has heard it,
// so that ranks that start late fail at once too instead of at their timeout.
constexpr auto kFailureLinger = std::chrono::seconds(5);

// Rank 0's side.
Error gather(Context& context, const RankInfo& me, const std::string& myUrl,
             std::chrono::milliseconds timeout, std::vector<Member>& table) {
  const auto deadline = Clock::now() + timeout;
  const bool viaFile = isFile(me.rendezvous);
  auto listener = context.listen({viaFile ? "tcp://" + me.address + ":0" : me.rendezvous});

  // A rank's claim: the first hello for it, kept while its pipe lives.
  struct Claim {
    std::shared_ptr<Pipe> pipe;
    uint64_t id{0};
  };
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<Member> table;
    std::vector<Claim> claims;
    int arrived{1};
    uint64_t nextClaim{1};
    Error error;          // the listener failed
    std::string failure;  // a rank claimed twice, or a world size that differs
    std::vector<char> told;  // per rank: a pipe that claimed it heard the failure
    bool over{false};        // rank 0 answered; later hellos are dropped
    int writing{0};          // answers not yet sent
    std::vector<std::shared_ptr<Pipe>> refused;  // answered with the failure
  };
  auto state = std::make_shared<State>();
  state->table.resize(me.worldSize);
  state->claims.resize(me.worldSize);
  state->told.assign(me.worldSize, 0);
  state->told[0] = 1;
  state->table[0] = Member{me.host, myUrl};

  // Answers go out with the lock released: a closed pipe calls back at once.
  using Answers = std::vector<std::pair<std::shared_ptr<Pipe>, RendezvousFrame>>;
  auto send = [state](Answers answers) {
    for (auto& [pipe, frame] : answers) {
      pipe->write(frameMessage(frame), [state](const Error&) {
        std::lock_guard<std::mutex> lock(state->mutex);
        --state->writing;
        state->cv.notify_all();
      });
    }
  };
  const int worldSize = me.worldSize;
  // Under the lock, for the hello that `pipe` brought: claims its rank, or
  // fails the rendezvous, or (a rank out of range) does nothing. Returns the
  // claim's id (0: no claim) and fills `answers` with who hears what.
  auto onHello = [state, worldSize](const RendezvousFrame& hello, const std::shared_ptr<Pipe>& pipe,
                                    Answers& answers) -> uint64_t {
    const bool inRange = hello.rank > 0 && hello.rank < worldSize;
    if (state->failure.empty()) {
      std::string failure;
      if (hello.worldSize != worldSize) {
        failure = "rank " + std::to_string(hello.rank) + " says the group has " +
                  std::to_string(hello.worldSize) + " ranks, rank 0 says " +
                  std::to_string(worldSize);
      } else if (!inRange) {
        return 0;
      } else if (state->claims[hello.rank].pipe) {
        failure = "rank " + std::to_string(hello.rank) +
                  " was claimed twice (two processes said they are rank " +
                  std::to_string(hello.rank) +
                  ": a rank started twice, or a stranger; a group secret keeps strangers out, "
                  "see docs/security.md)";
      } else {
        // The first claim for this rank; it stands while its pipe lives (a
        // rank whose pipe broke says hello again on a new one).
        const uint64_t id = state->nextClaim++;
        state->claims[hello.rank] = Claim{pipe, id};
        state->table[hello.rank] = hello.member;
        ++state->arrived;
        state->cv.notify_all();
        return id;
      }
      // Failed: every claimant so far hears why.
      state->failure = failure;
      for (int r = 1; r < worldSize; ++r) {
        if (!state->claims[r].pipe) continue;
        answers.emplace_back(state->claims[r].pipe, RendezvousFrame::failure(failure));
        state->told[r] = 1;
      }
    }
    // And so does this hello, and every later one until rank 0 gives up.
    answers.emplace_back(pipe, RendezvousFrame::failure(state->failure));
    state->refused.push_back(pipe);
    if (inRange) state->told[hello.rank] = 1;
    state->cv.notify_all();
    return 0;
  };

  std::weak_ptr<Listener> weakListener = listener;
  auto acceptNext = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> again = acceptNext;  // weak: no cycle through itself
  *acceptNext = [state, weakListener, again, send, onHello]() {
    auto listener = weakListener.lock();
    if (!listener) return;
    listener->accept([state, again, send, onHello](const Error& error, std::shared_ptr<Pipe> pipe) {
      if (error) {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->error) state->error = error;
        state->cv.notify_all();
        return;
      }
      pipe->readDescriptor([state, pipe, send, onHello](const Error& error, Descriptor descriptor) {
        if (error) return;  // a rank that hung up before saying hello retries
        RendezvousFrame hello;
        Answers answers;
        uint64_t claim = 0;
        if (!decode(descriptor.metadata, hello) && hello.kind == RendezvousFrame::Kind::kHello) {
          // (anything else is dropped unanswered)
          std::lock_guard<std::mutex> lock(state->mutex);
          if (!state->over) claim = onHello(hello, pipe, answers);
          state->writing += static_cast<int>(answers.size());
        }
        if (claim == 0) {
          pipe->read(Allocation{}, [](const Error&) {});
        } else {
          // A claimant says nothing more, so its next read ends only when
          // its pipe does: then its claim lapses, unless rank 0 answered.
          const int rank = hello.rank;
          auto lapse = [state, rank, claim] {
            std::lock_guard<std::mutex> lock(state->mutex);
            if (state->over || state->claims[rank].id != claim) return;
            state->claims[rank] = Claim{};
            --state->arrived;
          };
          pipe->read(Allocation{}, [pipe, lapse](const Error& error) {
            if (error) return lapse();
            pipe->readDescriptor([lapse](const Error& error, Descriptor) {
              if (error) lapse();
            });
          });
        }
        send(std::move(answers));
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
    return state->arrived == me.worldSize || static_cast<bool>(state->error) ||
           !state->failure.empty();
  });
  Answers answers;
  Error result;
  if (!state->failure.empty()) {
    // Those who came heard it already; linger for those still to come.
    const auto lingerUntil = std::min(deadline, Clock::now() + kFailureLinger);
    state->cv.wait_until(lock, lingerUntil, [&] {
      return std::all_of(state->told.begin(), state->told.end(), [](char t) { return t != 0; });
    });
    result = ACTORPIPE_ERROR(RendezvousError, state->failure);
  } else if (complete && !state->error) {
    table = state->table;
    for (int r = 1; r < me.worldSize; ++r) {
      answers.emplace_back(state->claims[r].pipe, RendezvousFrame::tableOf(state->table));
    }
  } else {
    std::string missing;
    int count = 0;
    for (int r = 1; r < me.worldSize; ++r) {
      if (!state->claims[r].pipe) {
        if (count++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    if (count > 16) missing += ", ...";
    const std::string reason =
        state->error ? "rank 0 could not listen on " + me.rendezvous + ": " + state->error.what()
                     : (count == 1 ? "rank " : "ranks ") + missing + " of " +
                           std::to_string(me.worldSize) + " never showed up within " +
                           std::to_string(timeout.count()) + " ms";
    for (int r = 1; r < me.worldSize; ++r) {
      if (state->claims[r].pipe) answers.emplace_back(state->claims[r].pipe, RendezvousFrame::failure(reason));
    }
    result = ACTORPIPE_ERROR(RendezvousError, reason);
  }
  state->over = true;
  state->writing += static_cast<int>(answers.size());
  lock.unlock();
  send(std::move(answers));

  // Wait (briefly) until the answers are out.
  lock.lock();
  state->cv.wait_until(lock, Clock::now() + std::chrono::seconds(5),
                       [&] { return state->writing == 0; });
  // The pipes go with this function, as the ranks hang up on their side;
  // none stays behind in `state`, which their pending reads hold.
  auto claims = std::move(state->claims);
  auto refused = std::move(state->refused);
  lock.unlock();
  listener->close();
  return result;
}

// Every other rank's side: one attempt. Returns true when it got an answer
// (table or error) that ends the rendezvous.
bool askRankZero(Context& context, const RankInfo& me, const std::string& myUrl,
                 const std::string& url, Clock::time_point deadline,
                 std::vector<Member>& table, Error& result, std::string& lastProblem) {
  auto pipe = context.connect(url);
  pipe->write(frameMessage(RendezvousFrame::hello(me.rank, me.worldSize, Member{me.host, myUrl})),
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
  if (got.error && got.error.isOfType<AuthenticationError>()) {
    // Whoever listens there does not share our secret: asking again will not help.
    result = ACTORPIPE_ERROR(RendezvousError,
                             "rank 0 at " + url + " refused us: " + got.error.what() +
                                 " (do all ranks have the same ACTORPIPE_SECRET or "
                                 "ACTORPIPE_SECRET_FILE?)");
    return true;
  }
  if (got.error) {
    lastProblem = got.error.what();
    return false;
  }
  RendezvousFrame answerFrame;
  if (Error bad = decode(got.text, answerFrame)) {
    result = ACTORPIPE_ERROR(RendezvousError, "rank 0 at " + url + " answered with " + bad.what());
    return true;
  }
  switch (answerFrame.kind) {
    case RendezvousFrame::Kind::kFailure:
      result = ACTORPIPE_ERROR(RendezvousError, answerFrame.reason);
      return true;
    case RendezvousFrame::Kind::kTable:
      if (answerFrame.table.size() != static_cast<size_t>(me.worldSize)) {
        result = ACTORPIPE_ERROR(RendezvousError,
                                 "rank 0 at " + url + " answered with a table for another world size");
        return true;
      }
      table = std::move(answerFrame.table);
      result = Error::kSuccess;
      return true;
    case RendezvousFrame::Kind::kHello:
      break;
  }
  result = ACTORPIPE_ERROR(RendezvousError, "rank 0 at " + url + " answered with a hello");
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
