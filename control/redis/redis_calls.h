// What the admission engine asks of Redis, whatever its topology: script calls and commands
// with RedisClient's contract (Callback, LateReply, WhenStalled), deferred work on the loop, and
// whether Redis is reachable. One node (RedisClient) or a Redis Cluster (RedisCluster, routing
// each call by the hash slot of its first key), chosen by the configuration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "control/redis/redis_client.h"

namespace dripgate::control {

// A Redis Cluster's answer (no reply) to a call redirected more than its bound: the call did not
// run, and no late reply follows.
inline constexpr std::string_view kTooManyRedirects = "redis: too many redirects";

class RedisCalls {
 public:
  using Callback = RedisClient::Callback;
  using LateReply = RedisClient::LateReply;
  using WhenStalled = RedisClient::WhenStalled;

  virtual ~RedisCalls() = default;
  virtual void evalsha(const lua::Script& script, std::span<const std::string_view> keys,
                       std::span<const std::string_view> args, Callback cb, LateReply late = {},
                       WhenStalled stalled = WhenStalled::kFailFast) = 0;
  virtual void command(std::span<const std::string_view> argv, Callback cb) = 0;
  virtual void post(std::function<void()> fn) = 0;
  // The deadline a script call sent now carries (lua/admit.lua's `deadline`: unix ms on Redis's
  // clock, RedisClient::script_deadline_ms): past it this side has answered the call failed.
  virtual int64_t script_deadline_ms() const = 0;
  // Redis's clock minus this daemon's (wall_ms), in ms, as last measured (a cluster: its first
  // node measured); 0 until then. The time-named keys of a call are built on this daemon's
  // clock plus it, so that they are Redis TIME's whatever the two clocks' skew.
  virtual int64_t clock_offset_ms() const = 0;
  // Readable from any thread.
  virtual bool up() const = 0;
  // The connections established now (a cluster: to every node); read on the loop. A test that
  // stops Redis waits for the whole pool first: otherwise which connection a call fails on, and
  // so whether the breaker sees a slow call or a lost connection, depends on the machine's speed.
  virtual int connected() const = 0;
  virtual std::string_view state() const = 0;
};

// A RedisCluster when `r.cluster` lists seeds, else a RedisClient on `r`'s endpoint.
std::unique_ptr<RedisCalls> make_redis_calls(event_base* base, const config::Redis& r,
                                             std::vector<const lua::Script*> scripts,
                                             RedisObserver* observer = nullptr);

}  // namespace dripgate::control
