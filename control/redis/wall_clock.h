// The daemon's wall clock, in unix milliseconds: what it names time by to Redis (the quota
// month and reservation windows of a call, a script's deadline) and what Redis's own clock is
// measured against (RedisClient::clock_offset_ms). One place, so that a test can run the daemon
// ahead of or behind Redis, as on a host whose clock is off.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace dripgate::control {

// How far the daemon's clock is put off the system's: 0 but in tests.
inline std::atomic<int64_t> wall_skew_ms{0};

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
             .count() +
         wall_skew_ms.load(std::memory_order_relaxed);
}

inline int64_t wall_s() {
  return wall_ms() / 1000;
}

}  // namespace dripgate::control
