// mpt: lanes are set up per pipe. The accepting side's endpoint gets a
// random token and publishes "token;addr0;addr1;..." in the welcome; the
// connecting side dials every lane address and opens each lane with a
// 12-byte lane hello (token, lane index), by which the acceptor's lane
// listeners find the endpoint. A tensor of length L is cut the same way on
// both sides (it depends on L only), chunk i on lane i; per-lane FIFO order
// keeps successive tensors apart.
#include <actorpipe/channels/mpt/factory.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include <actorpipe/channels/mpt/setup.h>
#include <actorpipe/runtime/detail/loop.h>
#include <actorpipe/runtime/detail/secure_random.h>
#include <actorpipe/runtime/device.h>
#include <actorpipe/transports/uv/factory.h>

namespace actorpipe::channel::mpt {
namespace {

// Below this many bytes per lane, fewer lanes are used: a chunk must be
// worth a system call and a wake-up.
constexpr size_t kMinChunk = 256 * 1024;
constexpr size_t kLaneHelloSize = 12;
// A lane connection that has not said which pipe it belongs to by then is
// dropped: strangers must not hold descriptors.
constexpr std::chrono::seconds kLaneHelloTimeout{5};

// How many lanes a buffer of `length` bytes uses, and where chunk i starts.
size_t lanesFor(size_t length, size_t lanes) {
  return std::max<size_t>(1, std::min(lanes, length / kMinChunk));
}
size_t chunkStart(size_t length, size_t used, size_t i) { return length / used * i; }

class MptEndpoint;

// Counts down a buffer's chunks; reports the first error, or success.
struct Countdown {
  Countdown(size_t n, Endpoint::done_fn fn) : left(n), done(std::move(fn)) {}
  void arrive(const Error& e) {
    if (e) {
      std::lock_guard<std::mutex> guard(mutex);
      if (!error) error = e;
    }
    if (--left == 0) done(error);
  }
  std::atomic<size_t> left;
  std::mutex mutex;
  Error error;
  Endpoint::done_fn done;
};

// A stand-in that fails every operation: what operations run against once
// their lane was closed before it was ever attached.
class DeadConnection final : public transport::Connection {
 public:
  explicit DeadConnection(Error e) : error_(std::move(e)) {}
  void read(void*, size_t, read_callback_fn fn) override { fn(error_); }
  void write(transport::Slices, write_callback_fn fn) override { fn(error_); }
  void close(Error) override {}
  std::string peerAddress() const override { return "(closed mpt lane)"; }
  void onPeerGone(std::function<void(const Error&)>) override {}

 private:
  Error error_;
};

// One lane: a connection, attached at once (connecting side) or when the
// peer's lane hello arrives (accepting side). Operations asked before that
// wait, in order.
class Lane {
 public:
  void attach(std::shared_ptr<transport::Connection> connection) {
    std::deque<std::function<void(transport::Connection&)>> waiting;
    Error failed;
    std::shared_ptr<actorpipe::detail::Arrivals> arrivals;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      connection_ = std::move(connection);
      waiting.swap(waiting_);
      failed = error_;
      arrivals = arrivals_;
    }
    if (failed) {
      connection_->close(failed);
    }
    if (arrivals) connection_->countArrivals(std::move(arrivals));
    for (auto& op : waiting) op(*connection_);
  }
  void run(std::function<void(transport::Connection&)> op) {
    std::shared_ptr<transport::Connection> c;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (connection_) {
        c = connection_;
      } else if (error_) {
        c = std::make_shared<DeadConnection>(error_);
      } else {
        waiting_.push_back(std::move(op));
        return;
      }
    }
    op(*c);
  }
  // The pipe's count, for this lane's connection whenever it comes.
  void countArrivals(const std::shared_ptr<actorpipe::detail::Arrivals>& arrivals) {
    std::shared_ptr<transport::Connection> c;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      arrivals_ = arrivals;
      c = connection_;
    }
    if (c) c->countArrivals(arrivals);
  }
  // Fails what waits; returns the connection to close, if any.
  std::shared_ptr<transport::Connection> close(const Error& reason,
                                               std::deque<std::function<void(transport::Connection&)>>& waiting) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!error_) error_ = reason;
    waiting.swap(waiting_);
    return connection_;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<transport::Connection> connection_;
  std::deque<std::function<void(transport::Connection&)>> waiting_;
  Error error_;
  std::shared_ptr<actorpipe::detail::Arrivals> arrivals_;
};

