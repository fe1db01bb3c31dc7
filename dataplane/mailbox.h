// The one way a change reaches a worker lcore's state from the main lcore: the poster (the
// control socket, a reload) puts a request into a single slot and waits; the owner takes it
// between bursts, applies it and answers (applied, or why not). So the owner's state (the
// scheduler, the RX side's classifier) is never touched from two threads, queued packets stay
// queued, and whatever a change needed allocated was allocated by the poster, never per packet.
// One mailbox per owner and kind of request: DripMailbox for the scheduler's owner, RxMailbox
// for the lcore that classifies (the same lcore in the single layout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "config/config.h"

namespace dripgate::dataplane {

class Classifier;
class Scheduler;
struct SchedulerReconfig;

struct MailboxResult {
  bool ok = false;
  std::string error;
};

template <typename Request>
class Mailbox {
 public:
  using Result = MailboxResult;

  // Poster (one thread): posts and waits for the owner's answer (false: the owner did not
  // answer in time; a later post is refused until it has, and whatever r points to must stay
  // alive until then: see idle()).
  bool post_and_wait(const Request& r, Result* out, std::chrono::milliseconds timeout) {
    const uint64_t p = posted_.load(std::memory_order_relaxed);
    if (!idle()) {
      *out = {false, "a previous change is still pending (worker not answering)"};
      return false;
    }
    req_ = r;
    posted_.store(p + 1, std::memory_order_release);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (done_.load(std::memory_order_acquire) != p + 1) {
      if (std::chrono::steady_clock::now() > deadline) {
        *out = {false, "the worker lcore did not take the change in time"};
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    *out = result_;
    return true;
  }

  // Poster: true when the owner has answered every request posted.
  bool idle() const {
    return done_.load(std::memory_order_acquire) == posted_.load(std::memory_order_relaxed);
  }

  // Owner: applies a pending request, if any, with apply(const Request&) -> Result. One acquire
  // load when there is none, so the fast path calls it every loop.
  // Returns whether it applied one.
  template <typename Apply>
  bool poll(Apply&& apply) {
    const uint64_t p = posted_.load(std::memory_order_acquire);
    if (p == done_.load(std::memory_order_relaxed)) [[likely]]
      return false;
    result_ = apply(req_);
    done_.store(p, std::memory_order_release);
    return true;
  }

 private:
  alignas(64) std::atomic<uint64_t> posted_{0};
  alignas(64) std::atomic<uint64_t> done_{0};
  Request req_{};
  Result result_;
};

// For the scheduler's owner (the drip lcore): a rate change (the control socket's set_rate),
// or, when reconfig is set, a reload's whole scheduler part, prepared by Scheduler::prepare.
struct DripChange {
  static constexpr int kPort = -1;
  int cls = kPort;  // a class index, or kPort
  double pps = 0, bps = 0;
  SchedulerReconfig* reconfig = nullptr;
};
using DripMailbox = Mailbox<DripChange>;

// Owner: r applied to the scheduler at TSC `now` (what DripMailbox::poll's apply does).
MailboxResult apply_drip_change(Scheduler& sched, const DripChange& r, uint64_t now);

// For the lcore that classifies: the rules and the unknown_flows policy of a reload. The
// classifier is owned by the poster, which frees the one it replaces after the answer.
struct RxChange {
  const Classifier* classifier = nullptr;
  config::UnknownFlows unknown = config::UnknownFlows::kDefault;
};
using RxMailbox = Mailbox<RxChange>;

}  // namespace dripgate::dataplane
