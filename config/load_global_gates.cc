// The `global_gates` section: gates shared by every tenant (per tool, per model, per model
// in tokens, and one total), and a model gate's saturation.
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "common/http_url.h"
#include "common/prom_text.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

namespace {

// A string field checked by `parse` (which says why not); false when missing or bad.
template <class Parse>
bool load_checked_string(Ctx& ctx, const Fields& f, std::string_view key, Parse parse,
                         std::string& out) {
  const Entry* e = f.require(key);
  if (!e) return false;
  auto v = get_string(ctx, e->value, f.path(key));
  if (!v) return false;
  std::string why;
  if (!parse(*v, &why)) {
    ctx.error(e->value, f.path(key), why);
    return false;
  }
  out = *v;
  return true;
}

// The law's numbers: each in its range, then against each other and against the gate's limit.
bool load_saturation_numbers(Ctx& ctx, const Fields& f, Saturation& s) {
  bool ok = true;
  auto number = [&](std::string_view key, NumRule rule, double& out) {
    const Entry* e = f.find(key);
    std::optional<double> v;
    if (e && !(v = get_double(ctx, e->value, f.path(key), rule))) ok = false;
    if (v) out = *v;
    return e;
  };
  auto integer = [&](std::string_view key, int64_t min, int64_t max, int64_t& out) {
    const Entry* e = f.find(key);
    std::optional<int64_t> v;
    if (e && !(v = get_int(ctx, e->value, f.path(key), min, max))) ok = false;
    if (v) out = *v;
    return e;
  };
  const Entry* target = f.require("target");
  std::optional<double> t =
      target ? get_double(ctx, target->value, f.path("target"), {0}) : std::nullopt;
  if (t)
    s.target = *t;
  else
    ok = false;
  number("min_share", {0, true, nullptr, 1, "the configured rate"}, s.min_share);
  const Entry* max =
      number("max_share", {0, true, nullptr, 10, "ten times the configured rate"}, s.max_share);
  number("increase", {0, true, nullptr, 1, "the configured rate"}, s.increase);
  if (const Entry* e = number("decrease", {0, true}, s.decrease); e && s.decrease >= 1) {
    ctx.error(e->value, f.path("decrease"),
              "must be < 1 (the factor the share is multiplied by), got " + e->value.Scalar());
    ok = false;
  }
  integer("interval_ms", 100, 3600000, s.interval_ms);
  s.timeout_ms = std::min<int64_t>(1000, s.interval_ms);
  if (const Entry* e = integer("timeout_ms", 10, 3600000, s.timeout_ms);
      e && s.timeout_ms > s.interval_ms) {
    ctx.error(e->value, f.path("timeout_ms"),
              "must be <= interval_ms (" + std::to_string(s.interval_ms) + ")");
    ok = false;
  }
  integer("failures", 1, 1000, s.failures);
  if (ok && s.max_share < s.min_share) {
    ctx.error(max ? max->value : f.node(), f.path("max_share"),
              "must be >= min_share (" + num_str(s.min_share) + ")");
    ok = false;
  }
  return ok;
}

}  // namespace

bool load_saturation(Ctx& ctx, const YAML::Node& n, const std::string& path, Bucket& b,
                     bool tokens) {
  Fields f(ctx, n, path,
           {"url", "metric", "aggregate", "target", "min_share", "max_share", "increase",
            "decrease", "interval_ms", "timeout_ms", "failures"});
  if (!f.ok()) return false;
  Saturation s;
  bool ok = load_checked_string(
      ctx, f, "url",
      [](const std::string& v, std::string* why) {
        return common::parse_http_url(v, why).has_value();
      },
      s.url);
  ok = load_checked_string(
           ctx, f, "metric",
           [](const std::string& v, std::string* why) {
             return common::parse_prom_selector(v, why).has_value();
           },
           s.metric) &&
       ok;
  if (const Entry* e = f.find("aggregate")) {
    auto v = get_string(ctx, e->value, f.path("aggregate"));
    auto a = v ? common::parse_prom_aggregate(*v) : std::nullopt;
    if (v && !a)
      ctx.error(e->value, f.path("aggregate"), "expected max or sum, got " + describe(e->value));
    if (a) s.aggregate = *a;
    ok = ok && a.has_value();
  }
  ok = load_saturation_numbers(ctx, f, s) && ok;
  // A request costs one token (one place in a window): a floor below one would refuse every
  // request while the backends are saturated, which is the brake's job, not this one's.
  const double floor = b.algorithm == Algorithm::kSlidingWindow
                           ? std::floor(static_cast<double>(b.limit) * s.min_share)
                           : b.capacity * s.min_share;
  if (ok && !tokens && floor < 1) {
    const Entry* e = f.find("min_share");
    ctx.error(e ? e->value : n, f.path("min_share"),
              "min_share x " +
                  std::string(b.algorithm == Algorithm::kSlidingWindow ? "limit" : "capacity") +
                  " is " + num_str(floor) + ": below 1, the floor would refuse every request");
    ok = false;
  }
  if (ok) b.saturation = std::move(s);
  return ok;
}

void load_global_gates(Ctx& ctx, const YAML::Node& n, GlobalGates& g) {
  Fields f(ctx, n, "global_gates", {"tool", "model", "model_tokens", "total", "ip"});
  const Entry* total = f.find("total");
  if (total) g.total = load_bucket(ctx, total->value, f.path("total"));
  if (const Entry* ip = f.find("ip")) g.ip = load_bucket(ctx, ip->value, f.path("ip"));
  for (auto [kind, out_p] :
       {std::pair<const char*, std::map<std::string, Bucket>*>{"tool", &g.tool},
        {"model", &g.model},
        {"model_tokens", &g.model_tokens}}) {
    const Entry* e = f.find(kind);
    if (!e) continue;
    auto es = entries(ctx, e->value, f.path(kind));
    if (!es) continue;
    auto& out = *out_p;
    for (const auto& gate : *es) {
      std::string path = join(f.path(kind), gate.key);
      bool id_ok = check_id(ctx, gate.key_node, path, gate.key);
      auto b = load_bucket(ctx, gate.value, path, out_p == &g.model_tokens, out_p != &g.tool);
      if (id_ok && b) out[gate.key] = *b;
    }
  }
}

}  // namespace dripgate::config::loader
