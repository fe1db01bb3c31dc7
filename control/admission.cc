#include "control/admission.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <unordered_map>

#include "common/id.h"
#include "control/keys.h"
#include "control/redis_client.h"
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

std::string fmt_double(double v) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%.17g", v);
  return std::string(buf, static_cast<size_t>(n));
}

constexpr std::string_view kIdRule = "must match [A-Za-z0-9._-]{1,64}";

// Lua numbers are doubles: beyond 2^53 token counts would be rounded, so cap them well below.
constexpr int64_t kMaxTokens = 1'000'000'000'000'000;

std::string check_tokens(int64_t tokens) {
  if (tokens < 0) return "tokens: must be an integer >= 0";
  if (tokens > kMaxTokens) return "tokens: must be at most 1000000000000000";
  return {};
}

// One configured token bucket with its ARGV strings formatted once.
struct Gate {
  std::string name;  // "tenant", "user", "api_key", "model", "tool"
  double capacity = 0;
  double refill = 0;
  std::string cap_s, rate_s;
  std::string key;  // global gates: the full key; tenant gates: filled per request

  Gate(std::string n, const config::Bucket& b)
      : name(std::move(n)),
        capacity(b.capacity),
        refill(b.refill_per_s),
        cap_s(fmt_double(b.capacity)),
        rate_s(fmt_double(b.refill_per_s)) {}
};

struct TenantInfo {
  std::string name;
  const config::Plan* plan = nullptr;
  std::optional<Gate> tenant, user, api_key;
  std::string tenant_key, quota_prefix, leases_key;
  std::string budget_s = "-1", res_ttl_s, max_streams_s = "-1", lease_s;
};

// Everything derived from the config that a request needs, built once per engine.
struct Tables {
  std::unordered_map<std::string, TenantInfo> tenants;
  std::unordered_map<std::string, Gate> models, tools;

  explicit Tables(const config::Config& cfg) {
    for (const auto& [name, t] : cfg.tenants) {
      auto pit = cfg.plans.find(t.plan);
      if (pit == cfg.plans.end()) continue;  // the loader rejects this; unknown tenant here
      const config::Plan& p = pit->second;
      TenantInfo ti;
      ti.name = name;
      ti.plan = &p;
      if (p.tenant) ti.tenant.emplace("tenant", *p.tenant);
      if (p.user) ti.user.emplace("user", *p.user);
      if (p.api_key) ti.api_key.emplace("api_key", *p.api_key);
      ti.tenant_key = keys::bucket(name, "tenant");
      ti.quota_prefix = keys::quota_prefix(name);
      ti.leases_key = keys::leases(name);
      config::Quota q = p.quota.value_or(config::Quota{});
      if (p.quota) ti.budget_s = std::to_string(q.tokens_per_month);
      ti.res_ttl_s = std::to_string(std::max<int64_t>(1, q.reservation_ttl_s));
      config::Concurrency c = p.concurrency.value_or(config::Concurrency{});
      if (p.concurrency) ti.max_streams_s = std::to_string(c.max_streams);
      ti.lease_s = std::to_string(std::max<int64_t>(1, c.lease_s));
      tenants.emplace(name, std::move(ti));
    }
    for (const auto& [name, b] : cfg.global_gates.model) {
      Gate g("model", b);
      g.key = keys::global_bucket("model", name);
      models.emplace(name, std::move(g));
    }
    for (const auto& [name, b] : cfg.global_gates.tool) {
      Gate g("tool", b);
      g.key = keys::global_bucket("tool", name);
      tools.emplace(name, std::move(g));
    }
  }
};

Remaining bucket_remaining(const Gate& g, double tokens) {
  Remaining r;
  r.gate = g.name;
  r.value = tokens;
  r.limit = g.capacity;
  r.window_s = g.refill > 0 ? g.capacity / g.refill : 0;
  r.reset_s = g.refill > 0 ? static_cast<int64_t>(std::ceil((g.capacity - tokens) / g.refill)) : 0;
  if (r.reset_s < 0) r.reset_s = 0;
  return r;
}

