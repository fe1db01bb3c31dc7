// An absolute departure timeline: `next` is when the next packet may leave, and every departure
// moves it by one interval from where it was (not from when the packet actually left), so
// timing noise in the caller never lowers the long-run rate.
//
// Positions and intervals are fixed point, TSC ticks << 32 (Fixed), so an interval such as
// 3 1/3 ticks does not drift. Intervals are rounded UP to the 2^-32 tick grid (exactly, by
// integer division, when tsc_hz and the rate are integers), so the timeline can only lag the
// ideal one, by less than 2^-32 tick per departure: with an ideal interval p/q ticks, departure
// k is booked at exactly floor(k * p / q) for every k < 2^32 / q, and the long-run rate is low
// by less than 2^-32 / interval (relative), far below anything a clock can measure.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

namespace dripgate::dataplane {

__extension__ typedef unsigned __int128 Fixed;  // Q96.32 TSC ticks

inline constexpr unsigned kFracBits = 32;
// Preamble (7) + SFD (1) + inter-frame gap (12) + FCS (4): what a frame costs on the wire
// beyond the bytes that rte_pktmbuf_pkt_len counts (the port strips the FCS on receive and adds
// it on send). rate_bps is a line rate, so a link of that speed carries exactly that rate; DPDK's
// rte_sched counts the same 24 B (RTE_SCHED_FRAME_OVERHEAD_DEFAULT).
inline constexpr uint32_t kWireOverheadBytes = 24;
// Bound on the byte count used for an interval, so Fixed arithmetic cannot overflow; no real
// frame (even a multi-segment TSO mbuf) comes near it.
inline constexpr uint32_t kMaxIntervalBytes = 1u << 20;
// Largest tsc_hz accepted (1 THz), so hz * 8 << 64 fits in Fixed.
inline constexpr uint64_t kMaxTscHz = uint64_t{1} << 40;
// Slowest allowed intervals, so K * interval and positions stay far from overflow: 2^48 ticks
// per packet (a day at 3 GHz) and 2^32 ticks per byte.
inline constexpr uint64_t kMaxTicksPerPacket = uint64_t{1} << 48;
inline constexpr uint64_t kMaxTicksPerByte = uint64_t{1} << 32;
// Fastest allowed rates: above any port the dataplane drives (400 GbE carries under 600 Mpps of
// minimum-size frames), so a larger number is a typo or an attack, not a rate.
inline constexpr double kMaxRatePps = 1e9;
inline constexpr double kMaxRateBps = 1e12;

inline constexpr Fixed to_fixed(uint64_t ticks) {
  return Fixed{ticks} << kFracBits;
}
inline constexpr uint64_t floor_ticks(Fixed f) {
  return static_cast<uint64_t>(f >> kFracBits);
}

namespace timeline_detail {

inline constexpr Fixed ceil_div(Fixed num, Fixed den) {
  return num / den + (num % den != 0);
}

// ceil(hz * mul * 2^shift / rate), exactly when rate is an integer below 2^63, otherwise from
// the double quotient (rates from YAML such as 0.5 pps). rate > 0, finite.
inline Fixed scaled_ceil(uint64_t hz, uint64_t mul, unsigned shift, double rate) {
  if (rate < 9.2e18 && rate == std::floor(rate)) {
    return ceil_div((Fixed{hz} * mul) << shift, static_cast<uint64_t>(rate));
  }
  const double q = std::ceil(std::ldexp(static_cast<double>(hz) * static_cast<double>(mul) / rate,
                                        static_cast<int>(shift)));
  return static_cast<Fixed>(q);
}

}  // namespace timeline_detail

// Checks one rate (pps or bps); empty string when valid. 0 means unlimited.
inline std::string check_rate(double rate, bool bits, uint64_t tsc_hz) {
  if (!std::isfinite(rate) || rate < 0) return "rate must be a finite number >= 0";
  if (rate == 0) return {};
  if (rate > (bits ? kMaxRateBps : kMaxRatePps)) {
    return bits ? "rate_bps too high (the maximum is 1e12 bits per second)"
                : "rate_pps too high (the maximum is 1e9 packets per second)";
  }
  const double ticks = static_cast<double>(tsc_hz) * (bits ? 8.0 : 1.0) / rate;
  if (ticks > static_cast<double>(bits ? kMaxTicksPerByte : kMaxTicksPerPacket)) {
    return bits ? "rate_bps too low (more than 2^32 TSC ticks per byte)"
                : "rate_pps too low (more than 2^48 TSC ticks per packet)";
  }
  return {};
}

// The rates in force live here and nowhere else: the owner writes them in set_rate(), any
// thread may read them (rate_pps(), rate_bps()); everything else is the owner's alone.
class Timeline {
 public:
  Timeline() = default;
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Rates as in the config: packets/s and bits/s on the wire (frame + kWireOverheadBytes), 0 =
  // unlimited, both set = the larger interval wins. Preconditions: check_rate() passed and
  // 0 < tsc_hz <= kMaxTscHz. Keeps the timeline continuous: the next departure becomes
  //   max(last departure + one interval at the new rate, min(previous next, now))
  // i.e. as if the last departure had been made at the new rate, but never earlier than `now`
  // (a faster rate grants no retroactive catch-up) unless the port was already due. So queued
  // packets neither wait out an old long interval nor burst.
  void set_rate(double pps, double bps, uint64_t tsc_hz, uint64_t now) {
    pps_.store(pps, std::memory_order_relaxed);
    bps_.store(bps, std::memory_order_relaxed);
    pkt_interval_ = pps > 0 ? timeline_detail::scaled_ceil(tsc_hz, 1, kFracBits, pps) : 0;
    // Ticks per byte in Q.64 for precision; interval() brings it back to Q.32.
    byte_interval_q64_ = bps > 0 ? timeline_detail::scaled_ceil(tsc_hz, 8, 64, bps) : 0;
    limited_ = pkt_interval_ != 0 || byte_interval_q64_ != 0;
    if (has_last_) {
      next_ = std::max(last_base_ + interval(last_len_), std::min(next_, to_fixed(now)));
    }
  }

