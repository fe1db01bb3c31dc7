// The admission engine: every decision is one atomic Redis Lua call per hash slot.
// Asynchronous: one Engine per worker thread, bound to that thread's libevent base. The calls are
// packed in script_calls.cc (keys from keys.cc), sent and decoded in admission.cc over
// redis_client.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "control/admission/token_cost.h"

struct event_base;

namespace dripgate::control {
struct Brake;
struct RedisObserver;
struct Snapshot;
class ConfigStore;
class RedisCalls;
class TenantDirectory;
struct TenantInfo;
}  // namespace dripgate::control

namespace dripgate::control {

struct Flow {
  std::string src;  // IPv4 or IPv6 literal
  std::string dst;
  uint16_t sport = 0;
  uint16_t dport = 0;
  uint8_t proto = 6;  // IPPROTO_TCP / IPPROTO_UDP
};

struct AdmitRequest {
  std::string tenant;
  std::string user;        // empty: no user gate
  std::string api_key;     // empty: no api_key gate
  std::string model;       // empty: no model gate
  std::string tool;        // empty: no tool gate
  std::string request_id;  // empty: the engine generates one
  // The end client's IPv4 or IPv6 address as the caller saw it; empty: no ip gate. Validated
  // and normalised by the engine (common::client_ip_key).
  std::string client_ip;
  int64_t tokens = 0;  // estimate reserved against the quota
  std::optional<Flow> flow;
  // How long the request may wait for a rate gate that refuses it (the gateway's queue); unset:
  // its plan's queue.max_wait_ms, which also caps it.
  std::optional<int64_t> max_wait_ms;
  // The estimate by type, as a settle's `typed`: the gateway sets `tokens` to its plan's
  // weighted cost before anything is decided, and resets this.
  std::optional<TokenCounts> typed{};
};

// A request's place among the waiters of the global gates it meets, across the workers and
// daemons that share them (lua/lib_waiters.lua): the gateway sets it for a request that may
// wait; the default is a request that does not, which comes after every waiter.
struct Turn {
  static constexpr int kNoWait = 8;  // the band of a request that does not wait
  int band = kNoWait;
  bool waits = false;  // may wait: refused, it takes its worker's place among the gate's waiters
  // The global gate ("model", "model_tokens", "tool", "total") whose waiters on this worker it is
  // the first of; empty: none.
  std::string_view head;
  int next_band = -1;  // head only: the band of the worker's next waiter there; -1: none
  // Head only: the worker's tenants with waiters in next_band there, each a turn of the band's
  // round, so that a tenant's share does not depend on how many share its worker.
  int next_tenants = 1;
  int64_t left_ms = 0;  // how long it may still wait
  // Its global gates are asked first and its tenant's slot only once they all admitted it: a
  // request the gate is likely to refuse, where one gates.lua call takes its worker's place
  // rather than admit.lua's and a refund besides. A request of a higher band than the waiters
  // on its gate in this worker (it joins them through Redis), and a worker's first waiter on a
  // global gate (another daemon may have come first since its timer was set).
  bool gate_first = false;
  // How long the request itself may still wait (its own deadline; left_ms may be its worker's
  // last waiter's): a call that no waiter is ahead of may then book its gate's next token
  // (lua/gates.lua), which the engine holds it for; 0: it books none.
  int64_t book_ms = 0;
  // The request's client went away (the gateway's flag, read until the engine answers): a
  // request holding a booked token is then not admitted when the token comes, and the token
  // goes back to its gate for the next waiter.
  const bool* abandoned = nullptr;
};

// The error of an admission whose client went away while it held a booked token (Turn::abandoned):
// nothing was charged, and nothing failed.
inline constexpr std::string_view kAbandonedError = "abandoned: the client went away";

struct SettleRequest {
  std::string tenant;  // optional: derived by the engine from a generated request_id
  std::string request_id;
  // The tokens used: a plain count as it is, or the weighted cost of `typed` (the gateway sets
  // it from the plan's weights before anything is charged, token_cost.h).
  int64_t tokens = 0;
  // The admission's user, api_key and model: their token-rate gates (user_tokens,
  // api_key_tokens, model_tokens) are corrected to the tokens used. Empty: not corrected.
  std::string user{}, api_key{}, model{};
  std::optional<TokenCounts> typed{};
};

// One charge of a stream (POST /v1/charge): the tokens used since the request's last charge.
struct ChargeRequest {
  std::string tenant;  // optional, as for settle
  std::string request_id;
  int64_t tokens = 0;
  std::string user{}, api_key{}, model{};  // as for settle
  std::optional<TokenCounts> typed{};      // as for settle
};

struct ReleaseRequest {
  std::string tenant;  // optional, as for settle
  std::string request_id;
};

// The name of global_gates.ip in answers, metrics and keys: the plan's per-tenant gate is "ip".
inline constexpr std::string_view kGlobalIpGate = "global_ip";

// Remaining capacity of one gate after the decision. Buckets are fractional, the quota whole.
struct Remaining {
  // "tenant", "user", "api_key", "ip", "model", "tool", "total", "global_ip", "quota",
  // "concurrency"
  std::string gate;
  double value = 0;
  double limit = 0;     // capacity / tokens_per_month / max_streams
  double window_s = 0;  // policy window for RateLimit-Policy (capacity/refill, seconds in month…)
  int64_t reset_s = 0;  // seconds until the gate is full again / the month rolls over
  // A bucket's or a sliding window's reset_s in milliseconds, rounded up (OpenAI's reset
  // headers say "20ms"); -1: known to the second only (reset_s).
  int64_t reset_ms = -1;
};

// A token bucket's Remaining at `tokens`, with the policy numbers the RateLimit headers need:
// the same for a decision of the scripts and a local one (redis.on_failure: local).
Remaining bucket_remaining(std::string gate, double capacity, double refill, double tokens);

enum class Outcome {
  kAllowed,      // 200
  kRefused,      // 429
  kBadRequest,   // 400: error names the field
  kConflict,     // 409: request_id already in use; a charge after its settle
  kNotFound,     // 404: a charge for a request with no live reservation
  kUnavailable,  // 503: Redis unreachable or timed out
};

struct AdmitResult {
  Outcome outcome = Outcome::kUnavailable;
  std::string request_id;
  std::string cls;      // the tenant plan's dataplane class
  int64_t lease_s = 0;  // the concurrency lease an admission takes (s); 0: the plan has none
  std::string gate;     // refusing gate
  // "rate" | "quota" | "concurrency" | "reservations" | "queue_full" (the gateway's queue)
  std::string reason;
  int64_t retry_after_ms = 0;
  // Admitted only: the shadow-mode gate that would have refused (the one with the longest wait,
  // as gate for a refusal), and that wait; empty when none would have.
  std::string shadow_refused;
  int64_t shadow_retry_ms = 0;
  // The service-wide brake's factor applied to this request's enforced rates (1: none).
  double brake = 1;
  std::vector<Remaining> remaining;
  std::string error;  // for 400/409/503: "field: message"
  // Refusals only (guidance.h): the tokens the quota lacks for this request, and the plan's
  // `degrade` (for a quota or model refusal).
  int64_t tokens_missing = 0;
  std::string degrade_model, upgrade_url;
  // Decided without Redis (redis.on_failure): "open" or "local"; empty: by Redis.
  std::string degraded;
  // How long the request waited in the gateway's queue (ms); -1: it could not wait (no
  // max_wait_ms), so the answer does not say.
  int64_t waited_ms = -1;
  // A Turn's head admitted: when its gate holds the worker's next waiter's cost beyond what the
  // waiters ahead of it need (ms after Redis decided); -1: not known (then `remaining` says).
  int64_t next_ms = -1;
  // A token booked for the request on a global gate (Turn::book_ms): when it existed (steady
  // clock, µs), which the engine held the request for, and that gate's name; 0: none was booked.
  int64_t booked_us = 0;
  std::string booked_gate;
};

struct SettleResult {
  Outcome outcome = Outcome::kUnavailable;
  bool settled = false;   // false: already settled, or the reservation expired/unknown
  int64_t charged = 0;    // tokens charged for this request after the call
  int64_t remaining = 0;  // quota remaining this month (never below 0); -1: the plan has no quota
  std::string detail;     // "settled" | "already_settled" | "expired" | "not_recorded"
  std::string error;
  std::string degraded;  // as AdmitResult's
};

struct ChargeResult {
  // kAllowed: charged; kRefused: charged, and the quota is now spent (gate and reason "quota":
  // the proxy cuts the stream); kConflict: settled already, kNotFound: no live reservation
  // (neither changes anything).
  Outcome outcome = Outcome::kUnavailable;
  std::string gate, reason;  // "quota" when refused
  int64_t retry_after_ms = 0;
  int64_t charged = 0;  // what the request has been charged so far (estimate + charges)
  int64_t lease_s = 0;  // the renewed lease (s); 0: the request holds no live lease
  // The quota and the request's token-rate gates after the charge.
  std::vector<Remaining> remaining;
  std::string error;
  std::string degraded;  // as AdmitResult's ("local": a local reservation's charge)
};

struct ReleaseResult {
  Outcome outcome = Outcome::kUnavailable;
  bool released = false;  // false: no such lease
  std::string error;
  std::string degraded;  // as AdmitResult's
};

// One quota counter a local decision charges: its period's name ("2026-12", "2026-12-07") and
// the counter's expiry (unix s: one period after the period's end, as the scripts set it).
struct QuotaPeriodRef {
  std::string name;
  int64_t expire_at = 0;