std::string_view reason_of(std::string_view gate) {
  if (gate == "quota") return "quota";
  if (gate == "concurrency") return "concurrency";
  return "rate";
}

// The admission being built: validated input, key names and the ARGV of the calls.
struct Prepared {
  const TenantInfo* t = nullptr;
  std::string rid, res_key, user_key, api_key_key, tokens_s;
  int64_t tokens = 0;
  std::array<const Gate*, 3> buckets{};
  std::array<std::string_view, 3> bucket_keys{};
  int nb = 0;
  std::array<const Gate*, 2> globals{};
  int ng = 0;
};

// Validates req and fills p; returns an error "field: message" or an empty string.
std::string prepare(const Tables& tables, const AdmitRequest& req, std::mt19937_64& rng,
                    Prepared& p) {
  if (req.tenant.empty()) return "tenant: required";
  if (!id_ok(req.tenant)) return std::string("tenant: ") + std::string(kIdRule);
  auto it = tables.tenants.find(req.tenant);
  if (it == tables.tenants.end()) return "tenant: unknown tenant '" + req.tenant + "'";
  for (auto [field, value] : {std::pair<const char*, const std::string*>{"user", &req.user},
                              {"api_key", &req.api_key},
                              {"model", &req.model},
                              {"tool", &req.tool}}) {
    if (!value->empty() && !id_ok(*value)) return std::string(field) + ": " + std::string(kIdRule);
  }
  if (!req.request_id.empty() && !id_ok(req.request_id))
    return std::string("request_id: ") + std::string(kIdRule);
  if (auto e = check_tokens(req.tokens); !e.empty()) return e;

  const TenantInfo& t = it->second;
  p.t = &t;
  if (req.request_id.empty()) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
    p.rid.reserve(t.name.size() + 17);
    p.rid.append(t.name).append(".").append(hex, 16);
  } else {
    p.rid = req.request_id;
  }
  p.res_key = keys::reservation(t.name, p.rid);
  p.tokens = req.tokens;
  p.tokens_s = std::to_string(req.tokens);
  if (t.tenant) {
    p.buckets[p.nb] = &*t.tenant;
    p.bucket_keys[p.nb++] = t.tenant_key;
  }
  if (t.user && !req.user.empty()) {
    p.user_key = keys::bucket(t.name, "user", req.user);
    p.buckets[p.nb] = &*t.user;
    p.bucket_keys[p.nb++] = p.user_key;
  }
  if (t.api_key && !req.api_key.empty()) {
    p.api_key_key = keys::bucket(t.name, "key", req.api_key);
    p.buckets[p.nb] = &*t.api_key;
    p.bucket_keys[p.nb++] = p.api_key_key;
  }
  if (!req.model.empty()) {
    auto m = tables.models.find(req.model);
    if (m != tables.models.end()) p.globals[p.ng++] = &m->second;
  }
  if (!req.tool.empty()) {
    auto g = tables.tools.find(req.tool);
    if (g != tables.tools.end()) p.globals[p.ng++] = &g->second;
  }
  return {};
}

// KEYS and ARGV of admit.lua, as views into p and the tables.
struct AdmitArgs {
  std::array<std::string_view, 6> keys{};
  size_t nk = 0;
  std::array<std::string_view, 8 + 9> args{};
  size_t na = 0;
  char nb_s[4] = {};

  AdmitArgs(const Prepared& p) {
    const TenantInfo& t = *p.t;
    keys[nk++] = t.quota_prefix;
    keys[nk++] = p.res_key;
    keys[nk++] = t.leases_key;
    for (int i = 0; i < p.nb; ++i) keys[nk++] = p.bucket_keys[i];
    nb_s[0] = static_cast<char>('0' + p.nb);
    args[na++] = p.rid;
    args[na++] = p.tokens_s;
    args[na++] = t.budget_s;
    args[na++] = t.res_ttl_s;
    args[na++] = t.max_streams_s;
    args[na++] = t.lease_s;
    args[na++] = p.ng > 0 ? "1" : "0";
    args[na++] = std::string_view(nb_s, 1);
    for (int i = 0; i < p.nb; ++i) {
      args[na++] = p.buckets[i]->name;
      args[na++] = p.buckets[i]->cap_s;
      args[na++] = p.buckets[i]->rate_s;
    }
  }
};

