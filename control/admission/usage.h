// What a tenant has used of each quota of its plan (GET /v1/admin/usage/<tenant>): the period
// each counts over, its bounds, the counter read from Redis, and when the quota would run out at
// the rate its period has seen so far.
//
// The endpoint is written over the list of the plan's quotas (plan_quotas), one entry a quota
// (tokens per minute, hour, day, week, month), their counters read in the same call.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/quota_period.h"
#include "control/admission/script_calls.h"

namespace dripgate::control {
class RedisCalls;
}

namespace dripgate::control::usage {

// One quota of a plan, as a tenant's usage lists it.
struct QuotaSpec {
  std::string name;       // "tokens_per_month", "tokens_per_day": the plan's field
  std::string_view unit;  // "tokens"
  common::Period period = common::Period::kMonth;
  int64_t limit = 0;
  bool shadow = false;  // counted, never refused (mode: shadow)
  // The counters' key prefix in the tenant's slot (keys.h); a counter is it plus the period's
  // label.
  std::string_view counter_prefix;
};
// The quotas of `t`'s plan, in the plan's order (t named after its tenant: Tables::find).
std::vector<QuotaSpec> plan_quotas(const TenantInfo& t);

struct QuotaUsage {
  QuotaSpec spec;
  common::PeriodSpan span;  // the period holding now, in the plan's quota_timezone
  int64_t used = 0;         // charged in the period: settled counts and open estimates
  int64_t remaining() const { return used < spec.limit ? spec.limit - used : 0; }
  // The period's average so far, tokens a second (see projected_exhaustion).
  double rate_per_s = 0;
  // When it would run out at that rate (unix s; now when it has); nullopt: not before the
  // period ends.
  std::optional<int64_t> exhausts_at;
};

// Below this much of a period, the average is taken over this long: a first request a second
// into a month does not project the month's budget gone by the afternoon.
inline constexpr int64_t kMinRateWindowS = 60;
// The period's average (used over the time since it began, at least kMinRateWindowS) carried
// forward from now. The period-to-date average, not a recent rate: it is Redis's truth, the same
// on every daemon and after a restart, and needs no per-tenant state on the request path; it
// lags a sudden surge, which the token-rate gates and the quota itself are there to stop.
void project(QuotaUsage& u, int64_t now_s);

// Reads the counters of `quotas` in the periods holding Redis's `now_s` (one MGET: every counter
// of a tenant is in its hash slot, so one round trip) and projects each. done(usages, error) on
// redis's loop; error is a Redis failure's text.
void read(RedisCalls& redis, std::vector<QuotaSpec> quotas, const common::QuotaCalendar& zone,
          int64_t now_s, std::function<void(std::vector<QuotaUsage>, std::string)> done);

// The calendar of the plan's quota_timezone (TenantInfo::zone), UTC when it has none.
const common::QuotaCalendar& zone_of(const TenantInfo& t);

}  // namespace dripgate::control::usage