class MptEndpoint final : public Endpoint {
 public:
  explicit MptEndpoint(size_t lanes) : lanes_(lanes) {}
  ~MptEndpoint() override { close(ACTORPIPE_ERROR(PipeClosedError)); }

  std::string send(const void* ptr, size_t length, done_fn done) override {
    forEachChunk(length, std::move(done), [ptr](transport::Connection& c, size_t offset, size_t n,
                                                transport::Connection::write_callback_fn cb) {
      c.write(static_cast<const uint8_t*>(ptr) + offset, n, std::move(cb));
    });
    return std::string();
  }

  void recv(const std::string&, void* ptr, size_t length, done_fn done) override {
    forEachChunk(length, std::move(done), [ptr](transport::Connection& c, size_t offset, size_t n,
                                                transport::Connection::read_callback_fn cb) {
      c.read(static_cast<uint8_t*>(ptr) + offset, n, std::move(cb));
    });
  }

  void close(const Error& reason) override {
    for (auto& lane : lanes_) {
      std::deque<std::function<void(transport::Connection&)>> waiting;
      auto connection = lane.close(reason, waiting);
      if (connection) connection->close(reason);
      // Operations that never reached a connection fail here.
      DeadConnection dead(reason);
      for (auto& op : waiting) op(dead);
    }
    if (onClose_) onClose_();
  }

  void countArrivals(std::shared_ptr<actorpipe::detail::Arrivals> arrivals) override {
    for (auto& lane : lanes_) lane.countArrivals(arrivals);
  }

  // Below one chunk a tensor would use one lane anyway: the pipe's own
  // connection is as good, and already warm.
  size_t inlineBelow() const override { return kMinChunk; }
  Lane& lane(size_t i) { return lanes_[i]; }
  size_t lanes() const { return lanes_.size(); }
  void onClose(std::function<void()> fn) { onClose_ = std::move(fn); }

 private:
  template <typename Io>
  void forEachChunk(size_t length, done_fn done, Io io) {
    size_t used = lanesFor(length, lanes_.size());
    auto countdown = std::make_shared<Countdown>(used, std::move(done));
    for (size_t i = 0; i < used; ++i) {
      size_t begin = chunkStart(length, used, i);
      size_t end = i + 1 == used ? length : chunkStart(length, used, i + 1);
      lanes_[i].run([io, begin, end, countdown](transport::Connection& c) {
        io(c, begin, end - begin, [countdown](const Error& e) { countdown->arrive(e); });
      });
    }
  }

  std::deque<Lane> lanes_;
  std::function<void()> onClose_;
};

class MptContext final : public Context, public std::enable_shared_from_this<MptContext> {
 public:
  MptContext(std::vector<std::shared_ptr<transport::Context>> contexts,
             std::vector<std::shared_ptr<transport::Listener>> listeners)
      : contexts_(std::move(contexts)), listeners_(std::move(listeners)) {
    viable_ = !contexts_.empty() && contexts_.size() == listeners_.size();
    domain_ = "mpt/" + std::to_string(contexts_.size());
    for (const auto& c : contexts_) {
      viable_ = viable_ && c->isViable();
      domain_ += "/" + c->domainDescriptor();
    }
  }

  // Lane listeners accept forever (until closed); started once shared.
  void start() {
    for (size_t i = 0; i < listeners_.size(); ++i) armAccept(i);
  }

  const std::vector<std::string>& deviceTypes() const override { return deviceTypes_; }
  bool isViable() const override { return viable_; }
  const std::string& domainDescriptor() const override { return domain_; }
  void setId(std::string id) override { id_ = std::move(id); }
  bool sendsInline() const override { return false; }