// Reply accessors: nullptr/0 when the element is missing or of another type.
const redisReply* elem(const redisReply* r, size_t i) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return nullptr;
  return r->element[i];
}
int64_t as_int(const redisReply* r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) return std::strtoll(r->str, nullptr, 10);
  return 0;
}
std::string_view as_str(const redisReply* r) {
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}
double as_double(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_STRING) return static_cast<double>(as_int(r));
  return std::strtod(r->str, nullptr);  // hiredis NUL-terminates bulk strings
}

// Why a reply is not usable, or empty when it is an array of at least n elements.
std::string bad_reply(const redisReply* r, std::string_view error, size_t n) {
  if (!r) return std::string(error.empty() ? "redis: no reply" : error);
  if (r->type == REDIS_REPLY_ERROR) return "redis: " + std::string(r->str, r->len);
  if (r->type != REDIS_REPLY_ARRAY || r->elements < n) return "redis: unexpected reply";
  return {};
}

}  // namespace

bool valid_request_id(std::string_view rid) {
  if (id_ok(rid)) return true;
  auto dot = rid.rfind('.');
  return dot != std::string_view::npos && id_ok(rid.substr(0, dot)) && hex16(rid.substr(dot + 1));
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
  AdmitArgs a(p);
  ScriptCall call;
  call.script = std::string(lua::kAdmit.name);
  call.sha1 = std::string(lua::kAdmit.sha1);
  call.text = std::string(lua::kAdmit.text);
  for (size_t i = 0; i < a.nk; ++i) call.keys.emplace_back(a.keys[i]);
  for (size_t i = 0; i < a.na; ++i) call.args.emplace_back(a.args[i]);
  return call;
}

struct Engine::Impl {
  config::Config cfg;
  Tables tables;
  std::mt19937_64 rng;
  RedisClient redis;

  Impl(const config::Config& c, event_base* base, RedisObserver* observer)
      : cfg(c),
        tables(cfg),
        rng(std::random_device{}()),
        redis(base, RedisOptions::from(cfg.redis),
              std::vector<const lua::Script*>(std::begin(lua::kAll), std::end(lua::kAll)),
              observer) {}

  struct AdmitOp {
    Impl* impl = nullptr;
    std::function<void(AdmitResult)> done;
    AdmitResult res;
    Prepared p;
    // From the tenant-slot call, for the response and a refund.
    std::array<double, 3> tokens_after{};
    int64_t used = 0, month_left = 0, month_len = 0, live = -1, first_ms = 0;
    bool q_existed = false;
    std::vector<std::string> snapshot;  // per bucket: old tk, old ts, new tk, new ts
    std::vector<std::string> pruned;    // expired leases admit.lua pruned: member, score, ...
    std::array<double, 2> global_tokens{};
  };

  void admit(AdmitRequest req, std::function<void(AdmitResult)> done);
  void on_admit_reply(AdmitOp* op, const redisReply* r, std::string_view error);
  void on_gates_reply(AdmitOp* op, const redisReply* r, std::string_view error);
  void refund(AdmitOp* op, std::function<void()> then);
  void finish(AdmitOp* op);
  void fill_tenant_remaining(AdmitOp* op, bool refunded);
  void fail(AdmitOp* op, Outcome o, std::string error) {
    op->res.outcome = o;
    op->res.error = std::move(error);
    finish(op);
  }
  // Resolves the tenant of settle/release; returns an error "field: message" or empty.
  std::string resolve(std::string& tenant, const std::string& rid, const TenantInfo** out);
};

void Engine::Impl::finish(AdmitOp* op) {
  auto done = std::move(op->done);
  AdmitResult res = std::move(op->res);
  delete op;
  done(std::move(res));
}

