// The config model's own code: setting a Redis URL, and the YAML writer used for round trips.
#include <charconv>
#include <cstring>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/load_fields.h"

namespace dripgate::config {

std::optional<std::string> Redis::set_url(std::string_view text) {
  common::RedisUrl parsed;
  if (auto why = common::parse_redis_url(text, parsed)) return why;
  const char* elsewhere = !password_file.empty()  ? "password_file"
                          : !password_env.empty() ? "password_env"
                                                  : nullptr;
  if (elsewhere) {
    if (!parsed.password.empty())
      return std::string("a password in the url and a ") + elsewhere + ": give one";
    parsed.password = password;
  }
  if (!parsed.user.empty() && parsed.password.empty() && !elsewhere)
    return "user " + common::quote(parsed.user) +
           " has no password (add one, or password_file, or password_env)";
  static_cast<common::RedisUrl&>(*this) = std::move(parsed);
  url = std::string(text);
  return std::nullopt;
}

std::string_view on_failure_name(OnFailure mode) {
  switch (mode) {
    case OnFailure::kClosed:
      return "closed";
    case OnFailure::kOpen:
      return "open";
    case OnFailure::kLocal:
      return "local";
  }
  return "closed";
}

std::optional<OnFailure> parse_on_failure(std::string_view name) {
  for (OnFailure m : {OnFailure::kClosed, OnFailure::kOpen, OnFailure::kLocal})
    if (on_failure_name(m) == name) return m;
  return std::nullopt;
}

std::string_view gate_mode_name(GateMode mode) {
  return mode == GateMode::kShadow ? "shadow" : "enforce";
}

std::optional<GateMode> parse_gate_mode(std::string_view name) {
  for (GateMode m : {GateMode::kEnforce, GateMode::kShadow})
    if (gate_mode_name(m) == name) return m;
  return std::nullopt;
}

std::string_view quota_gate(common::Period period) {
  switch (period) {
    case common::Period::kMinute:
      return "quota_minute";
    case common::Period::kHour:
      return "quota_hour";
    case common::Period::kDay:
      return "quota_day";
    case common::Period::kWeek:
      return "quota_week";
    case common::Period::kMonth:
      break;
  }
  return "quota";
}

bool is_quota_gate(std::string_view gate) {
  return gate == "quota" || gate.starts_with("quota_");
}

std::string quota_key(common::Period period) {
  return "tokens_per_" + std::string(common::period_name(period));
}

Quota Quota::monthly(int64_t tokens, int64_t reservation_ttl_s, int64_t max_open_reservations) {
  Quota q;
  q.limits = {QuotaLimit{common::Period::kMonth, tokens}};
  q.reservation_ttl_s = reservation_ttl_s;
  q.max_open_reservations = max_open_reservations;
  return q;
}

std::optional<int64_t> Quota::tokens_per_month() const {
  for (const QuotaLimit& l : limits)
    if (l.period == common::Period::kMonth) return l.tokens;
  return std::nullopt;
}

std::string_view algorithm_name(Algorithm a) {
  return a == Algorithm::kSlidingWindow ? "sliding_window" : "token_bucket";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kSlidingWindow})
    if (algorithm_name(a) == name) return a;
  return std::nullopt;
}

namespace loader {
std::string fixed_text(int64_t v, int decimals) {
  std::string frac;
  for (int i = 0; i < decimals; ++i, v /= 10)
    frac.insert(frac.begin(), static_cast<char>('0' + v % 10));
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return std::to_string(v) + (frac.empty() ? "" : "." + frac);
}
}  // namespace loader

