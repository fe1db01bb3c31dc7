#include "control/admission/script_calls.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/address.h"
#include "common/id.h"
#include "control/admission/keys.h"
#include "control/admission/saturation.h"
#include "control/redis/wall_clock.h"
#include "lua/lua_scripts.h"

namespace dripgate::control {

namespace {

bool id_ok(std::string_view id) {
  return common::valid_id(id);
}

bool hex16(std::string_view s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

// v as 16 hex digits, lowercase: the request ids the engine generates and the attempts.
// Appended to out: a request id is made in place, without a temporary string.
void append_hex(std::string& out, uint64_t v) {
  // Two digits a byte, from a table: half the steps of a digit at a time.
  static constexpr auto kPairs = [] {
    constexpr char kDigits[] = "0123456789abcdef";
    std::array<char, 512> t{};
    for (size_t b = 0; b < 256; ++b) {
      t[2 * b] = kDigits[b >> 4];
      t[2 * b + 1] = kDigits[b & 0xf];
    }
    return t;
  }();
  const size_t at = out.size();
  out.resize(at + 16);
  char* w = out.data() + at;
  for (int i = 7; i >= 0; --i, v >>= 8) {
    const size_t b = static_cast<size_t>(v & 0xff);
    w[2 * i] = kPairs[2 * b];
    w[2 * i + 1] = kPairs[2 * b + 1];
  }
}

namespace {

std::string fmt_double(double v) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%.17g", v);
  return std::string(buf, static_cast<size_t>(n));
}

constexpr std::string_view kIdRule = "must match [A-Za-z0-9._-]{1,64}";

constexpr int64_t kMaxTokens = kMaxTokenCost;

const std::string kAttemptTtl = std::to_string(kAttemptTtlS);

// Bucket counts (at most seven tenant buckets, four global ones) and bands as ARGV strings.
constexpr std::string_view kCounts[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8"};
static_assert(std::size(kCounts) > kMaxTenantBuckets && std::size(kCounts) > kMaxGlobalBuckets &&
              std::size(kCounts) > Turn::kNoWait);

}  // namespace

Gate::Gate(std::string n, const config::Bucket& b, bool tokens, bool plan_shadow)
    : name(std::move(n)),
      per_token(tokens),
      capacity(b.capacity),
      refill(b.refill_per_s),
      cap_s(fmt_double(b.capacity)),
      rate_s(fmt_double(b.refill_per_s)),
      warmup_s(fmt_double(b.warmup_s)),
      shadow(plan_shadow || b.mode == config::GateMode::kShadow ? "1" : "0") {
  if (b.algorithm != config::Algorithm::kSlidingWindow) return;
  window = true;
  limit = b.limit;
  // The scripts count in milliseconds; the loader allows no window below one.
  window_ms = std::max<int64_t>(1, std::llround(b.window_s * 1000));
  limit_s = std::to_string(limit);
  window_ms_s = std::to_string(window_ms);
}

Gate::Gate(const Gate& g, double factor) : Gate(g) {
  capacity = g.capacity * factor;
  refill = g.refill * factor;
  cap_s = fmt_double(capacity);
  rate_s = fmt_double(refill);
  if (window) {
    limit = static_cast<int64_t>(std::floor(static_cast<double>(g.limit) * factor));
    limit_s = std::to_string(limit);
  }
}

namespace {

// The key of a tenant's gate g: its bucket, or its sliding window.
std::string gate_key(const Gate& g, std::string_view tenant, std::string_view gate,
                     std::string_view id = {}) {
  return g.window ? keys::window(tenant, gate, id) : keys::bucket(tenant, gate, id);
}

// A global gate's key: its bucket or its sliding window, in the gate's own slot.
std::string global_key(const Gate& g, std::string_view kind, std::string_view name) {
  if (kind == "total") return g.window ? keys::total_window() : keys::total_bucket();
  return g.window ? keys::global_window(kind, name) : keys::global_bucket(kind, name);
}

// A tenant's keys: every one carries the tenant's own hash tag.
void set_keys(TenantInfo& ti, const std::string& name) {
  ti.name = name;
  ti.tenant_key =
      ti.tenant && ti.tenant->window ? keys::window(name, "tenant") : keys::bucket(name, "tenant");
  if (ti.tenant_tokens) ti.tenant_tokens_key = keys::bucket(name, "tenant_tokens");
  ti.quota_prefix = keys::quota_prefix(name);
  ti.reservations_prefix = keys::reservations(name);
  ti.leases_key = keys::leases(name);
}

PlanGates plan_gates_of(const config::Plan& p) {
  PlanGates g;
  const bool shadow = p.mode == config::GateMode::kShadow;
  if (p.tenant) g.tenant.emplace("tenant", *p.tenant, false, shadow);
  if (p.user) g.user.emplace("user", *p.user, false, shadow);
  if (p.api_key) g.api_key.emplace("api_key", *p.api_key, false, shadow);
  if (p.ip) g.ip.emplace("ip", *p.ip, false, shadow);
  if (p.tenant_tokens) g.tenant_tokens.emplace("tenant_tokens", *p.tenant_tokens, true, shadow);
  if (p.user_tokens) g.user_tokens.emplace("user_tokens", *p.user_tokens, true, shadow);
  if (p.api_key_tokens) g.api_key_tokens.emplace("api_key_tokens", *p.api_key_tokens, true, shadow);
  return g;
}

std::string_view shadow_s(const config::Plan& p, config::GateMode gate) {
  return p.mode == config::GateMode::kShadow || gate == config::GateMode::kShadow ? "1" : "0";
}

TenantInfo plan_info(const config::Plan& p, const PlanGates& g, const common::QuotaCalendar* zone) {
  TenantInfo ti;
  ti.plan = &p;
  ti.zone = zone;
  auto ptr = [](const std::optional<Gate>& o) { return o ? &*o : nullptr; };
  ti.tenant = ptr(g.tenant);
  ti.user = ptr(g.user);
  ti.api_key = ptr(g.api_key);
  ti.ip = ptr(g.ip);
  ti.tenant_tokens = ptr(g.tenant_tokens);
  ti.user_tokens = ptr(g.user_tokens);
  ti.api_key_tokens = ptr(g.api_key_tokens);
  config::Quota q = p.quota.value_or(config::Quota{});
  if (p.quota) {
    ti.nq = std::min(q.limits.size(), ti.quotas.size());
    for (size_t i = 0; i < ti.nq; ++i) {
      QuotaInfo& qi = ti.quotas[i];
      qi.period = q.limits[i].period;
      qi.name = config::quota_gate(qi.period);
      qi.limit = q.limits[i].tokens;
      qi.limit_s = std::to_string(qi.limit);
    }
  }
  ti.res_ttl = std::max<int64_t>(1, q.reservation_ttl_s);
  ti.res_ttl_s = std::to_string(ti.res_ttl);
  if (p.quota && q.max_open_reservations > 0)
    ti.max_open_s = std::to_string(q.max_open_reservations);
  ti.quota_shadow_s = shadow_s(p, q.mode);
  config::Concurrency c = p.concurrency.value_or(config::Concurrency{});
  if (p.concurrency) ti.max_streams_s = std::to_string(c.max_streams);
  ti.lease_s = std::to_string(std::max<int64_t>(1, c.lease_s));
  if (p.concurrency) ti.lease_len_s = std::max<int64_t>(1, c.lease_s);
  ti.streams_shadow_s = shadow_s(p, c.mode);
  return ti;
}

}  // namespace

Tables::Tables(const config::Config& cfg) {
  // A zone the loader found and the tz database no longer has (changed since) counts in UTC.
  auto zone_of = [this](const config::Plan& p) -> const common::QuotaCalendar* {
    auto it = zones.find(p.quota_timezone);
    if (it == zones.end()) {
      std::optional<common::QuotaCalendar> z = common::QuotaCalendar::load(p.quota_timezone);
      if (!z) return nullptr;
      it = zones.emplace(p.quota_timezone, std::move(*z)).first;
    }
    return &it->second;
  };
  for (const auto& [name, p] : cfg.plans) {
    const PlanGates& g = plan_gates.emplace(name, plan_gates_of(p)).first->second;
    plans.emplace(name, plan_info(p, g, zone_of(p)));
  }
  tenants.reserve(cfg.tenants.size());
  for (const auto& [name, t] : cfg.tenants) {
    auto pit = cfg.plans.find(t.plan);
    if (pit == cfg.plans.end()) continue;  // the loader rejects this; unknown tenant here
    TenantInfo ti = plan_info(pit->second, plan_gates.at(t.plan), zone_of(pit->second));
    if (name == config::kAnyTenant) {
      any = std::move(ti);
      continue;
    }
    set_keys(ti, name);
    tenants.emplace(name, std::move(ti));
  }
  // A global gate per name (a token-rate gate is never a window: the loader refuses one).
  auto add_globals = [](auto& into, const char* kind, const auto& gates, bool tokens) {
    for (const auto& [name, b] : gates) {
      Gate g(kind, b, tokens);
      g.key = global_key(g, kind, name);
      g.waiters_key = keys::global_waiters(kind, name);
      g.id = name;
      into.emplace(name, std::move(g));
    }
  };
  add_globals(models, "model", cfg.global_gates.model, false);
  add_globals(model_tokens, "model_tokens", cfg.global_gates.model_tokens, true);
  add_globals(tools, "tool", cfg.global_gates.tool, false);
  if (cfg.global_gates.total) {
    total.emplace("total", *cfg.global_gates.total);
    total->key = global_key(*total, "total", {});
    total->waiters_key = keys::total_waiters();
  }
  if (cfg.global_gates.ip) ip.emplace(std::string(kGlobalIpGate), *cfg.global_gates.ip);
}

std::string check_tokens(int64_t tokens) {
  if (tokens < 0) return "tokens: must be an integer >= 0";
  if (tokens > kMaxTokens) return "tokens: must be at most 1000000000000000";
  return {};
}

bool valid_request_id(std::string_view rid) {
  if (id_ok(rid)) return true;
  auto dot = rid.rfind('.');
  return dot != std::string_view::npos && id_ok(rid.substr(0, dot)) && hex16(rid.substr(dot + 1));
}

const TenantInfo* Tables::entry(const std::string& name, const TenantDirectory* registry,
                                std::string* why) const {
  if (const std::string* plan = registry ? registry->plan_of(name) : nullptr) {
    auto it = plans.find(*plan);
    if (it == plans.end()) {
      if (why)
        *why = "tenant: '" + name + "' is on plan '" + *plan +
               "' in the tenant registry, and the configuration has no such plan (put the "
               "tenant on another plan, or the plan back into the configuration)";
      return nullptr;
    }
    return &it->second;
  }
  if (auto it = tenants.find(name); it != tenants.end()) return &it->second;
  return any ? &*any : nullptr;
}

const TenantInfo* Tables::own(const TenantInfo* entry, const std::string& name,
                              std::shared_ptr<const TenantInfo>& unlisted) {
  // A listed tenant's entry has its keys; a plan's and any's have no name.
  if (!entry || !entry->name.empty()) return entry;
  auto ti = std::make_shared<TenantInfo>(*entry);
  set_keys(*ti, name);
  unlisted = std::move(ti);
  return unlisted.get();
}

namespace {

// The tenant `name` names (Tables::find; entry: its Tables::entry when the caller looked it up
// already, else null), or the error "tenant: ..." that says why none.
std::string find_tenant(const Tables& tables, const std::string& name, const TenantInfo*& found,
                        std::shared_ptr<const TenantInfo>& unlisted,
                        const TenantDirectory* registry, const TenantInfo* entry = nullptr) {
  if (name.empty()) return "tenant: required";
  if (!id_ok(name)) return std::string("tenant: ") + std::string(kIdRule);
  std::string why;
  found = Tables::own(entry ? entry : tables.entry(name, registry, &why), name, unlisted);
  if (!found) return why.empty() ? "tenant: unknown tenant '" + name + "'" : why;
  return {};
}

// Points p's gates at copies with their rates scaled: an enforced gate's by the brake (null:
// none applies; shadow gates keep their rates: they show what the configured limit would do),
// a model gate's by its saturation share (shadow ones too: the share is part of that gate's own
// limit, which its answers show); a gate with both gets the product.
void scale_gates(Prepared& p, const Brake* brake, const SaturationShares* saturation) {
  size_t next = 0;
  bool braked = false;
  auto scale = [&](const Gate*& g, double factor) {
    if (brake && g->shadow != "1") {
      factor *= brake->factor;
      braked = true;
    }
    if (factor != 1) g = &p.braked[next++].emplace(*g, factor);
  };
  for (int i = 0; i < p.nb; ++i) scale(p.buckets[i], 1);
  for (int i = 0; i < p.nw; ++i) scale(p.windows[i], 1);
  for (int i = 0; i < p.ng; ++i)
    scale(p.globals[i], saturation ? saturation->of(p.globals[i]->name, p.globals[i]->id) : 1);
  if (braked) p.brake = brake->factor;
}

// The request's global gates with the keys of their gates.lua markers (and taken records), and
// the member its windows take when it meets any (tenant or global).
void add_global_gates(const Tables& tables, const AdmitRequest& req,
                      const std::optional<std::string>& ip, Prepared& p) {
  if (!req.model.empty()) {
    auto m = tables.models.find(req.model);
    if (m != tables.models.end()) p.globals[p.ng++] = &m->second;
    auto mt = tables.model_tokens.find(req.model);
    if (mt != tables.model_tokens.end()) p.globals[p.ng++] = &mt->second;
  }
  if (!req.tool.empty()) {
    auto g = tables.tools.find(req.tool);
    if (g != tables.tools.end()) p.globals[p.ng++] = &g->second;
  }
  if (tables.total) p.globals[p.ng++] = &*tables.total;
  // Per address across tenants: a tenant id invented under the "*" plan brings no fresh bucket.
  if (tables.ip && ip) {
    Gate& g = p.global_ip.emplace(*tables.ip);
    g.id = *ip;
    g.key = global_key(g, kGlobalIpGate, g.id);
    g.waiters_key = keys::global_waiters(kGlobalIpGate, g.id);
    p.globals[p.ng++] = &g;
  }
  bool windows = p.nw > 0;
  for (int i = 0; i < p.ng; ++i) {
    const Gate& g = *p.globals[i];
    windows = windows || g.window;
    p.attempt_keys[i] = g.id.empty() ? keys::total_attempt(p.attempt)
                                     : keys::global_attempt(g.name, g.id, p.attempt);
    if (g.per_token) p.taken_keys[i] = keys::global_taken(g.name, g.id, p.rid);
  }
  if (windows) p.member.append(p.rid).append(":").append(p.attempt);
}

// admit.lua's flags, a character each: fresh, snapshot (asked for on every call: any admission
// may have to be undone), quota_shadow, streams_shadow; the attempt follows them in the same
// argument (Prepared::flags).
std::string_view admit_flags(bool fresh, bool quota_shadow, bool streams_shadow) {
  static constexpr std::string_view kFlags[8] = {"0100", "0101", "0110", "0111",
                                                 "1100", "1101", "1110", "1111"};
  return kFlags[(fresh ? 4 : 0) | (quota_shadow ? 2 : 0) | (streams_shadow ? 1 : 0)];
}

}  // namespace

std::string prepare(const Tables& tables, const AdmitRequest& req, std::mt19937_64& rng,
                    Prepared& p, const TenantDirectory* registry, const Brake* brake,
                    int64_t redis_offset_ms, const SaturationShares* saturation,
                    const TenantInfo* entry) {
  const TenantInfo* found = nullptr;
  if (auto e = find_tenant(tables, req.tenant, found, p.unlisted, registry, entry); !e.empty())
    return e;
  for (auto [field, value] : {std::pair<const char*, const std::string*>{"user", &req.user},
                              {"api_key", &req.api_key},
                              {"model", &req.model},
                              {"tool", &req.tool}}) {
    if (!value->empty() && !id_ok(*value)) return std::string(field) + ": " + std::string(kIdRule);
  }
  if (!req.request_id.empty() && !id_ok(req.request_id))
    return std::string("request_id: ") + std::string(kIdRule);
  if (auto e = check_tokens(req.tokens); !e.empty()) return e;
  // Validated whether or not the plan has an ip gate: bad input is refused the same way under
  // every plan. Normalised here, once, into the form the key is made of.
  std::optional<std::string> ip;
  if (!req.client_ip.empty() && !(ip = common::client_ip_key(req.client_ip)))
    return "client_ip: must be an IPv4 or IPv6 address";

  const TenantInfo& t = *found;
  p.t = &t;
  if (req.request_id.empty()) {
    p.rid.reserve(t.name.size() + 17);
    p.rid.append(t.name).append(".");
    append_hex(p.rid, rng());
    p.fresh = true;
  } else {
    p.rid = req.request_id;
    p.fresh = false;
  }
  p.attempt.clear();
  // 64 bits: a gate's marker is named by the attempt alone and kept a minute, so at admission
  // rate a gate holds about a million at once; with 32 bits a new attempt found another's "ran"
  // about once in 4,000 admissions and was answered 503 (call cancelled).
  append_hex(p.attempt, rng());
  p.flags.assign(admit_flags(p.fresh, t.quota_shadow_s == "1", t.streams_shadow_s == "1"))
      .append(p.attempt);
  t.time_keys(p.time_keys, redis_offset_ms);
  p.tokens = req.tokens;
  p.tokens_s = std::to_string(req.tokens);
  // A request gate is a bucket or a window (its own list, after the buckets in the call).
  auto add = [&p](const Gate* g, std::string_view key) {
    if (g->window) {
      p.windows[p.nw] = g;
      p.window_keys[p.nw++] = key;
    } else {
      p.buckets[p.nb] = g;
      p.bucket_keys[p.nb++] = key;
    }
  };
  if (t.tenant) add(t.tenant, t.tenant_key);
  if (t.user && !req.user.empty()) {
    p.user_key = gate_key(*t.user, t.name, "user", req.user);
    add(t.user, p.user_key);
  }
  if (t.api_key && !req.api_key.empty()) {
    p.api_key_key = gate_key(*t.api_key, t.name, "key", req.api_key);
    add(t.api_key, p.api_key_key);
  }
  // Like user and api_key, the ip gate applies to the requests that name a client_ip.
  if (t.ip && ip) {
    p.ip_key = gate_key(*t.ip, t.name, "ip", *ip);
    add(t.ip, p.ip_key);
  }
  // The token-rate gates take the estimate, in the same call as the request gates.
  if (t.tenant_tokens) {
    p.buckets[p.nb] = t.tenant_tokens;
    p.bucket_keys[p.nb++] = t.tenant_tokens_key;
  }
  if (t.user_tokens && !req.user.empty()) {
    p.user_tokens_key = keys::bucket(t.name, "user_tokens", req.user);
    p.buckets[p.nb] = t.user_tokens;
    p.bucket_keys[p.nb++] = p.user_tokens_key;
  }
  if (t.api_key_tokens && !req.api_key.empty()) {
    p.api_key_tokens_key = keys::bucket(t.name, "key_tokens", req.api_key);
    p.buckets[p.nb] = t.api_key_tokens;
    p.bucket_keys[p.nb++] = p.api_key_tokens_key;
  }
  add_global_gates(tables, req, ip, p);
  // An estimate above a token-rate gate's capacity can never pass, however long the client
  // waits: a 400 naming tokens tells it so, where a 429 would invite retries.
  auto too_big = [&](const Gate& g) -> std::string {
    if (!g.per_token || static_cast<double>(p.tokens) <= g.capacity) return {};
    return "tokens: " + p.tokens_s + " exceeds the capacity " + g.cap_s + " of the " + g.name +
           " gate: it can never be admitted";
  };
  for (int i = 0; i < p.nb; ++i)
    if (auto e = too_big(*p.buckets[i]); !e.empty()) return e;
  for (int i = 0; i < p.ng; ++i)
    if (auto e = too_big(*p.globals[i]); !e.empty()) return e;
  // The brake and the saturation after the capacity check: an estimate the configured capacity
  // holds waits them out.
  if (brake && !brake->applies_to(t.plan->name)) brake = nullptr;
  if (brake || saturation) scale_gates(p, brake, saturation);
  return {};
}

std::string resolve(const Tables& tables, std::string& tenant, const std::string& rid,
                    const TenantInfo** out, std::shared_ptr<const TenantInfo>& unlisted,
                    const TenantDirectory* registry) {
  if (rid.empty()) return "request_id: required";
  if (!valid_request_id(rid)) return "request_id: " + std::string(kIdRule);
  if (tenant.empty()) {
    tenant = std::string(keys::tenant_of_request_id(rid));
    if (tenant.empty())
      return "tenant: required (request_id '" + rid + "' does not name its tenant)";
  }
  return find_tenant(tables, tenant, *out, unlisted, registry);
}

Slots::Slots(size_t fixed, size_t total) : fixed_(fixed) {
  v_.reserve(std::max(fixed, total));
  v_.resize(fixed);
}

void Slots::set(size_t pos, std::string_view v) {
  assert(pos < fixed_);
  v_[pos] = v;
}

std::span<const std::string_view> Slots::view() const {
  for (size_t i = 0; i < fixed_; ++i) assert(v_[i].data() != nullptr);
  return v_;
}

namespace {

// Where admit.lua, settle.lua, charge.lua and refund.lua take the reservation windows and the
// quota group (keys::TimeKeys): each declares the windows in the same order, then the quota
// groups first among its groups (KEYS prev cur next; ARGV prev_start start end next_end, after
// admit.lua's gate and budget).
struct TimePositions {
  size_t res_m2, res_base, quota_count, quota_stride, prev_start, gate = ~size_t{0},
                                                                  budget = ~size_t{0};
};
template <size_t ResM2, size_t ResP2, size_t KeyStride, size_t Prev, size_t Cur, size_t Next,
          size_t PrevStart, size_t Start, size_t End, size_t NextEnd>
constexpr void check_time_positions() {
  static_assert(ResP2 == ResM2 + 4 && KeyStride == 3 && Prev == 0 && Cur == 1 && Next == 2 &&
                Start == PrevStart + 1 && End == PrevStart + 2 && NextEnd == PrevStart + 3);
}
#define DRIPGATE_TIME_POSITIONS(s)                                                        \
  (check_time_positions<s::kKeyResM2, s::kKeyResP2, s::kKeyQuotaStride, s::kKeyQuotaPrev, \
                        s::kKeyQuotaCur, s::kKeyQuotaNext, s::kArgQuotaPrevStart,         \
                        s::kArgQuotaStart, s::kArgQuotaEnd, s::kArgQuotaNextEnd>(),       \
   TimePositions{s::kKeyResM2, s::kArgResBase, s::kArgQuotaCount, s::kArgQuotaStride,     \
                 s::kArgQuotaPrevStart})
constexpr TimePositions kSettleTime = DRIPGATE_TIME_POSITIONS(lua::settle);
constexpr TimePositions kRefundTime = DRIPGATE_TIME_POSITIONS(lua::refund);
constexpr TimePositions kChargeTime = DRIPGATE_TIME_POSITIONS(lua::charge);
constexpr TimePositions kAdmitTime = [] {
  TimePositions t = DRIPGATE_TIME_POSITIONS(lua::admit);
  t.gate = lua::admit::kArgQuotaGate;
  t.budget = lua::admit::kArgQuotaBudget;
  return t;
}();
#undef DRIPGATE_TIME_POSITIONS

// What a bucket takes from an admission: 1, or the estimate on a token-rate gate.
std::string_view cost_of(const Prepared& p, const Gate& g) {
  return g.per_token ? std::string_view(p.tokens_s) : std::string_view("1");
}

// Where a script's bucket group takes each field: admit.lua and gates.lua (gate capacity refill
// cost shadow warmup_s), the corrections settle.lua, charge.lua and correct_gates.lua (capacity
// refill warmup_s; no gate, cost or shadow: kNone).
inline constexpr size_t kNone = ~size_t{0};
template <size_t Stride>
struct BucketPositions {
  size_t capacity, refill, warmup_s, gate = kNone, cost = kNone, shadow = kNone;
};
#define DRIPGATE_ADMIT_BUCKET(s)                                                         \
  BucketPositions<s::kArgBucketStride> {                                                 \
    s::kArgBucketCapacity, s::kArgBucketRefill, s::kArgBucketWarmupS, s::kArgBucketGate, \
        s::kArgBucketCost, s::kArgBucketShadow                                           \
  }
#define DRIPGATE_CORRECTED_BUCKET(s)                                 \
  BucketPositions<s::kArgBucketStride> {                             \
    s::kArgBucketCapacity, s::kArgBucketRefill, s::kArgBucketWarmupS \
  }
constexpr auto kAdmitBucket = DRIPGATE_ADMIT_BUCKET(lua::admit);
constexpr auto kGatesBucket = DRIPGATE_ADMIT_BUCKET(lua::gates);
constexpr auto kSettleBucket = DRIPGATE_CORRECTED_BUCKET(lua::settle);
constexpr auto kChargeBucket = DRIPGATE_CORRECTED_BUCKET(lua::charge);
constexpr auto kCorrectGatesBucket = DRIPGATE_CORRECTED_BUCKET(lua::correct_gates);
#undef DRIPGATE_ADMIT_BUCKET
#undef DRIPGATE_CORRECTED_BUCKET

// The one place a bucket's KEYS entry and ARGV group are written, for every script that reads a
// bucket's limits. cost: what the bucket takes (scripts with a cost field).
template <size_t Stride>
void add_bucket(Call& call, std::string_view key, const Gate& g, BucketPositions<Stride> at,
                std::string_view cost = {}) {
  call.keys.add(key);
  std::array<std::string_view, Stride> f;
  f[at.capacity] = g.cap_s;
  f[at.refill] = g.rate_s;
  f[at.warmup_s] = g.warmup_s;
  if (at.gate != kNone) f[at.gate] = g.name;
  if (at.cost != kNone) f[at.cost] = cost;
  if (at.shadow != kNone) f[at.shadow] = g.shadow;
  call.args.add(f);
}

// The sliding windows' part of admit.lua and gates.lua, and of their undos refund.lua and
// ungates.lua: after the buckets, in KEYS the windows' keys, in ARGV (count member) and, for
// the admissions, one (gate limit window_ms shadow) group per window. One layout for the four
// scripts, checked here, so one packer serves them.
namespace win = lua::admit;
static_assert(win::kArgWindowsStride == 2 && lua::gates::kArgWindowsStride == 2 &&
              lua::refund::kArgWindowsStride == 2 && lua::ungates::kArgWindowsStride == 2);
static_assert(win::kArgWindowsCount == lua::gates::kArgWindowsCount &&
              win::kArgWindowsCount == lua::refund::kArgWindowsCount &&
              win::kArgWindowsCount == lua::ungates::kArgWindowsCount &&
              win::kArgWindowsMember == lua::gates::kArgWindowsMember &&
              win::kArgWindowsMember == lua::refund::kArgWindowsMember &&
              win::kArgWindowsMember == lua::ungates::kArgWindowsMember);
static_assert(win::kArgWindowStride == lua::gates::kArgWindowStride &&
              win::kArgWindowGate == lua::gates::kArgWindowGate &&
              win::kArgWindowLimit == lua::gates::kArgWindowLimit &&
              win::kArgWindowWindowMs == lua::gates::kArgWindowWindowMs &&
              win::kArgWindowShadow == lua::gates::kArgWindowShadow);
constexpr size_t kWindowArgs = win::kArgWindowsStride + kMaxTenantWindows * win::kArgWindowStride;

// groups: false for an undo, which needs only the keys and the member.
void add_windows(Call& c, std::span<const Gate* const> gates,
                 std::span<const std::string_view> keys, std::string_view member, bool groups) {
  for (auto k : keys) c.keys.add(k);
  std::array<std::string_view, win::kArgWindowsStride> head;
  head[win::kArgWindowsCount] = kCounts[keys.size()];
  head[win::kArgWindowsMember] = member;
  c.args.add(head);
  if (!groups) return;
  for (const Gate* g : gates) {
    std::array<std::string_view, win::kArgWindowStride> a;
    a[win::kArgWindowGate] = g->name;
    a[win::kArgWindowLimit] = g->limit_s;
    a[win::kArgWindowWindowMs] = g->window_ms_s;
    a[win::kArgWindowShadow] = g->shadow;
    c.args.add(a);
  }
}

// The reservation windows and, first among the groups, one quota group per quota of t: call
// before adding the buckets.
void set_time_keys(Call& c, const keys::TimeKeys& tk, TimePositions at, const TenantInfo& t) {
  for (size_t i = 0; i < tk.windows.size(); ++i) c.keys.set(at.res_m2 + i, tk.windows[i]);
  c.args.set(at.res_base, tk.base);
  c.args.set(at.quota_count, kCounts[tk.nq]);
  for (size_t q = 0; q < tk.nq; ++q) {
    for (std::string_view k : tk.quotas[q].keys) c.keys.add(k);
    std::array<std::string_view, 6> g;
    for (size_t i = 0; i < 4; ++i) g[at.prev_start + i] = tk.quotas[q].bounds[i];
    if (at.gate != ~size_t{0}) {
      g[at.gate] = t.quotas[q].name;
      g[at.budget] = t.quotas[q].limit_s;
    }
    for (size_t i = 0; i < at.quota_stride; ++i) c.args.add(g[i]);
  }
}

}  // namespace

namespace {

const keys::Months& periods_of(const TenantInfo& t, const QuotaInfo& q, int64_t now_s) {
  return t.zone ? keys::current_periods(*t.zone, q.period, now_s) : keys::current_months(now_s);
}

}  // namespace

void TenantInfo::time_keys(keys::TimeKeys& out, int64_t redis_offset_ms) const {
  const int64_t now = (wall_ms() + redis_offset_ms) / 1000;
  std::array<const keys::Months*, keys::TimeKeys::kMaxQuotas> periods{};
  for (size_t q = 0; q < nq; ++q) periods[q] = &periods_of(*this, quotas[q], now);
  out.build(quota_prefix, reservations_prefix, res_ttl_s, res_ttl, now,
            std::span(periods.data(), nq));
}

std::string TenantInfo::quota_key(size_t q, int64_t now_s) const {
  return keys::quota_counter(quota_prefix, periods_of(*this, quotas[q], now_s).cur.name);
}

std::vector<QuotaPeriodRef> TenantInfo::quota_periods(int64_t now_s) const {
  std::vector<QuotaPeriodRef> out;
  out.reserve(nq);
  for (size_t q = 0; q < nq; ++q) {
    const keys::Month& m = periods_of(*this, quotas[q], now_s).cur;
    out.push_back({m.name, m.end + (m.end - m.start)});
  }
  return out;
}

AdmitCall::AdmitCall(const Prepared& p)
    : Call(
          lua::kAdmit, lua::admit::kKeysFixed, lua::admit::kKeysFixed + kMaxTenantBuckets,
          lua::admit::kArgsFixed,
          lua::admit::kArgsFixed + kMaxTenantBuckets * lua::admit::kArgBucketStride + kWindowArgs) {
  namespace s = lua::admit;
  const TenantInfo& t = *p.t;
  set_time_keys(*this, p.time_keys, kAdmitTime, t);
  keys.set(s::kKeyLeases, t.leases_key);
  args.set(s::kArgRequestId, p.rid);
  args.set(s::kArgTokens, p.tokens_s);
  args.set(s::kArgReservationTtl, t.res_ttl_s);
  args.set(s::kArgMaxOpen, t.max_open_s);
  args.set(s::kArgMaxStreams, t.max_streams_s);
  args.set(s::kArgLeaseS, t.lease_s);
  args.set(s::kArgFlags, p.flags);
  args.set(s::kArgDeadline, p.deadline);
  args.set(s::kArgBucketCount, kCounts[p.nb]);
  for (int i = 0; i < p.nb; ++i)
    add_bucket(*this, p.bucket_keys[i], *p.buckets[i], kAdmitBucket, cost_of(p, *p.buckets[i]));
  // Without windows admit.lua takes none of their arguments (each costs Redis a string and a
  // table slot).
  if (p.nw > 0)
    add_windows(*this, std::span(p.windows.data(), static_cast<size_t>(p.nw)),
                std::span(p.window_keys.data(), static_cast<size_t>(p.nw)), p.member, true);
}

GatesCall::GatesCall(const Prepared& p, int i)
    : Call(lua::kGates, lua::gates::kKeysFixed, lua::gates::kKeysFixed + 1, lua::gates::kArgsFixed,
           lua::gates::kArgsFixed + lua::gates::kArgBucketStride + kWindowArgs) {
  namespace s = lua::gates;
  const Gate& gate = *p.globals[i];
  keys.set(s::kKeyAttempt, p.attempt_keys[i]);
  keys.set(s::kKeyTaken, gate.per_token ? p.taken_keys[i] : p.attempt_keys[i]);
  keys.set(s::kKeyWaiters, gate.waiters_key);
  args.set(s::kArgAttemptTtl, kAttemptTtl);
  args.set(s::kArgTakenTtl, gate.per_token ? std::string_view(p.t->res_ttl_s) : "0");
  args.set(s::kArgDeadline, p.deadline);
  // By name: under a brake the gate is the braked copy.
  const bool head = !p.turn.head.empty() && p.turn.head == gate.name;
  args.set(s::kArgHolder, p.holder);
  // Nobody waits on a global ip gate (one queue per address would be one per client): its
  // call never registers a waiter.
  const bool waits = p.turn.waits && gate.name != kGlobalIpGate;
  args.set(s::kArgTurn, head ? "h" : waits ? "n" : "-");
  args.set(s::kArgBand, kCounts[static_cast<size_t>(p.turn.band)]);
  args.set(s::kArgLeftMs, p.left_ms_s);
  args.set(s::kArgNextTenants, p.next_tenants_s);
  args.set(s::kArgBookMs, waits ? std::string_view(p.book_ms_s) : "0");
  args.set(s::kArgNextBand,
           p.turn.next_band < 0 ? "-1" : kCounts[static_cast<size_t>(p.turn.next_band)]);
  const Gate* const one[] = {&gate};
  const std::string_view key[] = {gate.key};
  if (gate.window) {
    args.set(s::kArgBucketCount, kCounts[0]);
    add_windows(*this, one, key, p.member, true);
    return;
  }
  keys.add(gate.key);
  args.set(s::kArgBucketCount, kCounts[1]);
  add_bucket(*this, gate.key, gate, kGatesBucket, cost_of(p, gate));
  add_windows(*this, {}, {}, p.member, true);
}

UngatesCall::UngatesCall(const Prepared& p, int i, const std::vector<std::string>& snapshot,
                         bool took)
    : Call(lua::kUngates, lua::ungates::kKeysFixed, lua::ungates::kKeysFixed + 1,
           lua::ungates::kArgsFixed,
           lua::ungates::kArgsFixed + lua::ungates::kArgBucketStride + kWindowArgs) {
  namespace s = lua::ungates;
  const Gate& gate = *p.globals[i];
  keys.set(s::kKeyAttempt, p.attempt_keys[i]);
  keys.set(s::kKeyTaken, gate.per_token ? p.taken_keys[i] : p.attempt_keys[i]);
  args.set(s::kArgAttemptTtl, kAttemptTtl);
  const std::string_view key[] = {gate.key};
  if (gate.window) {
    args.set(s::kArgBucketCount, kCounts[0]);
    add_windows(*this, {}, key, p.member, false);
    return;
  }
  args.set(s::kArgBucketCount, kCounts[took ? 1 : 0]);
  if (!took) {
    add_windows(*this, {}, {}, p.member, false);
    return;
  }
  keys.add(gate.key);
  std::array<std::string_view, s::kArgBucketStride> g;
  g.fill("");
  g[s::kArgBucketCapacity] = gate.cap_s;
  g[s::kArgBucketCost] = cost_of(p, gate);
  if (snapshot.size() == 4) {
    g[s::kArgBucketOldTk] = snapshot[0];
    g[s::kArgBucketOldTs] = snapshot[1];
    g[s::kArgBucketNewTk] = snapshot[2];
    g[s::kArgBucketNewTs] = snapshot[3];
  }
  args.add(g);
  add_windows(*this, {}, {}, p.member, false);
}

RefundCall::RefundCall(const Prepared& p, const Undo& undo)
    : Call(lua::kRefund, lua::refund::kKeysFixed, lua::refund::kKeysFixed + kMaxTenantBuckets,
           lua::refund::kArgsFixed,
           lua::refund::kArgsFixed + kMaxTenantBuckets * lua::refund::kArgBucketStride +
               kWindowArgs + undo.pruned.size()) {
  namespace s = lua::refund;
  set_time_keys(*this, p.time_keys, kRefundTime, *p.t);
  keys.set(s::kKeyLeases, p.t->leases_key);
  args.set(s::kArgRequestId, p.rid);
  args.set(s::kArgAttempt, p.attempt);
  args.set(s::kArgFresh, p.fresh ? "1" : "0");
  args.set(s::kArgReservationTtl, p.t->res_ttl_s);
  // Without admit.lua's reply (lost) whether a quota key existed is unknown: keep them ("1":
  // every one).
  args.set(s::kArgQuotaExisted, undo.quota_existed.empty() ? std::string_view("1")
                                                           : std::string_view(undo.quota_existed));
  const bool exact = undo.snapshot.size() == 4 * static_cast<size_t>(p.nb);
  int n = 0;
  for (size_t i = 0; i < static_cast<size_t>(p.nb); ++i) {
    if (undo.untaken & (1u << i)) continue;
    ++n;
    keys.add(p.bucket_keys[i]);
    std::array<std::string_view, s::kArgBucketStride> g;
    g.fill("");
    g[s::kArgBucketCapacity] = p.buckets[i]->cap_s;
    g[s::kArgBucketCost] = cost_of(p, *p.buckets[i]);
    if (exact) {
      const std::string* old_new = &undo.snapshot[4 * i];  // old tk, old ts, new tk, new ts
      g[s::kArgBucketOldTk] = old_new[0];
      g[s::kArgBucketOldTs] = old_new[1];
      g[s::kArgBucketNewTk] = old_new[2];
      g[s::kArgBucketNewTs] = old_new[3];
    }
    args.add(g);
  }
  args.set(s::kArgBucketCount, kCounts[n]);
  add_windows(*this, {}, std::span(p.window_keys.data(), static_cast<size_t>(p.nw)), p.member,
              false);
  for (size_t j = 0; j + 1 < undo.pruned.size(); j += 2) {
    std::array<std::string_view, s::kArgPrunedStride> g;
    g[s::kArgPrunedMember] = undo.pruned[j];
    g[s::kArgPrunedScore] = undo.pruned[j + 1];
    args.add(g);
  }
}

std::string prepare_correction(const Tables& tables, std::string tenant, const std::string& rid,
                               int64_t tokens, const std::string& user, const std::string& api_key,
                               const std::string& model, Correction& c,
                               const TenantDirectory* registry, int64_t redis_offset_ms) {
  std::string err = resolve(tables, tenant, rid, &c.t, c.unlisted, registry);
  if (err.empty()) err = check_tokens(tokens);
  if (!err.empty()) return err;
  for (auto [field, value] : {std::pair<const char*, const std::string*>{"user", &user},
                              {"api_key", &api_key},
                              {"model", &model}}) {
    if (!value->empty() && !id_ok(*value)) return std::string(field) + ": " + std::string(kIdRule);
  }
  const TenantInfo& t = *c.t;
  c.rid = rid;
  c.tokens = tokens;
  c.tokens_s = std::to_string(tokens);
  t.time_keys(c.time_keys, redis_offset_ms);
  if (t.tenant_tokens) {
    c.buckets[c.nb] = t.tenant_tokens;
    c.bucket_keys[c.nb++] = t.tenant_tokens_key;
  }
  if (t.user_tokens && !user.empty()) {
    c.user_key = keys::bucket(t.name, "user_tokens", user);
    c.buckets[c.nb] = t.user_tokens;
    c.bucket_keys[c.nb++] = c.user_key;
  }
  if (t.api_key_tokens && !api_key.empty()) {
    c.api_key_key = keys::bucket(t.name, "key_tokens", api_key);
    c.buckets[c.nb] = t.api_key_tokens;
    c.bucket_keys[c.nb++] = c.api_key_key;
  }
  if (!model.empty()) {
    auto m = tables.model_tokens.find(model);
    if (m != tables.model_tokens.end()) {
      c.model = &m->second;
      c.taken_key = keys::global_taken(c.model->name, c.model->id, rid);
    }
  }
  return {};
}

namespace {

// The (capacity refill warmup_s) groups of a correction's tenant-slot buckets, in KEYS and ARGV,
// at the positions the script names.
template <size_t Stride>
void add_corrected_buckets(Call& call, const Correction& c, size_t count_at,
                           BucketPositions<Stride> at) {
  call.args.set(count_at, kCounts[c.nb]);
  for (int i = 0; i < c.nb; ++i) add_bucket(call, c.bucket_keys[i], *c.buckets[i], at);
}

}  // namespace

SettleCall::SettleCall(const Correction& c)
    : Call(lua::kSettle, lua::settle::kKeysFixed, lua::settle::kKeysFixed + 3,
           lua::settle::kArgsFixed, lua::settle::kArgsFixed + 3 * lua::settle::kArgBucketStride) {
  namespace s = lua::settle;
  set_time_keys(*this, c.time_keys, kSettleTime, *c.t);
  args.set(s::kArgRequestId, c.rid);
  args.set(s::kArgReservationTtl, c.t->res_ttl_s);
  args.set(s::kArgTokens, c.tokens_s);
  add_corrected_buckets(*this, c, s::kArgBucketCount, kSettleBucket);
}

ChargeCall::ChargeCall(const Correction& c)
    : Call(lua::kCharge, lua::charge::kKeysFixed, lua::charge::kKeysFixed + 3,
           lua::charge::kArgsFixed, lua::charge::kArgsFixed + 3 * lua::charge::kArgBucketStride) {
  namespace s = lua::charge;
  set_time_keys(*this, c.time_keys, kChargeTime, *c.t);
  keys.set(s::kKeyLeases, c.t->leases_key);
  args.set(s::kArgRequestId, c.rid);
  args.set(s::kArgReservationTtl, c.t->res_ttl_s);
  args.set(s::kArgTokens, c.tokens_s);
  args.set(s::kArgLeaseS, c.t->lease_s);
  args.set(s::kArgDeadline, c.deadline);
  add_corrected_buckets(*this, c, s::kArgBucketCount, kChargeBucket);
}

CorrectGatesCall::CorrectGatesCall(const Correction& c, bool final)
    : Call(lua::kCorrectGates, lua::correct_gates::kKeysFixed, lua::correct_gates::kKeysFixed + 1,
           lua::correct_gates::kArgsFixed,
           lua::correct_gates::kArgsFixed + lua::correct_gates::kArgBucketStride) {
  namespace s = lua::correct_gates;
  assert(c.model);
  keys.set(s::kKeyTaken, c.taken_key);
  args.set(s::kArgTokens, c.tokens_s);
  args.set(s::kArgFinal, final ? "1" : "0");
  args.set(s::kArgDeadline, c.deadline);
  args.set(s::kArgBucketCount, kCounts[1]);
  add_bucket(*this, c.model->key, *c.model, kCorrectGatesBucket);
}

ReleaseCall::ReleaseCall(const TenantInfo& t, const std::string& request_id)
    : Call(lua::kRelease, lua::release::kKeysFixed, lua::release::kKeysFixed,
           lua::release::kArgsFixed, lua::release::kArgsFixed) {
  namespace s = lua::release;
  keys.set(s::kKeyLeases, t.leases_key);
  args.set(s::kArgRequestId, request_id);
}

namespace {

size_t bucket_count(std::span<const ReconcileRecord> records) {
  size_t n = 0;
  for (const ReconcileRecord& c : records) n += c.buckets.size();
  return n;
}

size_t quota_count(std::span<const ReconcileRecord> records) {
  size_t n = 0;
  for (const ReconcileRecord& c : records) n += c.quotas.size();
  return n;
}

}  // namespace

ReconcileCall::ReconcileCall(std::span<const ReconcileRecord> records)
    : Call(lua::kReconcile, lua::reconcile::kKeysFixed,
           lua::reconcile::kKeysFixed + quota_count(records) + bucket_count(records),
           lua::reconcile::kArgsFixed,
           lua::reconcile::kArgsFixed + records.size() * lua::reconcile::kArgRecordStride +
               quota_count(records) * lua::reconcile::kArgQuotaStride +
               bucket_count(records) * lua::reconcile::kArgBucketStride) {
  namespace s = lua::reconcile;
  static const std::string kTtl = std::to_string(kAppliedTtlS);
  assert(!records.empty());
  keys.set(s::kKeyApplied, records.front().applied_key);
  args.set(s::kArgWatermark, records.front().watermark);
  args.set(s::kArgAppliedTtl, kTtl);
  // Reserved in full first: the views into them stay valid.
  text.reserve(3 * records.size() + 1);
  text.push_back(std::to_string(records.size()));
  args.set(s::kArgRecordCount, text.back());
  for (const ReconcileRecord& c : records) {
    assert(c.applied_key == records.front().applied_key);
    for (const ReconcileRecord::Quota& q : c.quotas) keys.add(q.key);
    std::array<std::string_view, s::kArgRecordStride> r;
    r[s::kArgRecordSeq] = c.seq;
    r[s::kArgRecordTokens] = text.emplace_back(std::to_string(c.tokens));
    r[s::kArgRecordExact] = c.exact ? "1" : "0";
    r[s::kArgRecordQuotaCount] = text.emplace_back(std::to_string(c.quotas.size()));
    r[s::kArgRecordBucketCount] = text.emplace_back(std::to_string(c.buckets.size()));
    args.add(r);
    for (const ReconcileRecord::Bucket& b : c.buckets) keys.add(b.key);
  }
  for (const ReconcileRecord& c : records)
    for (const ReconcileRecord::Quota& q : c.quotas) {
      std::array<std::string_view, s::kArgQuotaStride> g;
      g[s::kArgQuotaExpireAt] = q.expire_at;
      args.add(g);
    }
  for (const ReconcileRecord& c : records)
    for (const ReconcileRecord::Bucket& b : c.buckets) {
      std::array<std::string_view, s::kArgBucketStride> g;
      g[s::kArgBucketCapacity] = b.capacity;
      g[s::kArgBucketRefill] = b.refill;
      g[s::kArgBucketCost] = b.cost;
      args.add(g);
    }
}

const std::string& admit_script_text() {
  static const std::string text(lua::kAdmit.text);
  return text;
}

std::optional<ScriptCall> admit_script_call(const config::Config& cfg, const AdmitRequest& req,
                                            std::string* error) {
  Tables tables(cfg);
  std::mt19937_64 rng(std::random_device{}());
  Prepared p;
  std::string err = prepare(tables, req, rng, p);
  if (!err.empty()) {
    if (error) *error = err;
    return std::nullopt;
  }
  AdmitCall a(p);
  ScriptCall call;
  call.script = std::string(lua::kAdmit.name);
  call.sha1 = std::string(lua::kAdmit.sha1);
  call.text = std::string(lua::kAdmit.text);
  for (auto k : a.keys.view()) call.keys.emplace_back(k);
  for (auto v : a.args.view()) call.args.emplace_back(v);
  return call;
}

}  // namespace dripgate::control
