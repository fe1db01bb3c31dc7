// What the scheduler's tests share: an injected clock of 1 GHz (one tick is one ns), classes
// and drips built in one line, fake packets that carry an id, and a poller that records what
// leaves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/test_class.h"
#include "dataplane/scheduler.h"

namespace dripgate::dataplane::scheduler_test {

constexpr uint64_t kHz = 1'000'000'000;
constexpr uint64_t kNever = UINT64_MAX;

// A FIFO class (fairness: none), as the tests of rates, DRR among classes, TTL and batches
// need; the tests of sub-queues set fairness themselves.
inline config::Class make_class(const std::string& name, uint32_t weight = 1, double pps = 0,
                                double bps = 0, uint32_t depth = 1024, uint32_t ttl_ms = 0) {
  config::Class c = config::test_class(name, weight, pps, bps, depth, ttl_ms);
  c.fairness = config::Fairness::kNone;
  return c;
}

inline config::Drip make_drip(double pps, double bps = 0, uint32_t batch = 1,
                              uint32_t catchup = 8) {
  config::Drip d;
  d.rate_pps = pps;
  d.rate_bps = bps;
  d.batch = batch;
  d.max_catchup = catchup;
  return d;
}

// Packets are fake pointers carrying an id, so tests can check identity and order.
inline void* pkt(uint64_t id) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
}
inline uint64_t id_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

struct Poller {
  explicit Poller(Scheduler& sched) : s(sched) {}

  Scheduler& s;
  std::vector<Departure> sent;
  std::vector<Item> expired;

  // One poll at `now`; returns the departures of this call.
  std::vector<Departure> at(uint64_t now, unsigned max_out = 256, unsigned max_exp = 256) {
    std::vector<Departure> out(max_out);
    std::vector<Item> exp(max_exp);
    unsigned n_exp = 0;
    const unsigned n = s.poll(now, out.data(), max_out, exp.data(), max_exp, &n_exp);
    out.resize(n);
    exp.resize(n_exp);
    sent.insert(sent.end(), out.begin(), out.end());
    expired.insert(expired.end(), exp.begin(), exp.end());
    return out;
  }

  // Polls exactly at every next_departure() until nothing is queued or `end` is passed.
  void until(uint64_t end) {
    for (;;) {
      const uint64_t t = s.next_departure();
      if (t == kNever || t > end) return;
      at(t);
    }
  }
};

}  // namespace dripgate::dataplane::scheduler_test