  void close() override {
    for (auto& l : listeners_) l->close();
    std::map<uint64_t, std::weak_ptr<MptEndpoint>> pending;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      pending.swap(pending_);
    }
    for (auto& p : pending) {
      if (auto e = p.second.lock()) e->close(ACTORPIPE_ERROR(ContextClosedError));
    }
  }
  void join() override {
    close();
    for (auto& c : contexts_) c->join();
  }

  std::shared_ptr<Endpoint> acceptEndpoint(std::string& setup, Error& error) override {
    std::vector<std::string> addresses;
    for (const auto& l : listeners_) {
      std::string addr = l->addr();
      if (addr.empty()) {
        error = ACTORPIPE_ERROR(LogicError, "an mpt lane listener is not listening");
        return nullptr;
      }
      addresses.push_back(addr);
    }
    auto endpoint = std::make_shared<MptEndpoint>(contexts_.size());
    uint64_t token;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      do {
        token = actorpipe::detail::secureRandom64();  // unguessable: it lets a connection join a lane
      } while (pending_.count(token));
      pending_[token] = endpoint;
    }
    setup = formatSetup(token, addresses);
    std::weak_ptr<MptContext> weak = shared_from_this();
    endpoint->onClose([weak, token] {
      if (auto self = weak.lock()) {
        std::lock_guard<std::mutex> guard(self->mutex_);
        self->pending_.erase(token);
      }
    });
    return endpoint;
  }

  std::shared_ptr<Endpoint> connectEndpoint(const std::string& setup, Error& error) override {
    uint64_t token = 0;
    std::vector<std::string> addresses;
    if ((error = parseSetup(setup, contexts_.size(), token, addresses))) return nullptr;
    auto endpoint = std::make_shared<MptEndpoint>(contexts_.size());
    for (size_t i = 0; i < contexts_.size(); ++i) {
      auto connection = contexts_[i]->connect(addresses[i]);
      auto hello = std::make_shared<std::string>(kLaneHelloSize, '\0');
      std::memcpy(&(*hello)[0], &token, 8);
      uint32_t lane = static_cast<uint32_t>(i);
      std::memcpy(&(*hello)[8], &lane, 4);
      connection->write(hello->data(), hello->size(), [hello](const Error&) {});
      endpoint->lane(i).attach(connection);
    }
    return endpoint;
  }

 private:
  void armAccept(size_t i) {
    std::weak_ptr<MptContext> weak = shared_from_this();
    listeners_[i]->accept([weak, i](const Error& e, std::shared_ptr<transport::Connection> c) {
      auto self = weak.lock();
      if (e || !self) return;  // closed
      auto hello = std::make_shared<std::array<uint8_t, kLaneHelloSize>>();
      auto& loop = self->contexts_[i]->loop();  // accept callbacks run on it
      std::weak_ptr<transport::Connection> weakLane = c;
      auto timer = loop.after(kLaneHelloTimeout, [weakLane] {
        if (auto lane = weakLane.lock()) lane->close(ACTORPIPE_ERROR(TimeoutError, "an mpt lane's hello", 5000));
      });
      c->read(hello->data(), hello->size(), [weak, c, hello, &loop, timer](const Error& e) {
        loop.cancel(timer);
        auto self = weak.lock();
        if (e || !self) return c->close();
        uint64_t token;
        uint32_t lane;
        std::memcpy(&token, hello->data(), 8);
        std::memcpy(&lane, hello->data() + 8, 4);
        std::shared_ptr<MptEndpoint> endpoint;
        {
          std::lock_guard<std::mutex> guard(self->mutex_);
          auto it = self->pending_.find(token);
          if (it != self->pending_.end()) endpoint = it->second.lock();
        }
        // Unknown tokens and lane numbers are strangers: hang up on them.
        if (!endpoint || lane >= endpoint->lanes()) return c->close();
        endpoint->lane(lane).attach(c);
      });
      self->armAccept(i);
    });
  }

  std::vector<std::shared_ptr<transport::Context>> contexts_;
  std::vector<std::shared_ptr<transport::Listener>> listeners_;
  std::vector<std::string> deviceTypes_{kCpuDeviceType};
  std::string domain_;
  std::string id_{"mpt"};
  bool viable_{false};
  std::mutex mutex_;
  std::map<uint64_t, std::weak_ptr<MptEndpoint>> pending_;
};

}  // namespace

std::shared_ptr<Context> create(std::vector<std::shared_ptr<transport::Context>> contexts,
                                std::vector<std::shared_ptr<transport::Listener>> listeners) {
  auto context = std::make_shared<MptContext>(std::move(contexts), std::move(listeners));
  context->start();
  return context;
}

std::shared_ptr<Context> create(size_t lanes, const std::string& host) {
  std::vector<std::shared_ptr<transport::Context>> contexts;
  std::vector<std::shared_ptr<transport::Listener>> listeners;
  for (size_t i = 0; i < std::max<size_t>(lanes, 1); ++i) {
    contexts.push_back(transport::uv::create());
    listeners.push_back(contexts.back()->listen(host));
  }
  return create(std::move(contexts), std::move(listeners));
}

} // namespace actorpipe::channel::mpt
