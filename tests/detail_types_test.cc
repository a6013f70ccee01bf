// The small types of the hot path (issue 14: no heap allocation per small
// message): detail::Function keeps closures inline and behaves as
// std::function; detail::Fifo reuses its ring; transport::Slices keeps a
// write's first four pieces inline. Allocations are counted by replacing the
// global operator new in this program.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <actorpipe/runtime/detail/fifo.h>
#include <actorpipe/runtime/detail/function.h>
#include <actorpipe/transports/context.h>

namespace {
std::atomic<long> gNews{0};
}

void* operator new(std::size_t size) {
  gNews.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using actorpipe::detail::Fifo;
using actorpipe::detail::Function;

namespace {
long newsDuring(const std::function<void()>& fn) {
  const long before = gNews.load();
  fn();
  return gNews.load() - before;
}
}  // namespace

TEST_CASE("Function: a closure holding shared_ptrs stays inline, one too large goes to the heap") {
  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<int>(2);
  int sum = 0;
  bool movedFromEmpty = false;
  // (No CHECK inside a counted region: doctest may allocate for its own.)
  CHECK(newsDuring([&] {
          Function<void(int), 64> f = [a, b, &sum](int x) { sum += *a + *b + x; };
          Function<void(int), 64> g = std::move(f);
          movedFromEmpty = !f;
          g(3);
          Function<void(int), 64> h = g;  // a copy of an inline closure: inline too
          h(0);
        }) == 0);
  CHECK(movedFromEmpty);
  CHECK(sum == 9);
  CHECK(a.use_count() == 1);  // every copy released its captures

  struct Big {
    char bytes[200];
    std::shared_ptr<int> keep;
    int operator()() const { return bytes[0] + *keep; }
  };
  Big big{};
  big.bytes[0] = 5;
  big.keep = a;
  int results = 0;
  long uses = 0;
  long news = newsDuring([&] {
    Function<int(), 64> f = big;
    Function<int(), 64> g = f;
    results = f() + g();
    uses = a.use_count();
  });
  CHECK(results == 12);
  CHECK(uses == 4);
  CHECK(news == 2);  // one per heap copy, freed with it
  CHECK(a.use_count() == 2);
}

TEST_CASE("Function: empty, nullptr, assignment and state as std::function") {
  Function<int(), 32> f;
  CHECK(!f);
  CHECK(f == nullptr);
  CHECK_THROWS_AS(f(), std::bad_function_call);
  f = [n = 0]() mutable { return ++n; };  // a mutable closure keeps its state
  CHECK(f != nullptr);
  CHECK(f() == 1);
  CHECK(f() == 2);
  Function<int(), 32> g = f;  // copies the state
  CHECK(g() == 3);
  CHECK(f() == 3);
  f = nullptr;
  CHECK(!f);
  std::function<int()> none;
  Function<int(), 32> fromEmpty = none;  // an empty std::function makes an empty Function
  CHECK(!fromEmpty);
  int (*nullFn)() = nullptr;
  Function<int(), 32> fromNull = nullFn;
  CHECK(!fromNull);
  g = g;  // self-assignment keeps it
  CHECK(g() == 4);
}

TEST_CASE("Fifo: order across wrap-around and growth, and no allocation once grown") {
  Fifo<std::unique_ptr<int>> q;
  int next = 0, expect = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < round % 7 + 1; ++i) q.push_back(std::make_unique<int>(next++));
    while (q.size() > static_cast<size_t>(round % 3)) {
      CHECK(*q.takeFront() == expect++);
    }
  }
  CHECK(*q.front() == expect);
  CHECK(*q[q.size() - 1] == next - 1);
  CHECK(*q.back() == next - 1);
  std::vector<int> rest;
  q.drain([&](std::unique_ptr<int> p) { rest.push_back(*p); });
  CHECK(q.empty());
  CHECK(rest.size() == static_cast<size_t>(next - expect));

  Fifo<int> steady;
  for (int i = 0; i < 3; ++i) steady.push_back(i);
  while (!steady.empty()) steady.popFront();
  CHECK(newsDuring([&] {
          for (int i = 0; i < 10000; ++i) {
            steady.push_back(i);
            if (i % 2 == 1) {
              steady.popFront();
              steady.popFront();
            }
          }
        }) == 0);
  int seen = 0;
  steady.forEach([&](int&) { ++seen; });
  CHECK(seen == 0);
}

TEST_CASE("Slices: four pieces inline, more on the heap, in order either way") {
  using actorpipe::transport::Slice;
  using actorpipe::transport::Slices;
  char bytes[8];
  size_t size = 0, last = 0;
  CHECK(newsDuring([&] {
          Slices s{{bytes, 1}, {bytes + 1, 2}};
          s.push_back({bytes + 3, 3});
          s.push_back({bytes + 6, 2});
          Slices moved = std::move(s);
          size = moved.size();
          last = moved[3].length;
        }) == 0);
  CHECK(size == 4);
  CHECK(last == 2);
  Slices many;
  for (size_t i = 0; i < 9; ++i) many.push_back({bytes + (i % 8), i});
  CHECK(many.size() == 9);
  size_t i = 0;
  for (const Slice& s : many) {
    CHECK(s.length == i);
    CHECK(s.ptr == bytes + (i % 8));
    ++i;
  }
  Slices copy = many;
  CHECK(copy[8].length == 8);
  CHECK(copy.data() != many.data());
}