  double rate_pps() const { return pps_.load(std::memory_order_relaxed); }
  double rate_bps() const { return bps_.load(std::memory_order_relaxed); }
  // Cached: the scheduler asks per packet, and two 128-bit compares are not free.
  bool limited() const { return limited_; }

  // The interval one frame of frame_len bytes occupies (0 when unlimited).
  Fixed interval(uint32_t frame_len) const {
    if (!limited_) return 0;
    Fixed iv = pkt_interval_;
    if (byte_interval_q64_ != 0) {
      const uint32_t bytes = std::min(frame_len, kMaxIntervalBytes) + kWireOverheadBytes;
      const Fixed by_bytes = (byte_interval_q64_ * bytes + ((Fixed{1} << 32) - 1)) >> 32;
      iv = std::max(iv, by_bytes);
    }
    return iv;
  }

  Fixed next() const { return next_; }
  uint64_t next_tsc() const { return floor_ticks(next_); }
  bool permits(uint64_t now) const { return !limited_ || next_tsc() <= now; }

  // Books one departure of frame_len bytes and returns its scheduled position:
  //   base = max(next, earliest), then, when limited, the catch-up clamp:
  //   if now - base > max_catchup * interval then base = now - max_catchup * interval
  //   next = base + interval.
  // So after a stall at most max_catchup departures are booked before `now` (late) and the one
  // booked at `now` is on time; after that the timeline runs on schedule again. `earliest` is
  // when the packet could first have left (its enqueue time, or its class's cap); it is what
  // keeps idle time from turning into catch-up credit. *clamped is set when the clamp fired.
  Fixed depart(Fixed earliest, uint64_t now, uint32_t frame_len, uint32_t max_catchup,
               bool* clamped) {
    Fixed base = std::max(next_, earliest);
    last_len_ = frame_len;
    has_last_ = true;
    if (!limited_) {  // interval 0: no clamp, next = base (what the general path computes)
      last_base_ = base;
      next_ = base;
      return base;
    }
    const Fixed iv = interval(frame_len);
    {
      const Fixed now_f = to_fixed(now);
      const Fixed lag = iv * max_catchup;
      const Fixed lower = now_f > lag ? now_f - lag : 0;
      if (base < lower) {
        base = lower;
        *clamped = true;
      }
    }
    last_base_ = base;
    next_ = base + iv;
    return base;
  }

  // A further departure in the same batch slot: advances by one interval without re-basing.
  void advance(uint32_t frame_len) {
    last_base_ = next_;
    last_len_ = frame_len;
    has_last_ = true;
    if (limited_) next_ += interval(frame_len);
  }

 private:
  std::atomic<double> pps_{0};  // as configured, for readers on other threads
  std::atomic<double> bps_{0};
  Fixed pkt_interval_ = 0;       // Q.32 ticks per packet, 0 = no packet-rate limit
  Fixed byte_interval_q64_ = 0;  // Q.64 ticks per wire byte, 0 = no bit-rate limit
  bool limited_ = false;         // either interval set
  Fixed next_ = 0;
  Fixed last_base_ = 0;
  uint32_t last_len_ = 0;
  bool has_last_ = false;
};

}  // namespace dripgate::dataplane