void Engine::Impl::admit(AdmitRequest req, std::function<void(AdmitResult)> done) {
  auto* op = new AdmitOp;
  op->impl = this;
  op->done = std::move(done);
  std::string err = prepare(tables, req, rng, op->p);
  if (!err.empty()) {
    op->res.outcome = Outcome::kBadRequest;
    op->res.error = std::move(err);
    redis.post([this, op] { finish(op); });
    return;
  }
  op->res.request_id = op->p.rid;
  op->res.klass = op->p.t->plan->klass;
  AdmitArgs a(op->p);
  redis.evalsha(lua::kAdmit, std::span(a.keys.data(), a.nk), std::span(a.args.data(), a.na),
                [this, op](const redisReply* r, std::string_view e) { on_admit_reply(op, r, e); });
}

void Engine::Impl::fill_tenant_remaining(AdmitOp* op, bool refunded) {
  const Prepared& p = op->p;
  const config::Plan& plan = *p.t->plan;
  auto& rem = op->res.remaining;
  for (int i = 0; i < p.nb; ++i) {
    double v = op->tokens_after[static_cast<size_t>(i)];
    if (refunded) v = std::min(p.buckets[i]->capacity, v + 1);
    rem.push_back(bucket_remaining(*p.buckets[i], v));
  }
  if (plan.quota) {
    int64_t used = op->used - (refunded ? p.tokens : 0);
    Remaining q;
    q.gate = "quota";
    q.limit = static_cast<double>(plan.quota->tokens_per_month);
    q.value = static_cast<double>(std::max<int64_t>(0, plan.quota->tokens_per_month - used));
    q.window_s = static_cast<double>(op->month_len);
    q.reset_s = op->month_left;
    rem.push_back(q);
  }
  if (plan.concurrency && op->live >= 0) {
    int64_t live = op->live - (refunded ? 1 : 0);
    Remaining c;
    c.gate = "concurrency";
    c.limit = static_cast<double>(plan.concurrency->max_streams);
    c.value = static_cast<double>(std::max<int64_t>(0, plan.concurrency->max_streams - live));
    c.window_s = static_cast<double>(plan.concurrency->lease_s);
    c.reset_s = live > 0 ? (op->first_ms + 999) / 1000 : 0;
    rem.push_back(c);
  }
}

void Engine::Impl::on_admit_reply(AdmitOp* op, const redisReply* r, std::string_view error) {
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && as_int(elem(r, 0)) == 2) {
    op->res.outcome = Outcome::kConflict;
    op->res.error = "request_id: '" + op->p.rid + "' is already in use";
    finish(op);
    return;
  }
  const Prepared& p = op->p;
  const size_t nb = static_cast<size_t>(p.nb);
  std::string bad = bad_reply(r, error, 9 + nb);
  if (!bad.empty()) return fail(op, Outcome::kUnavailable, std::move(bad));
  int64_t code = as_int(elem(r, 0));
  op->used = as_int(elem(r, 3));
  op->month_left = as_int(elem(r, 4));
  op->month_len = as_int(elem(r, 5));
  op->live = as_int(elem(r, 6));
  op->first_ms = as_int(elem(r, 7));
  op->q_existed = as_int(elem(r, 8)) == 1;
  for (size_t i = 0; i < nb; ++i) op->tokens_after[i] = as_double(elem(r, 9 + i));

  if (code != 1) {
    op->res.outcome = Outcome::kRefused;
    op->res.gate = std::string(as_str(elem(r, 1)));
    op->res.reason = std::string(reason_of(op->res.gate));
    op->res.retry_after_ms = as_int(elem(r, 2));
    fill_tenant_remaining(op, false);
    finish(op);
    return;
  }
  if (p.ng == 0) {
    op->res.outcome = Outcome::kAllowed;
    fill_tenant_remaining(op, false);
    finish(op);
    return;
  }
  if (r->elements < 9 + nb + 4 * nb) {
    // Admitted but without the snapshot a refund needs: cannot happen with our script.
    return fail(op, Outcome::kUnavailable, "redis: unexpected reply");
  }
  op->snapshot.reserve(4 * nb);
  for (size_t i = 0; i < 4 * nb; ++i) op->snapshot.emplace_back(as_str(elem(r, 9 + nb + i)));
  size_t at = 9 + nb + 4 * nb;
  if (r->elements > at) {
    auto k = static_cast<size_t>(std::max<int64_t>(0, as_int(elem(r, at))));
    for (size_t i = 0; i < 2 * k && at + 1 + i < r->elements; ++i)
      op->pruned.emplace_back(as_str(elem(r, at + 1 + i)));
  }

  // Global gates: one call with the model and tool buckets (single-node Redis; see gates.lua).
  std::array<std::string_view, 2> keys{};
  std::array<std::string_view, 1 + 6> args{};
  size_t na = 0;
  static constexpr std::string_view kCounts[] = {"0", "1", "2"};
  args[na++] = kCounts[p.ng];
  for (int i = 0; i < p.ng; ++i) {
    keys[static_cast<size_t>(i)] = p.globals[i]->key;
    args[na++] = p.globals[i]->name;
    args[na++] = p.globals[i]->cap_s;
    args[na++] = p.globals[i]->rate_s;
  }
  redis.evalsha(lua::kGates, std::span(keys.data(), static_cast<size_t>(p.ng)),
                std::span(args.data(), na),
                [this, op](const redisReply* r, std::string_view e) { on_gates_reply(op, r, e); });
}