namespace {

std::string num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void kv(YAML::Emitter& out, const char* key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << value;
}

// `mode` only when it is not the default.
void mode(YAML::Emitter& out, GateMode m) {
  if (m != GateMode::kEnforce) kv(out, "mode", std::string(gate_mode_name(m)));
}

void bucket(YAML::Emitter& out, const Bucket& b) {
  out << YAML::Flow << YAML::BeginMap;
  if (b.algorithm == Algorithm::kSlidingWindow)
    out << YAML::Key << "algorithm" << YAML::Value << std::string(algorithm_name(b.algorithm))
        << YAML::Key << "limit" << YAML::Value << std::to_string(b.limit) << YAML::Key << "window_s"
        << YAML::Value << num(b.window_s);
  else
    out << YAML::Key << "capacity" << YAML::Value << num(b.capacity) << YAML::Key << "refill_per_s"
        << YAML::Value << num(b.refill_per_s);
  if (b.warmup_s > 0) kv(out, "warmup_s", num(b.warmup_s));
  mode(out, b.mode);
  if (const auto& s = b.saturation) {
    out << YAML::Key << "saturation" << YAML::Value << YAML::BeginMap << YAML::Key << "url"
        << YAML::Value << YAML::DoubleQuoted << s->url << YAML::Key << "metric" << YAML::Value
        << YAML::DoubleQuoted << s->metric;
    kv(out, "aggregate", std::string(common::prom_aggregate_name(s->aggregate)));
    for (auto [key, v] : {std::pair<const char*, double>{"target", s->target},
                          {"min_share", s->min_share},
                          {"max_share", s->max_share},
                          {"increase", s->increase},
                          {"decrease", s->decrease}})
      kv(out, key, num(v));
    for (auto [key, v] : {std::pair<const char*, int64_t>{"interval_ms", s->interval_ms},
                          {"timeout_ms", s->timeout_ms},
                          {"failures", s->failures}})
      kv(out, key, std::to_string(v));
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}
void kv(YAML::Emitter& out, const char* key, double value) {
  kv(out, key, num(value));
}
void kv(YAML::Emitter& out, const char* key, int64_t value) {
  kv(out, key, std::to_string(value));
}

// A token as it was given: the file or variable it is read from, or inline.
void token(YAML::Emitter& out, const std::string& key, const std::string& value,
           const std::string& file, const std::string& env) {
  if (!file.empty())
    out << YAML::Key << key + "_file" << YAML::Value << YAML::DoubleQuoted << file;
  else if (!env.empty())
    out << YAML::Key << key + "_env" << YAML::Value << YAML::DoubleQuoted << env;
  else
    out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

// Only when on: the paths, never what the files hold.
void write_tls(YAML::Emitter& out, const char* key, const Tls& tls) {
  if (!tls.on()) return;
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  kv(out, "cert_file", tls.cert_file);
  kv(out, "key_file", tls.key_file);
  if (!tls.client_ca_file.empty()) kv(out, "client_ca_file", tls.client_ca_file);
  out << YAML::EndMap;
}

void write_redis_and_control(YAML::Emitter& out, const Config& cfg) {
  out << YAML::Key << "redis" << YAML::Value << YAML::BeginMap;
  if (cfg.redis.cluster.empty()) {
    out << YAML::Key << "url" << YAML::Value << YAML::DoubleQuoted << cfg.redis.url;
  } else {
    out << YAML::Key << "cluster" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& seed : cfg.redis.cluster) out << YAML::DoubleQuoted << seed;
    out << YAML::EndSeq;
    if (!cfg.redis.user.empty())
      out << YAML::Key << "user" << YAML::Value << YAML::DoubleQuoted << cfg.redis.user;
  }
  if (!cfg.redis.password_file.empty())
    out << YAML::Key << "password_file" << YAML::Value << YAML::DoubleQuoted
        << cfg.redis.password_file;
  if (!cfg.redis.password_env.empty())
    out << YAML::Key << "password_env" << YAML::Value << YAML::DoubleQuoted
        << cfg.redis.password_env;
  kv(out, "timeout_ms", int64_t{cfg.redis.timeout_ms});
  kv(out, "pool_size", int64_t{cfg.redis.pool_size});
  kv(out, "on_failure", std::string(on_failure_name(cfg.redis.on_failure)));
  kv(out, "local_share", cfg.redis.local_share);
  if (!cfg.redis.journal.empty())
    out << YAML::Key << "journal" << YAML::Value << YAML::DoubleQuoted << cfg.redis.journal;
  if (cfg.redis.journal_fsync == Redis::JournalSync::kInterval)
    kv(out, "journal_fsync", int64_t{cfg.redis.journal_fsync_ms});
  else
    kv(out, "journal_fsync",
       std::string(cfg.redis.journal_fsync == Redis::JournalSync::kAlways ? "always" : "never"));
  kv(out, "journal_max_mb", int64_t{cfg.redis.journal_max_mb});
  kv(out, "journal_full", std::string(on_failure_name(cfg.redis.journal_full)));
  out << YAML::Key << "breaker" << YAML::Value << YAML::BeginMap;
  kv(out, "failures", int64_t{cfg.redis.breaker.failures});
  kv(out, "open_ms", int64_t{cfg.redis.breaker.open_ms});
  kv(out, "probes", int64_t{cfg.redis.breaker.probes});
  out << YAML::EndMap;
  out << YAML::EndMap;

  out << YAML::Key << "control" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << YAML::DoubleQuoted << cfg.control.listen;
  kv(out, "threads", int64_t{cfg.control.threads});
  token(out, "auth_token", cfg.control.auth_token, cfg.control.auth_token_file,
        cfg.control.auth_token_env);
  // Only when set: the admin API is off without it, and older files have no such key.
  if (!cfg.control.admin_token.empty() || !cfg.control.admin_token_file.empty() ||
      !cfg.control.admin_token_env.empty())
    token(out, "admin_token", cfg.control.admin_token, cfg.control.admin_token_file,
          cfg.control.admin_token_env);
  if (cfg.control.tenant_keys) kv(out, "auth", std::string("tenant_keys"));
  if (!cfg.control.metrics_token.empty() || !cfg.control.metrics_token_file.empty() ||
      !cfg.control.metrics_token_env.empty())
    token(out, "metrics_token", cfg.control.metrics_token, cfg.control.metrics_token_file,
          cfg.control.metrics_token_env);
  out << YAML::Key << "dataplane_socket" << YAML::Value << YAML::DoubleQuoted
      << cfg.control.dataplane_socket;
  kv(out, "max_connections", int64_t{cfg.control.max_connections});
  kv(out, "request_timeout_s", int64_t{cfg.control.request_timeout_s});
  if (!cfg.control.decision_log.path.empty()) {
    out << YAML::Key << "decision_log" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted
        << cfg.control.decision_log.path;
    kv(out, "sample", cfg.control.decision_log.sample);
    out << YAML::EndMap;
  }
  write_tls(out, "tls", cfg.control.tls);
  out << YAML::Key << "grpc_listen" << YAML::Value << YAML::DoubleQuoted << cfg.control.grpc_listen;
  write_tls(out, "grpc_tls", cfg.control.grpc_tls);
  kv(out, "grpc_max_inflight", int64_t{cfg.control.grpc_max_inflight});
  // Only when off: on is the default, and older files have no such key.
  if (!cfg.control.openai_headers) out << YAML::Key << "openai_headers" << YAML::Value << false;
  out << YAML::Key << "queue" << YAML::Value << YAML::Flow << YAML::BeginMap;
  kv(out, "max_waiters", cfg.control.queue.max_waiters);
  kv(out, "max_waiters_per_tenant", cfg.control.queue.max_waiters_per_tenant);
  out << YAML::EndMap;
  if (cfg.control.status != Control::Status{}) {
    out << YAML::Key << "status" << YAML::Value << YAML::BeginMap;
    for (auto [key, url] :
         {std::pair{"dataplane_metrics_url", &cfg.control.status.dataplane_metrics_url},
          {"iat_metrics_url", &cfg.control.status.iat_metrics_url}})
      if (!url->empty()) out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << *url;
    out << YAML::EndMap;
  }
  out << YAML::Key << "rls" << YAML::Value << YAML::BeginMap << YAML::Key << "domains"
      << YAML::Value << YAML::BeginMap;
  for (const auto& [domain, keys] : cfg.control.rls_domains) {
    out << YAML::Key << domain << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [key, gate] : keys) out << YAML::Key << key << YAML::Value << gate;
    out << YAML::EndMap;
  }
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::EndMap;
}

void write_plan(YAML::Emitter& out, const Plan& plan) {
  out << YAML::BeginMap;
  out << YAML::Key << "class" << YAML::Value << plan.cls;
  if (plan.tenant || plan.user || plan.api_key || plan.ip || plan.tenant_tokens ||
      plan.user_tokens || plan.api_key_tokens) {
    out << YAML::Key << "gates" << YAML::Value << YAML::BeginMap;
    if (plan.tenant) bucket(out << YAML::Key << "tenant" << YAML::Value, *plan.tenant);
    if (plan.user) bucket(out << YAML::Key << "user" << YAML::Value, *plan.user);
    if (plan.api_key) bucket(out << YAML::Key << "api_key" << YAML::Value, *plan.api_key);
    if (plan.ip) bucket(out << YAML::Key << "ip" << YAML::Value, *plan.ip);
    for (auto [name, b] : {std::pair<const char*, const std::optional<Bucket>*>{
                               "tenant_tokens", &plan.tenant_tokens},
                           {"user_tokens", &plan.user_tokens},
                           {"api_key_tokens", &plan.api_key_tokens}})
      if (*b) bucket(out << YAML::Key << name << YAML::Value, **b);
    out << YAML::EndMap;
  }
  if (plan.quota) {
    out << YAML::Key << "quota" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const QuotaLimit& l : plan.quota->limits) kv(out, quota_key(l.period).c_str(), l.tokens);
    kv(out, "reservation_ttl_s", plan.quota->reservation_ttl_s);
    if (plan.quota->max_open_reservations > 0)
      kv(out, "max_open_reservations", plan.quota->max_open_reservations);
    mode(out, plan.quota->mode);
    out << YAML::EndMap;
  }
  if (plan.quota_timezone != "UTC") kv(out, "quota_timezone", plan.quota_timezone);
  if (plan.weights != TokenWeights{}) {
    out << YAML::Key << "weights" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (auto [name, w] : {std::pair{"input", plan.weights.input},
                           {"output", plan.weights.output},
                           {"cached_input", plan.weights.cached_input},
                           {"reasoning", plan.weights.reasoning}})
      out << YAML::Key << name << YAML::Value << loader::fixed_text(w, 6);
    out << YAML::EndMap;
  }
  if (plan.concurrency) {
    out << YAML::Key << "concurrency" << YAML::Value << YAML::Flow << YAML::BeginMap;
    kv(out, "max_streams", plan.concurrency->max_streams);
    kv(out, "lease_s", plan.concurrency->lease_s);
    mode(out, plan.concurrency->mode);
    out << YAML::EndMap;
  }
  if (plan.degrade) {
    out << YAML::Key << "degrade" << YAML::Value << YAML::Flow << YAML::BeginMap;
    if (!plan.degrade->model.empty()) kv(out, "model", plan.degrade->model);
    if (!plan.degrade->upgrade_url.empty()) kv(out, "upgrade_url", plan.degrade->upgrade_url);
    out << YAML::EndMap;
  }
  if (plan.queue) {
    out << YAML::Key << "queue" << YAML::Value << YAML::Flow << YAML::BeginMap;
    kv(out, "max_wait_ms", plan.queue->max_wait_ms);
    kv(out, "priority", int64_t{plan.queue->priority});
    out << YAML::EndMap;
  }
  if (plan.on_failure) kv(out, "on_failure", std::string(on_failure_name(*plan.on_failure)));
  mode(out, plan.mode);
  out << YAML::EndMap;
}

