// Redis key names. Every tenant-scoped key carries the tenant as its hash tag ({t:<tenant>}),
// so one admission touches one cluster slot; global gates carry their own tag. Callers pass
// validated ids only ([A-Za-z0-9._-]), so no input can name a key outside its tenant's slot.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/quota_period.h"

namespace dripgate::control::keys {

// "dg:{t:<tenant>}:" — the prefix every tenant-scoped key starts with.
std::string tenant_prefix(std::string_view tenant);
// "dg:{t:<tenant>}:tb:<gate>" for gate "tenant", "dg:{t:<tenant>}:tb:<gate>:<id>" otherwise
// (gate "user", "key" for api keys, "ip" for a client address as common::client_ip_key
// writes it: the tenant's hash tag keeps the ip gate in the tenant's one admit.lua call).
std::string bucket(std::string_view tenant, std::string_view gate, std::string_view id = {});
// "dg:{t:<tenant>}:sw:<gate>[:<id>]": a sliding window's sorted set (lua/lib_window.lua), named
// as bucket() names the bucket of the same gate, in the same hash slot.
std::string window(std::string_view tenant, std::string_view gate, std::string_view id = {});
// "dg:{t:<tenant>}:q:": the quota counters' prefix; a counter is "<prefix><period name>"
// (TimeKeys): "2026-12" (month), "2026-W50" (ISO week), "2026-12-07" (day), "2026-12-07T16"
// (hour), "2026-12-07T16:31" (minute), names of distinct shapes (common/quota_period.h), so the
// periods of a tenant's quotas share the prefix without meeting.
std::string quota_prefix(std::string_view tenant);
// "dg:{t:<tenant>}:q:<period name>".
std::string quota(std::string_view tenant, std::string_view month);
// A quota's counter of one period: its prefix (quota_prefix) and the period's label
// (common::PeriodSpan), as TimeKeys declares the monthly ones.
std::string quota_counter(std::string_view prefix, std::string_view label);
// One quota period (a UTC calendar month for month_of): its name, its first second and the next
// period's (unix s).
struct Month {
  std::string name, start_s, end_s;
  int64_t start = 0, end = 0;
};
Month month_of(int64_t unix_s);
// The months before, of and after unix second `unix_s`.
struct Months {
  Month prev, cur, next;
};
Months months_around(int64_t unix_s);
// Those around unix second now_s, kept per thread until its month ends (no formatting per
// request); without now_s, those of the daemon's clock (wall_clock.h).
const Months& current_months(int64_t now_s);
const Months& current_months();
// The calendar months of a quota's time zone around unix second unix_s: each begins at local
// midnight of its first day, named "YYYY-MM" after its local date (common/quota_period.h). In
// UTC the same as months_around(unix_s).
Months months_around(const common::QuotaCalendar& zone, int64_t unix_s);
// Those around now_s, kept per thread and zone until their month ends.
const Months& current_months(const common::QuotaCalendar& zone, int64_t now_s);
// The periods of kind `period` of a quota's time zone before, holding and after unix second
// unix_s (a Month each, whatever the period); current_periods keeps them per thread, zone and
// period until the current one ends.
Months periods_around(const common::QuotaCalendar& zone, common::Period period, int64_t unix_s);
const Months& current_periods(const common::QuotaCalendar& zone, common::Period period,
                              int64_t now_s);
// "dg:{t:<tenant>}:r:": the reservation windows' prefix; a window is "<prefix><ttl>:<w>"
// (TimeKeys, lua/lib_reservation.lua).
std::string reservations(std::string_view tenant);

// The keys of one tenant-slot script call whose names depend on time, declared up front: a
// script must not build key names (a Redis Cluster routes a call by its KEYS, and only declared
// keys are cluster-safe by contract), yet the quota periods and the reservation window are Redis
// TIME's. So the gateway declares, for each of the plan's quotas, the counters of the periods
// around its clock (previous, current, next) and the reservation windows base - 2 .. base + 2
// (base = now / ttl), and the scripts pick by Redis TIME among them (lua/lib_quota.lua,
// lua/lib_reservation.lua). One buffer with views into it: neither copied nor moved once built.
//
// The names change only when the reservation window or a period does, so each thread keeps the
// newest build per tenant (a small table by the tenant's prefix) and a build within the same
// window and periods shares its buffer instead of formatting it again; a build for another
// window, other periods, prefixes or ttl is formatted anew.
class TimeKeys {
 public:
  TimeKeys() = default;
  TimeKeys(const TimeKeys&) = delete;
  TimeKeys& operator=(const TimeKeys&) = delete;

