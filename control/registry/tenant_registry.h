// The tenant registry: tenants put on a plan over the admin API (PUT/GET/DELETE
// /v1/admin/tenants/<id>) without a restart or a reload, kept in Redis, seen by every daemon that
// shares the Redis within a second.
//
// Redis holds the truth (keys.h, one hash tag {registry}, so one cluster slot): a hash tenant ->
// plan, a version (the count of changes ever made) and a log of the newest changes' tenants,
// written only by lua/registry_write.lua. Each daemon keeps a copy (tenant_directory.h), read
// whole at start (HSCAN in pages) and then refreshed by RegistrySync every kPollMs:
// lua/registry_changes.lua answers, in one round trip, the tenants changed since the copy's
// version, or that the copy must be read whole again (a gap longer than the log, Redis lost its
// data). Polling rather than pub/sub: a missed message cannot leave a daemon stale (the version
// says what it missed, also across a reconnect), it works unchanged on a cluster, and costs one
// small call per daemon every kPollMs.
//
// The registry wins over the file where both name a tenant; the file stays the bootstrap.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "config/config.h"
#include "control/admission/config_snapshot.h"
#include "control/redis/redis_calls.h"
#include "control/registry/poll_thread.h"

namespace dripgate::control {

namespace registry {
// How often a daemon asks whether the registry changed: a change is in force everywhere within
// this plus one round trip.
inline constexpr int kPollMs = 100;
// Changes the log keeps; a daemon further behind reads the registry whole.
inline constexpr int kLogLen = 10000;
// Changes worth reading one by one; beyond, reading it whole costs about the same.
inline constexpr int kMaxChanges = 1000;
// Fields per HSCAN page: each page holds Redis well under a millisecond.
inline constexpr int kScanCount = 1000;

// The admin API's calls, on the loop of `redis` (a worker's engine); `done` runs there, once.
// write: puts `tenant` on `plan` ("" takes it out); done(previous plan ("" when none), error).
void write(RedisCalls& redis, const std::string& tenant, const std::string& plan,
           std::function<void(std::string previous, std::string error)> done);
// read: done(the tenant's plan in Redis (nullopt when none), error).
void read(RedisCalls& redis, const std::string& tenant,
          std::function<void(std::optional<std::string> plan, std::string error)> done);

// A registry tenant's API keys (tenant_keys.h), kept after its plan in the registry's value by
// lua/registry_keys.lua, which moves the version like a write, so every daemon's copy has them
// within a poll. Keys expired at `now_s` are dropped on every change.
inline constexpr int kMaxKeys = 16;  // per tenant: a rotation's overlap needs two
enum class KeyOp {
  kAdd,     // the key, valid until expires_at (0: for good)
  kRotate,  // the key for good; the tenant's other keys end at expires_at at the latest
  kRevoke,  // the key is refused from the next poll on
};
struct KeyChange {
  std::string tenant;
  KeyOp op = KeyOp::kAdd;
  KeyDigest sha256{};
  int64_t expires_at = 0;  // unix seconds
  int64_t now_s = 0;       // the caller's clock
};
struct KeyResult {
  // 1: done; 0: the tenant is not in the registry; -1: revoke of a key it does not have; -2:
  // more than kMaxKeys keys
  int status = 0;
  std::vector<TenantKey> keys;  // the tenant's keys after the change (status 1)
};
void keys(RedisCalls& redis, const KeyChange& change,
          std::function<void(KeyResult result, std::string error)> done);
}  // namespace registry

// Keeps the store's copy of the registry current, from a thread of its own with one Redis
// connection (Redis unreachable: it keeps the last copy and retries every kPollMs, logging once
// per outage).
class RegistrySync {
 public:
  // store outlives the sync. redis: the daemon's settings (its timeout is raised to at least
  // 1 s: nobody waits on this connection).
  RegistrySync(ConfigStore& store, const config::Redis& redis,
               std::chrono::milliseconds poll = std::chrono::milliseconds(registry::kPollMs));
  ~RegistrySync();  // stops and joins
  RegistrySync(const RegistrySync&) = delete;
  RegistrySync& operator=(const RegistrySync&) = delete;

  // Starts polling and waits up to `wait` for the first copy; false when it is not there yet
  // (Redis unreachable: polling goes on). `error` says why the thread could not start.
  bool start(std::chrono::milliseconds wait, std::string& error);
  void stop() { poller_.stop(); }
  bool loaded() const { return poller_.loaded(); }
  // How long the last full read took (the first copy, or a resync), for the log and the bench.
  std::chrono::microseconds last_full_read() const {
    return std::chrono::microseconds(full_read_us_.load(std::memory_order_relaxed));
  }

 private:
  struct Scan;
  void poll();
  void on_changes(const redisReply* r, std::string_view error);
  void scan(std::shared_ptr<Scan> s);
  void publish(std::shared_ptr<const TenantDirectory> next);
  void failed(std::string_view why);

  ConfigStore& store_;
  // Loop thread only.
  bool busy_ = false;  // a poll or a full read is in progress
  bool failing_ = false;
  std::shared_ptr<const TenantDirectory> copy_;  // the last one published
  std::chrono::steady_clock::time_point full_started_{};
  std::atomic<int64_t> full_read_us_{0};
  PollThread poller_;  // last: stopped first
};

}  // namespace dripgate::control
