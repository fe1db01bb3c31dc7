// The brake's state in Redis (brake.h): the admin API's calls and the poller that keeps each
// daemon's copy current.
//
// One key (keys::brake(), hash tag {brake}: a slot of its own on a cluster) holds the brake in
// force as JSON {"factor": f, "exempt_plans": [...]}; it is written with one SET ... EX ttl_s,
// so Redis lifts the brake itself when the ttl is over, and removed with DEL. Every daemon reads
// it every kPollMs (one GET) and publishes what it read through the ConfigStore: a brake set
// on any daemon is in force on all of them within a poll. Redis unreachable: the brake read
// last stays in force (admissions fail or decide locally then anyway).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "control/admission/brake.h"
#include "control/admission/config_snapshot.h"
#include "control/redis/redis_calls.h"
#include "control/registry/poll_thread.h"

namespace dripgate::control {

namespace brake {
inline constexpr int kPollMs = 100;

// The value stored in Redis, and back (nullopt: not a brake this daemon understands).
std::string encode(const Brake& b);
std::optional<Brake> decode(std::string_view value);

// The admin API's calls, on the loop of `redis` (a worker's engine); `done` runs there, once,
// with an empty error on success.
void set(RedisCalls& redis, const Brake& b, std::function<void(std::string error)> done);
void lift(RedisCalls& redis, std::function<void(std::string error)> done);
// The brake in Redis now (nullopt: none), its ttl_s the seconds left.
void read(RedisCalls& redis,
          std::function<void(std::optional<Brake> brake, std::string error)> done);
}  // namespace brake

// Keeps the store's brake current from a thread of its own; on_factor (may be empty) is told
// the factor in force (1 without a brake) whenever it changes, for the metrics.
class BrakeSync {
 public:
  BrakeSync(ConfigStore& store, const config::Redis& redis,
            std::function<void(double factor)> on_factor = {},
            std::chrono::milliseconds poll = std::chrono::milliseconds(brake::kPollMs));
  // Starts polling and waits up to `wait` for the first read, so that a daemon started while a
  // brake is on obeys it before serving; false when not read yet (polling goes on).
  bool start(std::chrono::milliseconds wait, std::string& error);
  bool wait_loaded(std::chrono::milliseconds wait) { return poller_.wait_loaded(wait); }
  void stop() { poller_.stop(); }

 private:
  void poll();
  void on_value(const redisReply* r, std::string_view error);

  ConfigStore& store_;
  std::function<void(double)> on_factor_;
  // Loop thread only.
  bool busy_ = false;
  bool failing_ = false;
  std::optional<std::string> last_;  // the value read last ("" for none); unset before the first
  PollThread poller_;                // last: stopped first
};

}  // namespace dripgate::control