  bool operator==(const QuotaPeriodRef&) const = default;
};

// One part of a decision made while Redis did not answer (redis.on_failure: local), charged to
// Redis later by reconcile.lua, in one hash slot: tokens added to each quota's counter of the
// decision's period and each bucket's cost taken from it, once per record (idempotent).
struct ReconcileRecord {
  struct Bucket {
    std::string key, capacity, refill;  // the full limits, as the plan gives them
    // What the local decision took (1, a token-rate gate's estimate, 0 for a shadow bucket that
    // gave nothing); for a correction (exact) the delta to apply.
    std::string cost = "1";
  };
  std::string seq;  // the record's sequence in its journal (unique there, for good)
  // Every record of the journal up to this sequence is in Redis: the applied set forgets them,
  // and one sent again is known as applied by this alone.
  std::string watermark = "0";
  // false: an admission (each bucket debited down to empty, never below); true: a local settle's
  // or stream charge's correction, applied as settle.lua does (a refund up to the capacity, an
  // extra charge possibly below zero).
  bool exact = false;
  std::string applied_key;  // keys::applied or keys::global_applied: the slot of the call
  // The tenant part's quota counters (keys::quota of each quota's period of the decision) and
  // their expiry (unix s); none for a global gate's part.
  struct Quota {
    std::string key, expire_at;
  };
  std::vector<Quota> quotas;
  int64_t tokens = 0;
  std::vector<Bucket> buckets;
};

class Engine {
 public:
  // The Redis settings are read from the store's snapshot now and kept (they change only on
  // restart); every call runs on the snapshot in force when it is made. The store outlives
  // the engine.
  Engine(const ConfigStore& store, event_base* base, RedisObserver* observer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Callbacks run on the engine's event_base thread, exactly once, never inside the call itself
  // (errors found up front are posted to the loop). Input is validated here too (ids, tenant,
  // tokens), so the engine is safe to call with anything. Destroying the engine completes the
  // calls still in flight with kUnavailable.
  // snap: the configuration to decide on (the caller's, read once per request); null: the
  // store's current one. entry: req.tenant's in snap's tables (Tables::entry, with this
  // engine's registry()), when the caller looked it up already; null: the engine does.
  // turn: the request's place among the global gates' waiters (the gateway's queue).
  void admit(const AdmitRequest& req, std::function<void(AdmitResult)> done,
             std::shared_ptr<const Snapshot> snap = nullptr, const TenantInfo* entry = nullptr,
             const Turn& turn = {});
  // This engine's worker no longer has waiters on the global gate whose waiters key this is
  // (Gateway::waiters_key): its entry there goes (lua/lib_waiters.lua), so that it holds nobody
  // back.
  void leave_waiters(const std::string& waiters_key);
  // This engine's id among the waiters of the global gates: random, one per engine (a worker).
  const std::string& holder() const;
  // The store's snapshot in force, as this engine's thread sees it (one atomic load when it
  // has not changed).
  const std::shared_ptr<const Snapshot>& snapshot();
  // The tenant registry's copy in force, the same way (null: none).
  const std::shared_ptr<const TenantDirectory>& registry();
  // The service-wide brake in force, the same way (null: none).
  const std::shared_ptr<const Brake>& brake();
  // This engine's Redis, for the admin API's registry calls (tenant_registry.h), on its loop.
  RedisCalls& redis();
  // tenant may be empty: it is then derived from a request_id the engine generated
  // ("<tenant>.<hex>"); otherwise kBadRequest naming "tenant".
  void settle(SettleRequest req, std::function<void(SettleResult)> done);
  void charge(ChargeRequest req, std::function<void(ChargeResult)> done);
  void release(std::string tenant, std::string request_id, std::function<void(ReleaseResult)> done);
  // Applies records (reconcile.lua, one call), which share their applied_key (one journal's
  // records in one slot), in their order; done(error) with an empty error once all are in
  // Redis, now or by an earlier call.
  void reconcile(std::span<const ReconcileRecord> records,
                 std::function<void(std::string error)> done);

  bool redis_up() const;
  int redis_connected() const;  // RedisCalls::connected(); on the loop
  // "up", "down" or "auth_failed" (see RedisClient::state()).
  std::string_view redis_state() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A stream charge's answers for a request that has no open reservation (404) or is settled
// (409): the same words from Redis's decision and a local one.
std::string charge_not_found_error(const std::string& request_id);
std::string charge_settled_error(const std::string& request_id);

// The request-id rule: an id ([A-Za-z0-9._-]{1,64}), or one the engine generated,
// "<tenant>.<16 hex>" (which may be longer than 64 when the tenant name is long).
bool valid_request_id(std::string_view request_id);

}  // namespace dripgate::control
