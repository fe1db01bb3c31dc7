// A libevent base for tests that drive asynchronous code: run the loop until a condition holds.
#pragma once

#include <event2/event.h>

#include <chrono>
#include <functional>
#include <optional>
#include <utility>

namespace dripgate::testing {

class EventLoop {
 public:
  EventLoop() : base_(event_base_new()) {}
  ~EventLoop() { event_base_free(base_); }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  event_base* base() { return base_; }

  // Runs the loop in 5 ms slices until pred() is true; false when `limit` passed first.
  template <class Pred>
  bool wait_until(Pred pred, std::chrono::milliseconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      timeval tv{0, 5000};
      event_base_loopexit(base_, &tv);
      event_base_dispatch(base_);
    }
    return true;
  }

  // Starts an asynchronous call that answers once through a callback, start(done), and runs the
  // loop until it has answered; nullopt when `limit` passed first.
  template <class R, class Start>
  std::optional<R> await(Start start, std::chrono::milliseconds limit) {
    std::optional<R> out;
    start(std::function<void(R)>([&](R r) { out = std::move(r); }));
    if (!wait_until([&] { return out.has_value(); }, limit)) return std::nullopt;
    return out;
  }

 private:
  event_base* base_;
};

}  // namespace dripgate::testing
