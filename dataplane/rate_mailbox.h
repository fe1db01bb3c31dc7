// The one way a rate change reaches the scheduler from another thread: the control socket (main
// lcore) posts a request into a single slot and waits; the scheduler's owner takes it between
// bursts and applies it with Scheduler::set_port_rate / set_class_rate. So the scheduler is
// never touched from two threads, queued packets stay queued, and the poster gets the owner's
// answer (applied, or why not).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace dripgate::dataplane {

class Scheduler;

class RateMailbox {
 public:
  static constexpr int kPort = -1;
  struct Request {
    int cls = kPort;  // a class index, or kPort
    double pps = 0, bps = 0;
  };
  struct Result {
    bool ok = false;
    std::string error;
  };

  // Poster (one thread): posts and waits for the owner's answer (false: the owner did not
  // answer in time; a later post is refused until it has).
  bool post_and_wait(const Request& r, Result* out, std::chrono::milliseconds timeout);

  // Owner: applies a pending request, if any, with apply(const Request&) -> Result. One acquire
  // load when there is none, so the fast path calls it every loop.
  template <typename Apply>
  void poll(Apply&& apply) {
    uint64_t p = posted_.load(std::memory_order_acquire);
    if (p == done_.load(std::memory_order_relaxed)) [[likely]]
      return;
    result_ = apply(req_);
    done_.store(p, std::memory_order_release);
  }

 private:
  alignas(64) std::atomic<uint64_t> posted_{0};
  alignas(64) std::atomic<uint64_t> done_{0};
  Request req_;
  Result result_;
};

// Owner: r applied to the scheduler at TSC `now` (what RateMailbox::poll's apply does).
RateMailbox::Result apply_rate(Scheduler& sched, const RateMailbox::Request& r, uint64_t now);

}  // namespace dripgate::dataplane
