// The `plans` section: each plan's class, gates, quota, concurrency, degrade and failure
// policy; and a gate's limit (load_bucket), which global_gates reads too.
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/id.h"
#include "common/quota_period.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::quote;
using common::valid_id;

namespace {

// A required count of at least 1, limited only by its type; false when missing or bad.
bool require_count(Ctx& ctx, const Fields& f, std::string_view key, int64_t& out) {
  const Entry* e = f.require(key);
  if (!e) return false;
  auto v = get_int(ctx, e->value, f.path(key), 1, std::numeric_limits<int64_t>::max(), true);
  if (v) out = *v;
  return v.has_value();
}

// `quota: {tokens_per_<period>..., reservation_ttl_s, max_open_reservations, mode}`: one token
// quota per period named (minute, hour, day, week, month), at least one.
void load_quota(Ctx& ctx, const YAML::Node& n, const std::string& path, Plan& p) {
  constexpr common::Period kPeriods[] = {common::Period::kMinute, common::Period::kHour,
                                         common::Period::kDay, common::Period::kWeek,
                                         common::Period::kMonth};
  Fields q(ctx, n, path,
           {"tokens_per_minute", "tokens_per_hour", "tokens_per_day", "tokens_per_week",
            "tokens_per_month", "reservation_ttl_s", "max_open_reservations", "mode"});
  if (!q.ok()) return;
  Quota quota;
  bool ok = true;
  for (common::Period period : kPeriods) {
    const std::string key = quota_key(period);
    const Entry* e = q.find(key);
    if (!e) continue;
    auto v = get_int(ctx, e->value, q.path(key), 1, std::numeric_limits<int64_t>::max(), true);
    if (v)
      quota.limits.push_back(QuotaLimit{period, *v});
    else
      ok = false;
  }
  if (ok && quota.limits.empty())
    ctx.error(n, path,
              "needs at least one of tokens_per_minute, tokens_per_hour, tokens_per_day, "
              "tokens_per_week, tokens_per_month");
  // At most 28 days: a reservation's month is then always the settle's or the one before,
  // among the quota periods the gateway declares to the scripts (lua/lib_quota.lua).
  set_int(ctx, q, "reservation_ttl_s", quota.reservation_ttl_s, 1, 28 * 86400);
  set_int(ctx, q, "max_open_reservations", quota.max_open_reservations, 1);
  set_gate_mode(ctx, q, quota.mode);
  if (ok && !quota.limits.empty()) p.quota = quota;
}

// A URL a client is sent to: http(s), printable ASCII without spaces or quotes (it goes into
// JSON and into a human sentence as is), at most 2,048 bytes.
bool valid_upgrade_url(const std::string& u) {
  if (u.size() > 2048 || !(u.starts_with("https://") || u.starts_with("http://"))) return false;
  const size_t host = u.find("://") + 3;
  if (host >= u.size() || u[host] == '/') return false;
  for (unsigned char ch : u)
    if (ch <= ' ' || ch >= 0x7f || ch == '"' || ch == '\\' || ch == '<' || ch == '>') return false;
  return true;
}

void load_degrade(Ctx& ctx, const YAML::Node& n, const std::string& path, Plan& p) {
  Fields d(ctx, n, path, {"model", "upgrade_url"});
  if (!d.ok()) return;
  Degrade out;
  bool ok = true;
  if (const Entry* m = d.find("model")) {
    auto s = get_string(ctx, m->value, d.path("model"));
    ok = s && check_id(ctx, m->value, d.path("model"), *s);
    if (ok) out.model = *s;
  }
  if (const Entry* u = d.find("upgrade_url")) {
    auto s = get_string(ctx, u->value, d.path("upgrade_url"));
    if (s && !valid_upgrade_url(*s)) {
      ctx.error(u->value, d.path("upgrade_url"),
                "expected an http:// or https:// URL (printable, no spaces or quotes, at most "
                "2048 bytes)");
      s.reset();
    }
    ok = ok && s.has_value();
    if (s) out.upgrade_url = *s;
  }
  if (ok && out.model.empty() && out.upgrade_url.empty()) {
    ctx.error(n, path, "needs model, upgrade_url or both");
    ok = false;
  }
  if (ok) p.degrade = std::move(out);
}

// `weights: {input, output, cached_input, reasoning}`: each a decimal of at most 6 places (the
// weights are kept in millionths, exactly), 0 to 1000; a type left out weighs 1.
void load_weights(Ctx& ctx, const YAML::Node& n, const std::string& path, Plan& p) {
  Fields w(ctx, n, path, {"input", "output", "cached_input", "reasoning"});
  if (!w.ok()) return;
  for (auto [name, out] : {std::pair<const char*, int64_t*>{"input", &p.weights.input},
                           {"output", &p.weights.output},
                           {"cached_input", &p.weights.cached_input},
                           {"reasoning", &p.weights.reasoning}}) {
    if (const Entry* e = w.find(name))
      if (auto v = get_fixed(ctx, e->value, w.path(name), 6, TokenWeights::kMax)) *out = *v;
  }
}

void load_plan(Ctx& ctx, const Entry& pe, const std::string& path, Plan& p, LocalModeUse& local) {
  Fields f(ctx, pe.value, path,
           {"class", "gates", "quota", "quota_timezone", "weights", "concurrency", "degrade",
            "on_failure", "mode", "queue"});
  if (!f.ok()) return;
  set_gate_mode(ctx, f, p.mode);
  p.on_failure = get_on_failure(ctx, f);
  if (p.on_failure == OnFailure::kLocal && !local.at)
    local = {f.find("on_failure")->value, f.path("on_failure")};
  if (const Entry* e = f.find("class")) {
    if (auto s = get_string(ctx, e->value, f.path("class"))) {
      if (check_id(ctx, e->value, f.path("class"), *s)) p.cls = *s;
    }
  }
  if (const Entry* e = f.find("gates")) {
    Fields g(ctx, e->value, f.path("gates"),
             {"tenant", "user", "api_key", "ip", "tenant_tokens", "user_tokens", "api_key_tokens"});
    for (auto [name, out] : {std::pair<const char*, std::optional<Bucket>*>{"tenant", &p.tenant},
                             {"user", &p.user},
                             {"api_key", &p.api_key},
                             {"ip", &p.ip},
                             {"tenant_tokens", &p.tenant_tokens},
                             {"user_tokens", &p.user_tokens},
                             {"api_key_tokens", &p.api_key_tokens}}) {
      if (const Entry* b = g.find(name))
        *out =
            load_bucket(ctx, b->value, g.path(name), std::string_view(name).ends_with("_tokens"));
    }
  }
  if (const Entry* e = f.find("quota")) load_quota(ctx, e->value, f.path("quota"), p);
  if (const Entry* e = f.find("quota_timezone")) {
    if (auto s = get_string(ctx, e->value, f.path("quota_timezone"))) {
      if (common::QuotaCalendar::load(*s))
        p.quota_timezone = *s;
      else
        ctx.error(e->value, f.path("quota_timezone"),
                  "unknown time zone '" + *s + "' (not in the system's tz database)");
    }
  }
  if (const Entry* e = f.find("weights")) load_weights(ctx, e->value, f.path("weights"), p);
  if (const Entry* e = f.find("concurrency")) {
    Fields c(ctx, e->value, f.path("concurrency"), {"max_streams", "lease_s", "mode"});
    if (c.ok()) {
      Concurrency conc;
      bool ok = require_count(ctx, c, "max_streams", conc.max_streams);
      set_int(ctx, c, "lease_s", conc.lease_s, 1);
      set_gate_mode(ctx, c, conc.mode);
      if (ok) p.concurrency = conc;
    }
  }
  if (const Entry* e = f.find("degrade")) load_degrade(ctx, e->value, f.path("degrade"), p);
  if (const Entry* e = f.find("queue")) {
    Fields q(ctx, e->value, f.path("queue"), {"max_wait_ms", "priority"});
    if (q.ok()) {
      PlanQueue queue;
      bool ok = q.require("max_wait_ms") != nullptr;
      set_int(ctx, q, "max_wait_ms", queue.max_wait_ms, 0, kMaxWaitMs);
      set_int(ctx, q, "priority", queue.priority, 0, kQueueBands - 1);
      if (ok) p.queue = queue;
    }
  }
}

}  // namespace