void write_admission(YAML::Emitter& out, const Config& cfg) {
  out << YAML::Key << "plans" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, plan] : cfg.plans)
    write_plan(out << YAML::Key << name << YAML::Value, plan);
  out << YAML::EndMap;

  out << YAML::Key << "tenants" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, tenant] : cfg.tenants) {
    // A plain `*` would start an alias.
    if (name == kAnyTenant)
      out << YAML::Key << YAML::DoubleQuoted << name;
    else
      out << YAML::Key << name;
    out << YAML::Value << YAML::Flow << YAML::BeginMap;
    kv(out, "plan", tenant.plan);
    if (!tenant.keys_sha256.empty()) {
      out << YAML::Key << "keys_sha256" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const std::string& k : tenant.keys_sha256) out << k;
      out << YAML::EndSeq;
    }
    if (!tenant.flows_from.empty()) {
      out << YAML::Key << "flows_from" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const std::string& n : tenant.flows_from) out << YAML::DoubleQuoted << n;
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  out << YAML::Key << "global_gates" << YAML::Value << YAML::BeginMap;
  for (auto [kind, gates_p] : {std::pair<const char*, const std::map<std::string, Bucket>*>{
                                   "tool", &cfg.global_gates.tool},
                               {"model", &cfg.global_gates.model},
                               {"model_tokens", &cfg.global_gates.model_tokens}}) {
    const auto& gates = *gates_p;
    out << YAML::Key << kind << YAML::Value << YAML::BeginMap;
    for (const auto& [name, b] : gates) bucket(out << YAML::Key << name << YAML::Value, b);
    out << YAML::EndMap;
  }
  if (cfg.global_gates.total)
    bucket(out << YAML::Key << "total" << YAML::Value, *cfg.global_gates.total);
  if (cfg.global_gates.ip) bucket(out << YAML::Key << "ip" << YAML::Value, *cfg.global_gates.ip);
  out << YAML::EndMap;
}

