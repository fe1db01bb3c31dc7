#include "dataplane/rate_mailbox.h"

#include <thread>

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

bool RateMailbox::post_and_wait(const Request& r, Result* out, std::chrono::milliseconds timeout) {
  uint64_t p = posted_.load(std::memory_order_relaxed);
  if (done_.load(std::memory_order_acquire) != p) {
    *out = {false, "a previous rate change is still pending (worker not answering)"};
    return false;
  }
  req_ = r;
  posted_.store(p + 1, std::memory_order_release);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (done_.load(std::memory_order_acquire) != p + 1) {
    if (std::chrono::steady_clock::now() > deadline) {
      *out = {false, "the drip lcore did not take the rate change in time"};
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  *out = result_;
  return true;
}

// The strings are only touched on a control request, never per packet.
RateMailbox::Result apply_rate(Scheduler& sched, const RateMailbox::Request& r, uint64_t now) {
  RateMailbox::Result res;
  if (r.cls == RateMailbox::kPort) {
    res.ok = sched.set_port_rate(r.pps, r.bps, now, &res.error);
  } else {
    res.ok = sched.set_class_rate(static_cast<unsigned>(r.cls), r.pps, r.bps, now, &res.error);
  }
  return res;
}

}  // namespace dripgate::dataplane
