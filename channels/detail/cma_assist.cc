#include <actorpipe/channels/detail/cma_assist.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace actorpipe::channel::detail {
namespace {

std::atomic<uint64_t> assisted{0};

}  // namespace

void futexWait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
  // Not FUTEX_PRIVATE: the word is in a page the peer process maps too.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

uint64_t assistedBytes() { return assisted.load(std::memory_order_relaxed); }
void countAssisted(uint64_t bytes) { assisted.fetch_add(bytes, std::memory_order_relaxed); }

}  // namespace actorpipe::channel::detail
