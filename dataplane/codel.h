// CoDel (RFC 8289), the sojourn-time control law the scheduler runs per queue of a class with
// `aqm`: when the time packets spend queued has stayed above `target` for a whole `interval`,
// the queue enters a dropping state and drops (or marks) one head packet, the next one
// interval / sqrt(count) later, and so on until the sojourn falls below target again. Plain
// C++ on an injected clock (TSC ticks), no DPDK; the caller owns the queue and asks at each
// dequeue what to do with its head.
//
// What differs from the RFC's pseudocode, and why:
// * The caller, not CoDel, removes a dropped head and asks again for the next one (the RFC's
//   loop inside dequeue() becomes the caller's loop), so the same state serves a FIFO class
//   and each tenant's sub-queue of a fair class.
// * ECN (RFC 8289 section 5.6, as Linux's codel_dequeue): for an ECN-capable head the answer
//   is kMark instead of kDrop; the packet leaves with CE set and the schedule advances as if
//   it had been dropped.
// * Each head is judged once: the caller remembers a verdict of kKeep or kMark for the head it
//   was given (it may look at a head several times before it leaves, e.g. while a rate cap
//   holds its class).
// * 1/sqrt(count) is computed in floating point; the scheduler's owner thread may use the FPU
//   and a dequeue in the dropping state is rare, so the RFC's Newton step buys nothing here.
#pragma once

#include <cmath>
#include <cstdint>

namespace dripgate::dataplane {

struct CodelParams {
  uint64_t target = 0;    // ticks; 0: AQM off
  uint64_t interval = 0;  // ticks
  // A queue holding at most this many bytes is never judged: one frame cannot be a standing
  // queue (the RFC's maxpacket).
  uint32_t max_packet = 1514;
  bool ecn = false;  // mark ECN-capable packets instead of dropping them
  bool enabled() const { return target != 0; }
};

class Codel {
 public:
  enum class Verdict { kKeep, kDrop, kMark };

  // At dequeue time `now`, for the queue's head: its sojourn (now - enqueue stamp), whether it
  // is ECN capable, and the bytes queued in this queue (head included). kDrop: the caller
  // removes the head, counts it and asks again for the new head in the same dequeue. kMark:
  // the head leaves with CE set. kKeep: the head leaves as it is.
  Verdict on_dequeue(const CodelParams& p, uint64_t now, uint64_t sojourn, uint64_t queue_bytes,
                     bool ect) {
    const bool ok_to_drop = judge(p, now, sojourn, queue_bytes);
    if (dropping_) {
      if (!ok_to_drop) {
        dropping_ = false;
        return Verdict::kKeep;
      }
      if (now < drop_next_) return Verdict::kKeep;
      ++count_;
      drop_next_ = control_law(p, drop_next_, count_);
      return drop_or_mark(p, ect);
    }
    if (!ok_to_drop) return Verdict::kKeep;
    // Enter the dropping state. When it was left only a little while ago, start from the drop
    // rate it had reached (count - lastcount) instead of from one.
    dropping_ = true;
    const uint32_t delta = count_ - last_count_;
    count_ = delta > 1 && now - drop_next_ < 16 * p.interval ? delta : 1;
    last_count_ = count_;
    drop_next_ = control_law(p, now, count_);
    return drop_or_mark(p, ect);
  }

  // The queue ran empty: as the RFC's dequeue of an empty queue, which judges "not ok to drop".
  void on_empty() {
    first_above_ = 0;
    dropping_ = false;
  }

  bool dropping() const { return dropping_; }
  uint32_t count() const { return count_; }
  uint64_t drop_next() const { return drop_next_; }

  static uint64_t control_law(const CodelParams& p, uint64_t t, uint32_t count) {
    return t + static_cast<uint64_t>(static_cast<double>(p.interval) / std::sqrt(double(count)));
  }

 private:
  // The RFC's dodequeue(): true when the sojourn has stayed above target for an interval.
  bool judge(const CodelParams& p, uint64_t now, uint64_t sojourn, uint64_t queue_bytes) {
    if (sojourn < p.target || queue_bytes <= p.max_packet) {
      first_above_ = 0;
      return false;
    }
    if (first_above_ == 0) {
      first_above_ = now + p.interval;
      return false;
    }
    return now >= first_above_;
  }
  Verdict drop_or_mark(const CodelParams& p, bool ect) {
    return p.ecn && ect ? Verdict::kMark : Verdict::kDrop;
  }

  uint64_t first_above_ = 0;
  uint64_t drop_next_ = 0;
  uint32_t count_ = 0;
  uint32_t last_count_ = 0;
  bool dropping_ = false;
};

}  // namespace dripgate::dataplane