void Engine::Impl::on_gates_reply(AdmitOp* op, const redisReply* r, std::string_view error) {
  const Prepared& p = op->p;
  std::string bad = bad_reply(r, error, 3 + static_cast<size_t>(p.ng));
  if (!bad.empty()) {
    // The tenant part was admitted: give it back (best effort), then answer 503.
    refund(op, [this, op, bad] { fail(op, Outcome::kUnavailable, bad); });
    return;
  }
  int64_t code = as_int(elem(r, 0));
  for (size_t i = 0; i < static_cast<size_t>(p.ng); ++i)
    op->global_tokens[i] = as_double(elem(r, 3 + i));
  auto add_globals = [op] {
    for (int i = 0; i < op->p.ng; ++i)
      op->res.remaining.push_back(
          bucket_remaining(*op->p.globals[i], op->global_tokens[static_cast<size_t>(i)]));
  };
  if (code == 1) {
    op->res.outcome = Outcome::kAllowed;
    fill_tenant_remaining(op, false);
    add_globals();
    finish(op);
    return;
  }
  op->res.gate = std::string(as_str(elem(r, 1)));
  op->res.reason = "rate";
  op->res.retry_after_ms = as_int(elem(r, 2));
  refund(op, [this, op, add_globals] {
    op->res.outcome = Outcome::kRefused;
    fill_tenant_remaining(op, true);
    add_globals();
    finish(op);
  });
}

void Engine::Impl::refund(AdmitOp* op, std::function<void()> then) {
  const Prepared& p = op->p;
  std::array<std::string_view, 2 + 3> keys{};
  size_t nk = 0;
  keys[nk++] = p.res_key;
  keys[nk++] = p.t->leases_key;
  for (int i = 0; i < p.nb; ++i) keys[nk++] = p.bucket_keys[i];
  std::vector<std::string_view> args;
  args.reserve(4 + 5 * static_cast<size_t>(p.nb) + op->pruned.size());
  static constexpr std::string_view kCounts[] = {"0", "1", "2", "3"};
  args.push_back(p.rid);
  args.push_back(op->q_existed ? "1" : "0");
  args.push_back(kCounts[p.nb]);
  for (size_t i = 0; i < static_cast<size_t>(p.nb); ++i) {
    args.push_back(p.buckets[i]->cap_s);
    for (size_t j = 0; j < 4; ++j) args.push_back(op->snapshot[4 * i + j]);
  }
  std::string pruned_n = std::to_string(op->pruned.size() / 2);
  args.push_back(pruned_n);
  for (const auto& s : op->pruned) args.push_back(s);
  redis.evalsha(lua::kRefund, std::span(keys.data(), nk), std::span(args.data(), args.size()),
                [op, then = std::move(then)](const redisReply* r, std::string_view e) {
                  if (!r || r->type == REDIS_REPLY_ERROR)
                    spdlog::warn("refund of {} failed ({}); its reservation and lease expire",
                                 op->p.rid, r ? std::string_view(r->str, r->len) : e);
                  then();
                });
}