std::optional<Bucket> load_bucket(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                  bool tokens, bool saturation) {
  Fields f = saturation ? Fields(ctx, n, path,
                                 {"capacity", "refill_per_s", "warmup_s", "mode", "algorithm",
                                  "limit", "window_s", "saturation"})
                        : Fields(ctx, n, path,
                                 {"capacity", "refill_per_s", "warmup_s", "mode", "algorithm",
                                  "limit", "window_s"});
  if (!f.ok()) return std::nullopt;
  Bucket b;
  bool ok = true;
  if (const Entry* e = f.find("algorithm")) {
    auto s = get_string(ctx, e->value, f.path("algorithm"));
    auto a = s ? parse_algorithm(*s) : std::nullopt;
    if (s && !a)
      ctx.error(e->value, f.path("algorithm"),
                "unknown algorithm " + quote(*s) + "; expected token_bucket or sliding_window");
    if (a == Algorithm::kSlidingWindow && tokens) {
      ctx.error(e->value, f.path("algorithm"),
                "sliding_window counts admissions (cost 1): a token-rate gate takes a token "
                "estimate, which only token_bucket meters");
      a.reset();
    }
    if (!a) return std::nullopt;
    b.algorithm = *a;
  }
  const bool window = b.algorithm == Algorithm::kSlidingWindow;
  // The other algorithm's fields are refused rather than ignored: a limit that silently does
  // nothing is worse than an error.
  static constexpr std::string_view kBucketFields[] = {"capacity", "refill_per_s", "warmup_s"};
  static constexpr std::string_view kWindowFields[] = {"limit", "window_s"};
  for (std::string_view key : window ? std::span<const std::string_view>(kBucketFields)
                                     : std::span<const std::string_view>(kWindowFields)) {
    if (const Entry* e = f.find(key)) {
      ctx.error(e->key_node, f.path(key),
                std::string("not a field of algorithm ") +
                    (window ? "sliding_window (it takes limit and window_s; no warm-up)"
                            : "token_bucket (limit and window_s need algorithm: sliding_window)"));
      ok = false;
    }
  }
  auto required_double = [&](std::string_view key, NumRule rule, double& out) {
    const Entry* e = f.require(key);
    std::optional<double> v;
    if (e) v = get_double(ctx, e->value, f.path(key), rule);
    if (v)
      out = *v;
    else
      ok = false;
    return e;
  };
  if (window) {
    if (const Entry* e = f.require("limit")) {
      if (auto v = get_int(ctx, e->value, f.path("limit"), 1, kMaxWindowLimit))
        b.limit = *v;
      else
        ok = false;
    } else {
      ok = false;
    }
    // From a millisecond (the scripts' unit for a window) to 31 days.
    const Entry* e = required_double("window_s", {0.001, false}, b.window_s);
    if (e && b.window_s > kMaxWindowS) {
      ctx.error(e->value, f.path("window_s"),
                "must be <= " + num_str(kMaxWindowS) + " (31 days), got " + e->value.Scalar());
      ok = false;
    }
  } else {
    // A request costs one token, so a bucket smaller than 1 would refuse everything.
    required_double("capacity", {1, false, "a request costs 1 token"}, b.capacity);
    required_double("refill_per_s", {0, true}, b.refill_per_s);
  }
  // Warm-up of a new bucket; 0 (the default) is none.
  if (const Entry* e = window ? nullptr : f.find("warmup_s")) {
    if (auto v = get_double(ctx, e->value, f.path("warmup_s"),
                            {0, false, "0 is no warm-up", 86400, "a day"}))
      b.warmup_s = *v;
    else
      ok = false;
  }
  set_gate_mode(ctx, f, b.mode);
  if (const Entry* e = ok ? f.find("saturation") : nullptr)
    ok = load_saturation(ctx, e->value, f.path("saturation"), b, tokens);
  if (!ok) return std::nullopt;
  return b;
}

void load_plans(Ctx& ctx, const YAML::Node& n, std::map<std::string, Plan>& plans,
                std::set<std::string>& names, std::vector<ClassRef>& refs, LocalModeUse& local) {
  auto es = entries(ctx, n, "plans");
  if (!es) return;
  for (const auto& pe : *es) {
    std::string path = join("plans", pe.key);
    if (!check_id(ctx, pe.key_node, path, pe.key)) continue;
    names.insert(pe.key);
    Plan p;
    p.name = pe.key;
    load_plan(ctx, pe, path, p, local);
    std::optional<YAML::Node> cls_at;
    if (pe.value.IsMap())
      for (const auto& kv : pe.value)
        if (kv.first.IsScalar() && kv.first.Scalar() == "class") cls_at = kv.second;
    if (cls_at) {
      // A bad class value was reported already; only check names that are ids.
      if (cls_at->IsScalar() && valid_id(cls_at->Scalar()))
        refs.push_back({p.cls, *cls_at, join(path, "class"), false});
    } else {
      refs.push_back({p.cls, pe.key_node, join(path, "class"), true});
    }
    plans[p.name] = p;
  }
}

}  // namespace dripgate::config::loader
