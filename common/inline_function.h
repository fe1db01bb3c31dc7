// InlineFunction: a copyable function like std::function that keeps small callables in place.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace dripgate::common {

// A copyable function like std::function, whose callable is kept in place up to kInPlace bytes
// (std::function: 16): a callback that holds a few pointers (the Redis client's, carrying the
// admission engine's gateway and shared state: 24 bytes) then costs no allocation and no free
// per call. A larger callable, or
// one whose move may throw, goes to the heap as with std::function.
template <class Sig>
class InlineFunction;

template <class R, class... A>
class InlineFunction<R(A...)> {
 public:
  static constexpr size_t kInPlace = 48;

  InlineFunction() noexcept = default;
  InlineFunction(std::nullptr_t) noexcept {}
  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, InlineFunction> &&
                                     std::is_invocable_r_v<R, D&, A...>>>
  InlineFunction(F&& f) {
    // An empty std::function (or null pointer) makes an empty one, as std::function does.
    if constexpr (requires { f == nullptr; })
      if (f == nullptr) return;
    if constexpr (kFits<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInPlaceOps<D>;
    } else {
      *reinterpret_cast<D**>(buf_) = new D(std::forward<F>(f));
      ops_ = &kHeapOps<D>;
    }
  }
  InlineFunction(const InlineFunction& o) {
    if (o.ops_) o.ops_->copy(o.buf_, buf_);
    ops_ = o.ops_;
  }
  InlineFunction(InlineFunction&& o) noexcept {
    if (o.ops_) o.ops_->move(o.buf_, buf_);
    ops_ = std::exchange(o.ops_, nullptr);
  }
  InlineFunction& operator=(const InlineFunction& o) {
    if (this != &o) *this = InlineFunction(o);
    return *this;
  }
  InlineFunction& operator=(InlineFunction&& o) noexcept {
    if (this != &o) {
      reset();
      if (o.ops_) o.ops_->move(o.buf_, buf_);
      ops_ = std::exchange(o.ops_, nullptr);
    }
    return *this;
  }
  InlineFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  ~InlineFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  R operator()(A... a) const { return ops_->call(buf_, std::forward<A>(a)...); }

 private:
  // What the stored callable's type knows: each moves (from then destroyed), copies, calls and
  // destroys it.
  struct Ops {
    R (*call)(unsigned char* buf, A&&... a);
    void (*move)(unsigned char* from, unsigned char* to) noexcept;
    void (*copy)(const unsigned char* from, unsigned char* to);
    void (*destroy)(unsigned char* buf) noexcept;
  };
  template <class D>
  static constexpr bool kFits =
      sizeof(D) <= kInPlace &&
      alignof(D) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<D>;
  template <class D>
  static D* in_place(unsigned char* buf) {
    return std::launder(reinterpret_cast<D*>(buf));
  }
  template <class D>
  static D* on_heap(const unsigned char* buf) {
    return *reinterpret_cast<D* const*>(buf);
  }
  template <class D>
  static constexpr Ops kInPlaceOps = {
      [](unsigned char* buf, A&&... a) -> R {
        return std::invoke(*in_place<D>(buf), std::forward<A>(a)...);
      },
      [](unsigned char* from, unsigned char* to) noexcept {
        ::new (static_cast<void*>(to)) D(std::move(*in_place<D>(from)));
        in_place<D>(from)->~D();
      },
      [](const unsigned char* from, unsigned char* to) {
        ::new (static_cast<void*>(to)) D(*in_place<D>(const_cast<unsigned char*>(from)));
      },
      [](unsigned char* buf) noexcept { in_place<D>(buf)->~D(); }};
  template <class D>
  static constexpr Ops kHeapOps = {[](unsigned char* buf, A&&... a) -> R {
                                     return std::invoke(*on_heap<D>(buf), std::forward<A>(a)...);
                                   },
                                   [](unsigned char* from, unsigned char* to) noexcept {
                                     *reinterpret_cast<D**>(to) = on_heap<D>(from);
                                   },
                                   [](const unsigned char* from, unsigned char* to) {
                                     *reinterpret_cast<D**>(to) = new D(*on_heap<D>(from));
                                   },
                                   [](unsigned char* buf) noexcept { delete on_heap<D>(buf); }};

  void reset() noexcept {
    if (ops_) std::exchange(ops_, nullptr)->destroy(buf_);
  }

  const Ops* ops_ = nullptr;
  // Mutable: a call runs the callable as std::function does, through a const function.
  alignas(std::max_align_t) mutable unsigned char buf_[kInPlace];
};

}  // namespace dripgate::common
