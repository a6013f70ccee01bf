#pragma once
// detail::Function<Signature, Capacity>: std::function with room inside.
//
// Why: libstdc++'s std::function keeps a callable inline only when it is
// trivially copyable and at most 16 bytes, so every closure that holds a
// shared_ptr (nearly all of ours: `self`) costs a heap allocation and a free.
// A small round trip posts and completes a dozen such closures per side
// (docs/benchmarks.md, "Where a small round trip's time goes"). Function
// keeps any callable of up to `Capacity` bytes inline; larger ones go to the
// heap as before. Otherwise it behaves as std::function where the library
// uses it: copyable (so the callable must be), empty when default-made or
// set to nullptr, callable through a const reference.
//
// Used for what runs on the loops: posted tasks (Loop::Task) and transport
// callbacks. The public API keeps TensorPipe's std::function signatures.
#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace actorpipe::detail {

template <typename Signature, size_t Capacity>
class Function;

template <typename R, typename... Args, size_t Capacity>
class Function<R(Args...), Capacity> {
 public:
  Function() noexcept = default;
  Function(std::nullptr_t) noexcept {}  // NOLINT: as std::function

  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, Function> && std::is_invocable_r_v<R, D&, Args...>>>
  Function(F&& f) {  // NOLINT: implicit, as std::function
    static_assert(std::is_copy_constructible_v<D>, "a Function's callable must be copyable");
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D> || isFunction<D>::value) {
      if (!f) return;  // a null function pointer or an empty std::function: empty, as std::function
    }
    if constexpr (kInline<D>) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      *reinterpret_cast<D**>(storage_) = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }

  Function(const Function& other) {
    if (other.ops_ != nullptr) {
      other.ops_->copy(storage_, other.storage_);
      ops_ = other.ops_;
    }
  }
  Function(Function&& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(storage_, other.storage_);
      ops_ = other.ops_;
      other.ops_ = nullptr;
    }
  }
  Function& operator=(const Function& other) {
    if (this != &other) {
      Function copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  Function& operator=(Function&& other) noexcept {
    if (this != &other) {
      reset();
      if (other.ops_ != nullptr) {
        other.ops_->move(storage_, other.storage_);
        ops_ = other.ops_;
        other.ops_ = nullptr;
      }
    }
    return *this;
  }
  Function& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, Function> && std::is_invocable_r_v<R, D&, Args...>>>
  Function& operator=(F&& f) {
    *this = Function(std::forward<F>(f));
    return *this;
  }
  ~Function() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  friend bool operator==(const Function& f, std::nullptr_t) noexcept { return !f; }
  friend bool operator!=(const Function& f, std::nullptr_t) noexcept { return static_cast<bool>(f); }

  // As std::function: an empty one throws std::bad_function_call.
  R operator()(Args... args) const {
    if (ops_ == nullptr) throw std::bad_function_call();
    return ops_->call(const_cast<unsigned char*>(storage_), std::forward<Args>(args)...);
  }

 private:
  template <typename T>
  struct isFunction : std::false_type {};
  template <typename S>
  struct isFunction<std::function<S>> : std::true_type {};
  template <typename S, size_t C>
  struct isFunction<Function<S, C>> : std::true_type {};

  struct Ops {
    R (*call)(void*, Args&&...);
    void (*copy)(void* to, const void* from);
    void (*move)(void* to, void* from) noexcept;  // leaves `from` destroyed
    void (*destroy)(void*) noexcept;
  };

  template <typename D>
  static constexpr bool kInline = sizeof(D) <= Capacity && alignof(D) <= alignof(std::max_align_t) &&
                                  std::is_nothrow_move_constructible_v<D>;

  template <typename D>
  static constexpr Ops kInlineOps{
      [](void* s, Args&&... args) -> R { return std::invoke(*static_cast<D*>(s), std::forward<Args>(args)...); },
      [](void* to, const void* from) { ::new (to) D(*static_cast<const D*>(from)); },
      [](void* to, void* from) noexcept {
        ::new (to) D(std::move(*static_cast<D*>(from)));
        static_cast<D*>(from)->~D();
      },
      [](void* s) noexcept { static_cast<D*>(s)->~D(); },
  };
  template <typename D>
  static constexpr Ops kHeapOps{
      [](void* s, Args&&... args) -> R { return std::invoke(**static_cast<D**>(s), std::forward<Args>(args)...); },
      [](void* to, const void* from) { *static_cast<D**>(to) = new D(**static_cast<D* const*>(from)); },
      [](void* to, void* from) noexcept { *static_cast<D**>(to) = *static_cast<D**>(from); },
      [](void* s) noexcept { delete *static_cast<D**>(s); },
  };

  void reset() noexcept {
    if (ops_ != nullptr) {
      const Ops* ops = ops_;
      ops_ = nullptr;
      ops->destroy(storage_);
    }
  }

  static_assert(Capacity >= sizeof(void*), "room for at least a pointer");
  alignas(std::max_align_t) unsigned char storage_[Capacity];
  const Ops* ops_{nullptr};
};

}  // namespace actorpipe::detail
