#include "control/admission/usage.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include "control/admission/keys.h"
#include "control/redis/redis_calls.h"

namespace dripgate::control::usage {

std::vector<QuotaSpec> plan_quotas(const TenantInfo& t) {
  std::vector<QuotaSpec> out;
  const config::Plan& p = *t.plan;
  if (!p.quota) return out;
  const bool shadow =
      p.mode == config::GateMode::kShadow || p.quota->mode == config::GateMode::kShadow;
  for (const config::QuotaLimit& l : p.quota->limits)
    out.push_back(
        {config::quota_key(l.period), "tokens", l.period, l.tokens, shadow, t.quota_prefix});
  return out;
}

const common::QuotaCalendar& zone_of(const TenantInfo& t) {
  static const common::QuotaCalendar utc = *common::QuotaCalendar::load("UTC");
  return t.zone ? *t.zone : utc;
}

void project(QuotaUsage& u, int64_t now_s) {
  const int64_t elapsed = std::max(now_s - u.span.start, kMinRateWindowS);
  u.rate_per_s = u.used > 0 ? static_cast<double>(u.used) / static_cast<double>(elapsed) : 0;
  u.exhausts_at.reset();
  if (u.used >= u.spec.limit) {
    u.exhausts_at = now_s;
    return;
  }
  if (u.used <= 0) return;
  // remaining / (used / elapsed), rounded up, in integers: exact (a double's 210.00000000000003
  // would be a second late), and wide enough for any budget times any period.
  using Wide = __int128;
  const Wide left_s = (Wide{u.spec.limit - u.used} * elapsed + u.used - 1) / u.used;
  if (left_s < u.span.end - now_s) u.exhausts_at = now_s + static_cast<int64_t>(left_s);
}

namespace {

// A counter's value: INCRBY's integer as a bulk string; nil (never charged) is 0.
int64_t counter_of(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_STRING) return 0;
  int64_t v = 0;
  std::from_chars(r->str, r->str + r->len, v);
  return v;
}

}  // namespace

void read(RedisCalls& redis, std::vector<QuotaSpec> quotas, const common::QuotaCalendar& zone,
          int64_t now_s, std::function<void(std::vector<QuotaUsage>, std::string)> done) {
  auto usages = std::make_shared<std::vector<QuotaUsage>>();
  std::vector<std::string> counters;
  for (const QuotaSpec& q : quotas) {
    QuotaUsage& u = usages->emplace_back();
    u.spec = q;
    u.span = zone.span(q.period, now_s);
    counters.push_back(keys::quota_counter(q.counter_prefix, usages->back().span.label));
  }
  if (usages->empty()) return redis.post([usages, done = std::move(done)] { done({}, {}); });
  std::vector<std::string_view> argv{"MGET"};
  for (const std::string& k : counters) argv.push_back(k);
  redis.command(
      argv, [usages, now_s, done = std::move(done)](const redisReply* r, std::string_view error) {
        if (!r) return done({}, std::string(error.empty() ? "redis: no reply" : error));
        if (r->type == REDIS_REPLY_ERROR) return done({}, "redis: " + std::string(r->str, r->len));
        if (r->type != REDIS_REPLY_ARRAY || r->elements != usages->size())
          return done({}, "redis: unexpected reply to MGET");
        for (size_t i = 0; i < usages->size(); ++i) {
          (*usages)[i].used = counter_of(r->element[i]);
          project((*usages)[i], now_s);
        }
        done(std::move(*usages), {});
      });
}

}  // namespace dripgate::control::usage