  // One per quota period of a plan at most.
  static constexpr size_t kMaxQuotas = 5;

  // quota_prefix / reservations_prefix as above, ttl_s the reservation TTL (s) as text; periods:
  // per quota, the periods around now (at most kMaxQuotas).
  void build(std::string_view quota_prefix, std::string_view reservations_prefix,
             std::string_view ttl_s, int64_t ttl, int64_t now_s,
             std::span<const Months* const> periods);

  // One quota's counters and bounds.
  struct Quota {
    std::array<std::string_view, 3> keys{};  // previous, current, next period
    // prev_start, start, end, next_end (unix s): where the previous period begins, the current
    // one begins and ends, and the next one ends (lua/lib_quota.lua): in a time zone the
    // scripts could not work them out from a UTC calendar.
    std::array<std::string_view, 4> bounds{};
  };
  std::array<Quota, kMaxQuotas> quotas{};
  size_t nq = 0;
  std::array<std::string_view, 5> windows{};  // base - 2 .. base + 2
  std::string_view base;                      // the window number of windows[2]

  // Whether this build shares its buffer with another (the thread's table): for the tests.
  const void* buffer() const { return buf_.get(); }

 private:
  friend struct TimeKeysCache;
  // Formats the names into buf (reused when nothing else holds it) and points the views at it.
  void format(std::shared_ptr<std::string>& buf, std::string_view quota_prefix,
              std::string_view reservations_prefix, std::string_view ttl_s, int64_t base_w,
              std::span<const Months* const> periods);
  void share(const TimeKeys& o);

  std::shared_ptr<const std::string> buf_;
};
// "dg:{t:<tenant>}:leases"
std::string leases(std::string_view tenant);
// "dg:{t:<tenant>}:applied:<journal id>": a sorted set of the sequences of one journal's local
// decisions charged to the tenant (score = sequence), and its watermark "w" (score: every
// sequence up to it is charged), below which the sequences are forgotten (reconcile.lua).
std::string applied(std::string_view tenant, std::string_view journal);
// "dg:{g:<kind>:<name>}:applied:<journal id>": the same for a global gate's bucket.
std::string global_applied(std::string_view kind, std::string_view name, std::string_view journal);
// "dg:{g:<kind>:<name>}:tb", kind "model", "model_tokens", "tool", or "global_ip" with name a
// client address as common::client_ip_key writes it (a hash tag, so a slot, per address).
std::string global_bucket(std::string_view kind, std::string_view name);
// "dg:{g:<kind>:<name>}:sw", kind "model" or "tool": a global gate's sliding window.
std::string global_window(std::string_view kind, std::string_view name);
// "dg:{g:total}:tb": the bucket of every admission of every tenant.
std::string total_bucket();
// "dg:{g:total}:sw": the total gate as a sliding window.
std::string total_window();
// "dg:{g:<kind>:<name>}:wq": the first waiter of each worker of each daemon on a global gate
// (lua/lib_waiters.lua), in the gate's slot.
std::string global_waiters(std::string_view kind, std::string_view name);
// "dg:{g:total}:wq": the same for the total gate.
std::string total_waiters();
// "dg:{g:total}:a:<attempt>": as global_attempt, for the total gate's gates.lua call.
std::string total_attempt(std::string_view attempt);
// "dg:{g:<kind>:<name>}:a:<attempt>": what became of one gates.lua call (ran or cancelled;
// deleted once undone), in the slot of its bucket.
std::string global_attempt(std::string_view kind, std::string_view name, std::string_view attempt);

// "dg:{g:model_tokens:<name>}:s:<request_id>": the tokens one request has taken from a
// model_tokens gate (its estimate, then its stream charges), until its settle corrects them to
// the tokens used.
std::string global_taken(std::string_view kind, std::string_view name, std::string_view rid);

// The tenant registry (tenant_registry.h): the hash tenant -> plan, the count of changes made
// to it and the log of the newest ones. One hash tag for all three, so each registry script
// runs in one slot of a cluster.
std::string registry_tenants();  // "dg:{registry}:tenants"
std::string registry_version();  // "dg:{registry}:version"
std::string registry_log();      // "dg:{registry}:log"

// The service-wide brake (brake.h): the brake in force, a string expiring with it; a hash tag
// of its own, so it has a slot of its own on a cluster.
std::string brake();  // "dg:{brake}:state"

// The tenant of an engine-generated request id "<tenant>.<16 hex>": everything before the last
// '.', or empty when the id has no '.'.
std::string_view tenant_of_request_id(std::string_view request_id);

}  // namespace dripgate::control::keys