void write_classes_and_rules(YAML::Emitter& out, const Dataplane& dp) {
  out << YAML::Key << "classes" << YAML::Value << YAML::BeginMap;
  for (const auto& c : dp.classes) {
    out << YAML::Key << c.name << YAML::Value << YAML::Flow << YAML::BeginMap;
    kv(out, "weight", int64_t{c.weight});
    kv(out, "rate_pps", c.rate_pps);
    kv(out, "rate_bps", c.rate_bps);
    kv(out, "queue_depth", int64_t{c.queue_depth});
    kv(out, "ttl_ms", int64_t{c.ttl_ms});
    kv(out, "priority", int64_t{c.priority});
    kv(out, "fairness",
       c.fairness == Fairness::kTenant ? "tenant"
       : c.fairness == Fairness::kFlow ? "flow"
                                       : "none");
    kv(out, "subqueues", int64_t{c.subqueues});
    kv(out, "tenant_depth", int64_t{c.tenant_depth});
    if (c.aqm) {
      out << YAML::Key << "aqm" << YAML::Value << YAML::Flow << YAML::BeginMap;
      kv(out, "target_ms", c.aqm->target_ms);
      kv(out, "interval_ms", c.aqm->interval_ms);
      out << YAML::Key << "ecn" << YAML::Value << c.aqm->ecn;
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "classify" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : dp.classify) {
    out << YAML::Flow << YAML::BeginMap;
    if (r.src) out << YAML::Key << "src" << YAML::Value << YAML::DoubleQuoted << *r.src;
    if (r.dst) out << YAML::Key << "dst" << YAML::Value << YAML::DoubleQuoted << *r.dst;
    if (r.vlan) kv(out, "vlan", int64_t{*r.vlan});
    if (r.dscp) kv(out, "dscp", int64_t{*r.dscp});
    kv(out, "class", r.cls);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void write_dataplane(YAML::Emitter& out, const Dataplane& dp) {
  out << YAML::Key << "dataplane" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "eal" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& arg : dp.eal) out << YAML::DoubleQuoted << arg;
  out << YAML::EndSeq;
  out << YAML::Key << "ports" << YAML::Value << YAML::Flow << YAML::BeginMap;
  kv(out, "client", int64_t{dp.client_port});
  kv(out, "cluster", int64_t{dp.cluster_port});
  if (dp.rx_queues) kv(out, "rx_queues", int64_t{dp.rx_queues});
  out << YAML::EndMap;
  out << YAML::Key << "lcores" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "rx" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (unsigned l : dp.rx_lcores) out << l;
  out << YAML::EndSeq;
  kv(out, "drip", int64_t{dp.drip_lcore});
  out << YAML::EndMap;
  kv(out, "mbufs", int64_t{dp.mbufs});
  kv(out, "mtu", int64_t{dp.mtu});
  out << YAML::Key << "drip" << YAML::Value << YAML::Flow << YAML::BeginMap;
  kv(out, "rate_pps", dp.drip.rate_pps);
  kv(out, "rate_bps", dp.drip.rate_bps);
  kv(out, "batch", int64_t{dp.drip.batch});
  kv(out, "max_catchup", int64_t{dp.drip.max_catchup});
  out << YAML::EndMap;
  write_classes_and_rules(out, dp);
  const char* uf = dp.unknown_flows == UnknownFlows::kDrop   ? "drop"
                   : dp.unknown_flows == UnknownFlows::kPass ? "pass"
                                                             : "default";
  kv(out, "unknown_flows", std::string(uf));
  kv(out, "flow_idle_timeout_s", int64_t{dp.flow_idle_timeout_s});
  kv(out, "flow_table_size", int64_t{dp.flow_table_size});
  out << YAML::Key << "control_socket" << YAML::Value << YAML::DoubleQuoted << dp.control_socket;
  if (!dp.control_socket_group.empty())
    out << YAML::Key << "control_socket_group" << YAML::Value << YAML::DoubleQuoted
        << dp.control_socket_group;
  if (!dp.metrics_listen.empty())
    out << YAML::Key << "metrics_listen" << YAML::Value << YAML::DoubleQuoted << dp.metrics_listen;
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const Config& cfg) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  write_redis_and_control(out, cfg);
  write_admission(out, cfg);
  if (cfg.dataplane) write_dataplane(out, *cfg.dataplane);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dripgate::config
