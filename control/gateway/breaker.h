// The circuit breaker between a worker and its Redis (redis.breaker). A tenant's on_failure
// (open, local) is what the box decides while Redis is away; the breaker says when Redis is
// away, so that one slow call does not send a request to the degraded mode, and a Redis that is
// away does not cost every request its timeout:
//   closed     every call goes to Redis; a failed one is answered 503 as itself. `failures`
//              failures in a row, or a lost connection, open the breaker.
//   open       no call goes to Redis: each is decided at once as the tenant's on_failure says
//              (closed: 503). After open_ms the breaker is half-open.
//   half-open  one call at a time goes to Redis as a probe, the rest are decided as when open;
//              `probes` answered probes in a row close it, a failed one opens it again.
// Plain state with the time given by the caller (tests inject it); one per worker, on its loop.
#pragma once

#include <cstdint>
#include <string_view>

namespace dripgate::control {

class Breaker {
 public:
  struct Options {
    int failures = 5;
    int64_t open_ms = 1000;
    int probes = 3;
  };
  enum class State { kClosed, kOpen, kHalfOpen };
  static std::string_view name(State s) {
    return s == State::kClosed ? "closed" : s == State::kOpen ? "open" : "half_open";
  }

  Breaker() = default;
  explicit Breaker(Options o) : o_(o) {}
  void set_options(Options o) { o_ = o; }

  // Whether a call is sent to Redis at now_ms; a true in half-open is the probe, and must be
  // followed by succeeded() or failed().
  bool allow(int64_t now_ms) {
    if (state_ == State::kOpen) {
      if (now_ms - opened_ms_ < o_.open_ms) return false;
      to(State::kHalfOpen);
      successes_ = 0;
      probing_ = false;
    }
    if (state_ == State::kHalfOpen) {
      if (probing_) return false;
      probing_ = true;
    }
    return true;
  }
  // A call sent to Redis was answered (a decision, a refusal included).
  void succeeded() {
    if (state_ == State::kClosed) {
      failures_ = 0;
    } else if (state_ == State::kHalfOpen) {
      probing_ = false;
      if (++successes_ >= o_.probes) {
        failures_ = 0;
        to(State::kClosed);
      }
    }
  }
  // A call sent to Redis failed; lost: the worker has no connection to Redis left.
  void failed(int64_t now_ms, bool lost) {
    if (state_ == State::kOpen) return;
    if (state_ == State::kHalfOpen || lost || ++failures_ >= o_.failures) {
      probing_ = false;
      opened_ms_ = now_ms;
      to(State::kOpen);
    }
  }
  State state() const { return state_; }

 private:
  void to(State s) { state_ = s; }

  Options o_;
  State state_ = State::kClosed;
  int failures_ = 0, successes_ = 0;
  bool probing_ = false;
  int64_t opened_ms_ = 0;
};

}  // namespace dripgate::control