std::string Engine::Impl::resolve(std::string& tenant, const std::string& rid,
                                  const TenantInfo** out) {
  if (rid.empty()) return "request_id: required";
  if (!valid_request_id(rid)) return "request_id: " + std::string(kIdRule);
  if (tenant.empty()) {
    tenant = std::string(keys::tenant_of_request_id(rid));
    if (tenant.empty())
      return "tenant: required (request_id '" + rid + "' does not name its tenant)";
  }
  if (!id_ok(tenant)) return "tenant: " + std::string(kIdRule);
  auto it = tables.tenants.find(tenant);
  if (it == tables.tenants.end()) return "tenant: unknown tenant '" + tenant + "'";
  *out = &it->second;
  return {};
}

Engine::Engine(const config::Config& cfg, event_base* base, RedisObserver* observer)
    : impl_(std::make_unique<Impl>(cfg, base, observer)) {}

Engine::~Engine() = default;

bool Engine::redis_up() const {
  return impl_->redis.up();
}

void Engine::admit(AdmitRequest req, std::function<void(AdmitResult)> done) {
  impl_->admit(std::move(req), std::move(done));
}

void Engine::settle(std::string tenant, std::string request_id, int64_t tokens,
                    std::function<void(SettleResult)> done) {
  Impl& im = *impl_;
  const TenantInfo* t = nullptr;
  std::string err = im.resolve(tenant, request_id, &t);
  if (err.empty()) err = check_tokens(tokens);
  if (!err.empty()) {
    im.redis.post([done = std::move(done), err = std::move(err)] {
      SettleResult res;
      res.outcome = Outcome::kBadRequest;
      res.error = err;
      done(std::move(res));
    });
    return;
  }
  std::string res_key = keys::reservation(t->name, request_id);
  std::string tokens_s = std::to_string(tokens);
  std::array<std::string_view, 2> ks{res_key, t->quota_prefix};
  std::array<std::string_view, 1> as{tokens_s};
  std::optional<int64_t> budget;
  if (t->plan->quota) budget = t->plan->quota->tokens_per_month;
  im.redis.evalsha(lua::kSettle, ks, as,
                   [done = std::move(done), budget](const redisReply* r, std::string_view e) {
                     SettleResult res;
                     std::string bad = bad_reply(r, e, 4);
                     if (!bad.empty()) {
                       res.outcome = Outcome::kUnavailable;
                       res.error = std::move(bad);
                       done(std::move(res));
                       return;
                     }
                     res.outcome = Outcome::kAllowed;
                     res.settled = as_int(elem(r, 0)) == 1;
                     res.detail = std::string(as_str(elem(r, 1)));
                     res.charged = as_int(elem(r, 2));
                     int64_t used = as_int(elem(r, 3));
                     res.remaining = budget ? std::max<int64_t>(0, *budget - used) : -1;
                     done(std::move(res));
                   });
}

void Engine::release(std::string tenant, std::string request_id,
                     std::function<void(ReleaseResult)> done) {
  Impl& im = *impl_;
  const TenantInfo* t = nullptr;
  std::string err = im.resolve(tenant, request_id, &t);
  if (!err.empty()) {
    im.redis.post([done = std::move(done), err = std::move(err)] {
      ReleaseResult res;
      res.outcome = Outcome::kBadRequest;
      res.error = err;
      done(std::move(res));
    });
    return;
  }
  std::array<std::string_view, 1> ks{t->leases_key};
  std::array<std::string_view, 1> as{request_id};
  im.redis.evalsha(lua::kRelease, ks, as,
                   [done = std::move(done)](const redisReply* r, std::string_view e) {
                     ReleaseResult res;
                     if (!r || r->type == REDIS_REPLY_ERROR) {
                       res.outcome = Outcome::kUnavailable;
                       res.error = r ? "redis: " + std::string(r->str, r->len) : std::string(e);
                     } else {
                       res.outcome = Outcome::kAllowed;
                       res.released = as_int(r) == 1;
                     }
                     done(std::move(res));
                   });
}

}  // namespace dripgate::control
