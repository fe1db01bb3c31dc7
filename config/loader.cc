// YAML -> Config. Walks the document against the schema, collecting every problem as
// `file:line:col: path.to.field: message` instead of stopping at the first one, so a user fixes
// a file in one pass. Nothing here throws to the caller: any input gives a result.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "common/id.h"
#include "config/config.h"
#include "config/load_fields.h"

namespace dripgate::config {

namespace embedded {
extern const char default_yaml[];
extern const unsigned long default_yaml_size;
}  // namespace embedded

namespace {

using namespace loader;

using common::parse_cidr;
using common::quote;
using common::split_host_port;
using common::valid_id;

// ---- sections ----

// A gate's limit: a token bucket (capacity, refill_per_s, warmup_s) or, on a request gate, a
// sliding window (algorithm: sliding_window, limit, window_s). `tokens`: a token-rate gate (its
// cost is a token estimate), which only a bucket can meter.
std::optional<Bucket> load_bucket(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                  bool tokens = false) {
  Fields f(ctx, n, path,
           {"capacity", "refill_per_s", "warmup_s", "mode", "algorithm", "limit", "window_s"});
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
  if (!ok) return std::nullopt;
  return b;
}

// redis.cluster: a non-empty list of host:port seeds, instead of a url.
void load_cluster_seeds(Ctx& ctx, const Fields& f, Redis& r) {
  const Entry* e = f.find("cluster");
  if (!e) return;
  if (f.find("url")) {
    ctx.error(e->value, f.path("cluster"),
              "redis.cluster and redis.url exclude each other: the cluster's seeds name its "
              "nodes (give the password with password_file or password_env)");
    return;
  }
  if (!e->value.IsSequence() || e->value.size() == 0) {
    ctx.error(e->value, f.path("cluster"),
              e->value.IsSequence()
                  ? std::string("must list at least one host:port seed")
                  : "expected a list of host:port seeds, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    auto s = get_string(ctx, e->value[i], index(f.path("cluster"), i));
    if (!s) continue;
    std::string host;
    std::optional<int> port;
    if (auto why = split_host_port(*s, true, host, port))
      ctx.error(
          e->value[i], index(f.path("cluster"), i),
          "bad seed " + quote(*s) + ": " + *why + "; expected host:port or [v6-address]:port");
    else
      r.cluster.push_back(*s);
  }
}

// redis.user: the ACL user dripgate authenticates as on every node of a cluster (seeds carry no
// url to name it in); its password comes from password_file or password_env. A single node's
// url names its own user.
void load_cluster_user(Ctx& ctx, const Fields& f, Redis& r) {
  const Entry* e = f.find("user");
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path("user"));
  if (!s) return;
  if (!f.find("cluster")) {
    ctx.error(e->value, f.path("user"),
              "only with redis.cluster: a url names its own user (redis://user@host)");
    return;
  }
  if (s->empty() ||
      std::any_of(s->begin(), s->end(), [](unsigned char c) { return c <= ' ' || c == 0x7f; })) {
    ctx.error(e->value, f.path("user"),
              "must be a Redis ACL user name: not empty, no spaces or control characters");
    return;
  }
  if (r.password.empty()) {
    ctx.error(e->value, f.path("user"),
              "user " + quote(*s) + " has no password (add password_file or password_env)");
    return;
  }
  r.user = *s;
}

// Where local decisions go, which redis.on_failure (or a plan) sets to `local`.
struct LocalModeUse {
  std::optional<YAML::Node> at;  // the first on_failure: local
  std::string path;
};

void load_failure_policy(Ctx& ctx, const Fields& f, Redis& r, LocalModeUse& local) {
  if (auto mode = get_on_failure(ctx, f)) {
    r.on_failure = *mode;
    if (*mode == OnFailure::kLocal) local = {f.find("on_failure")->value, f.path("on_failure")};
  }
  if (const Entry* e = f.find("local_share")) {
    if (auto v = get_double(ctx, e->value, f.path("local_share"),
                            {0, true, "the share of each limit one daemon uses alone"})) {
      if (*v > 1)
        ctx.error(e->value, f.path("local_share"),
                  "must be at most 1 (the whole limit), got " + e->value.Scalar());
      else
        r.local_share = *v;
    }
  }
  if (const Entry* e = f.find("journal")) {
    if (auto s = get_string(ctx, e->value, f.path("journal"))) {
      if (s->empty())
        ctx.error(e->value, f.path("journal"), "must not be empty (leave journal out for none)");
      else
        r.journal = *s;
    }
  }
}

void load_redis(Ctx& ctx, const YAML::Node& n, Redis& r, LocalModeUse& local) {
  Fields f(ctx, n, "redis",
           {"url", "password_file", "password_env", "timeout_ms", "pool_size", "cluster", "user",
            "on_failure", "local_share", "journal"});
  if (!f.ok()) return;
  // The secret first: the url's checks (a user needs a password; not two passwords) see it.
  load_secret_file(ctx, f, "password_file", r.password_file, r.password);
  load_secret_env(ctx, f, "password_env", "password_file", r.password_env, r.password);
  if (const Entry* e = f.find("url")) {
    if (auto s = get_string(ctx, e->value, f.path("url"))) {
      if (auto why = r.set_url(*s))
        ctx.error(e->value, f.path("url"),
                  "bad redis URL " + quote(common::redact_redis_url(*s)) + ": " + *why +
                      "; expected redis://[[user][:password]@]host[:port][/db] or unix:///path");
    }
  }
  set_int(ctx, f, "timeout_ms", r.timeout_ms, 1);
  set_int(ctx, f, "pool_size", r.pool_size, 1);
  load_cluster_seeds(ctx, f, r);
  load_cluster_user(ctx, f, r);
  load_failure_policy(ctx, f, r, local);
}

// A bearer token (`key`), given inline, as `key_file` (its first line) or as `key_env` (a
// variable's name): in one place only.
void load_token(Ctx& ctx, const Fields& f, const std::string& key, std::string& token,
                std::string& file, std::string& env) {
  const std::string file_key = key + "_file", env_key = key + "_env";
  if (const Entry* e = f.find(key))
    if (auto s = get_string(ctx, e->value, f.path(key))) token = *s;
  if (load_secret_file(ctx, f, file_key, file, token) && f.find(key))
    ctx.error(f.find(file_key)->value, f.path(file_key),
              key + " is set too; give the token in one place");
  if (load_secret_env(ctx, f, env_key, file_key, env, token) && f.find(key))
    ctx.error(f.find(env_key)->value, f.path(env_key),
              key + " is set too; give the token in one place");
}

void load_decision_log(Ctx& ctx, const YAML::Node& n, const std::string& path, DecisionLog& d) {
  Fields f(ctx, n, path, {"path", "sample"});
  if (!f.ok()) return;
  if (const Entry* e = f.require("path")) {
    if (auto s = get_string(ctx, e->value, f.path("path"))) {
      if (s->empty())
        ctx.error(e->value, f.path("path"), "must not be empty (leave decision_log out for none)");
      else
        d.path = *s;
    }
  }
  if (const Entry* e = f.find("sample")) {
    if (auto v = get_double(ctx, e->value, f.path("sample"), {0, true})) {
      if (*v > 1)
        ctx.error(e->value, f.path("sample"),
                  "must be at most 1 (every decision), got " + e->value.Scalar());
      else
        d.sample = *v;
    }
  }
}

// A host:port to listen on; `off_when_empty`: "" turns the listener off.
void load_listen(Ctx& ctx, const Fields& f, std::string_view key, std::string& out,
                 bool off_when_empty = false) {
  const Entry* e = f.find(key);
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path(key));
  if (!s) return;
  if (off_when_empty && s->empty()) {
    out.clear();
    return;
  }
  std::string host;
  std::optional<int> port;
  if (auto why = split_host_port(*s, true, host, port))
    ctx.error(e->value, f.path(key),
              "bad listen address " + quote(*s) + ": " + *why +
                  "; expected host:port or [v6-address]:port");
  else
    out = *s;
}

// control.rls.domains: domain -> { Envoy descriptor key: gate }. Every domain names the tenant.
void load_rls(Ctx& ctx, const YAML::Node& n, const std::string& path,
              std::map<std::string, std::map<std::string, std::string>>& out) {
  static constexpr std::string_view kGates[] = {"tenant", "user", "api_key", "ip", "model", "tool"};
  Fields f(ctx, n, path, {"domains"});
  const Entry* d = f.find("domains");
  if (!d) return;
  auto domains = entries(ctx, d->value, f.path("domains"));
  if (!domains) return;
  std::map<std::string, std::map<std::string, std::string>> loaded;
  for (const Entry& dom : *domains) {
    std::string dpath = join(f.path("domains"), dom.key);
    auto keys = entries(ctx, dom.value, dpath);
    if (!keys) continue;
    bool names_tenant = false;
    for (const Entry& k : *keys) {
      auto gate = get_string(ctx, k.value, join(dpath, k.key));
      if (!gate) continue;
      if (std::find(std::begin(kGates), std::end(kGates), *gate) == std::end(kGates)) {
        ctx.error(k.value, join(dpath, k.key),
                  "unknown gate " + quote(*gate) + " (allowed: " + list(kGates) + ")");
        continue;
      }
      names_tenant = names_tenant || *gate == "tenant";
      loaded[dom.key][k.key] = *gate;
    }
    if (!names_tenant) ctx.error(dom.key_node, dpath, "no descriptor key maps to the tenant gate");
  }
  out = std::move(loaded);
}

void load_control(Ctx& ctx, const YAML::Node& n, Control& c) {
  Fields f(ctx, n, "control",
           {"listen", "threads", "auth_token", "auth_token_file", "auth_token_env", "admin_token",
            "admin_token_file", "admin_token_env", "dataplane_socket", "max_connections",
            "request_timeout_s", "decision_log", "grpc_listen", "rls"});
  if (!f.ok()) return;
  load_listen(ctx, f, "listen", c.listen);
  load_listen(ctx, f, "grpc_listen", c.grpc_listen, true);
  if (const Entry* e = f.find("rls")) load_rls(ctx, e->value, f.path("rls"), c.rls_domains);
  set_int(ctx, f, "threads", c.threads, 1, 1024);
  load_token(ctx, f, "auth_token", c.auth_token, c.auth_token_file, c.auth_token_env);
  load_token(ctx, f, "admin_token", c.admin_token, c.admin_token_file, c.admin_token_env);
  load_socket_path(ctx, f, "dataplane_socket", c.dataplane_socket);
  set_int(ctx, f, "max_connections", c.max_connections, 1, 1000000);
  set_int(ctx, f, "request_timeout_s", c.request_timeout_s, 1, 3600);
  if (const Entry* e = f.find("decision_log"))
    load_decision_log(ctx, e->value, f.path("decision_log"), c.decision_log);
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

void load_plan(Ctx& ctx, const Entry& pe, const std::string& path, Plan& p, LocalModeUse& local) {
  Fields f(ctx, pe.value, path,
           {"class", "gates", "quota", "concurrency", "degrade", "on_failure", "mode"});
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
  if (const Entry* e = f.find("quota")) {
    Fields q(ctx, e->value, f.path("quota"),
             {"tokens_per_month", "reservation_ttl_s", "max_open_reservations", "mode"});
    if (q.ok()) {
      Quota quota;
      bool ok = false;
      if (const Entry* t = q.require("tokens_per_month")) {
        if (auto v = get_int(ctx, t->value, q.path("tokens_per_month"), 1,
                             std::numeric_limits<int64_t>::max(), true)) {
          quota.tokens_per_month = *v;
          ok = true;
        }
      }
      // At most 28 days: a reservation's month is then always the settle's or the one before,
      // among the quota months the gateway declares to the scripts (lua/lib_month.lua).
      set_int(ctx, q, "reservation_ttl_s", quota.reservation_ttl_s, 1, 28 * 86400);
      set_int(ctx, q, "max_open_reservations", quota.max_open_reservations, 1);
      set_gate_mode(ctx, q, quota.mode);
      if (ok) p.quota = quota;
    }
  }
  if (const Entry* e = f.find("concurrency")) {
    Fields c(ctx, e->value, f.path("concurrency"), {"max_streams", "lease_s", "mode"});
    if (c.ok()) {
      Concurrency conc;
      bool ok = false;
      if (const Entry* m = c.require("max_streams")) {
        if (auto v = get_int(ctx, m->value, c.path("max_streams"), 1,
                             std::numeric_limits<int64_t>::max(), true)) {
          conc.max_streams = *v;
          ok = true;
        }
      }
      set_int(ctx, c, "lease_s", conc.lease_s, 1);
      set_gate_mode(ctx, c, conc.mode);
      if (ok) p.concurrency = conc;
    }
  }
  if (const Entry* e = f.find("degrade")) load_degrade(ctx, e->value, f.path("degrade"), p);
}

void load_global_gates(Ctx& ctx, const YAML::Node& n, GlobalGates& g) {
  Fields f(ctx, n, "global_gates", {"tool", "model", "model_tokens", "total"});
  const Entry* total = f.find("total");
  if (total) g.total = load_bucket(ctx, total->value, f.path("total"));
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
      auto b = load_bucket(ctx, gate.value, path, out_p == &g.model_tokens);
      if (id_ok && b) out[gate.key] = *b;
    }
  }
}

struct ClassRef {
  std::string name;
  YAML::Node at;
  std::string path;
  bool implicit = false;  // a plan without `class:` (uses "default")
};

void load_eal(Ctx& ctx, const Fields& f, Dataplane& dp) {
  const Entry* e = f.find("eal");
  if (!e) return;
  if (!e->value.IsSequence()) {
    ctx.error(e->value, f.path("eal"), "expected a list of strings, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i)
    if (auto s = get_string(ctx, e->value[i], index(f.path("eal"), i))) dp.eal.push_back(*s);
}

// At most this many RX lcores: more than one per RX queue a NIC offers is rare, and the drip
// lcore polls one ring per RX lcore between departures.
constexpr size_t kMaxRxLcores = 16;

void load_ports_and_lcores(Ctx& ctx, const Fields& f, Dataplane& dp) {
  // The rx_queues node, kept by value: the ports mapping's Fields end with their block, and the
  // check against the RX lcores needs both sections read.
  std::optional<YAML::Node> queues;
  if (const Entry* e = f.find("ports")) {
    Fields p(ctx, e->value, f.path("ports"), {"client", "cluster", "rx_queues"});
    set_int(ctx, p, "client", dp.client_port, 0);
    set_int(ctx, p, "cluster", dp.cluster_port, 0);
    set_int(ctx, p, "rx_queues", dp.rx_queues, 1, 1024);
    if (const Entry* q = p.find("rx_queues")) queues = q->value;
    if (p.ok() && dp.client_port == dp.cluster_port) {
      const Entry* c = p.find("cluster");
      ctx.error(c ? c->value : p.node(), p.path("cluster"),
                "must differ from ports.client (both are " + std::to_string(dp.client_port) + ")");
    }
  }
  if (const Entry* e = f.find("lcores")) {
    Fields l(ctx, e->value, f.path("lcores"), {"rx", "drip"});
    set_int(ctx, l, "drip", dp.drip_lcore, 0, 1023);
    if (const Entry* rx = l.find("rx")) {
      const std::string path = l.path("rx");
      std::vector<unsigned> lcores;
      bool ok = true;
      auto one = [&](const YAML::Node& n, const std::string& at) {
        auto v = get_int(ctx, n, at, 0, 1023);
        if (!v) {
          ok = false;
          return;
        }
        const unsigned lc = static_cast<unsigned>(*v);
        if (std::find(lcores.begin(), lcores.end(), lc) != lcores.end()) {
          ctx.error(n, at, "lcore " + std::to_string(lc) + " is listed twice");
          ok = false;
        }
        lcores.push_back(lc);
      };
      if (rx->value.IsSequence()) {
        if (rx->value.size() == 0 || rx->value.size() > kMaxRxLcores) {
          ctx.error(rx->value, path,
                    "expected 1 to " + std::to_string(kMaxRxLcores) + " lcores, got " +
                        std::to_string(rx->value.size()));
          ok = false;
        }
        for (size_t i = 0; ok && i < rx->value.size(); ++i) one(rx->value[i], index(path, i));
      } else {
        one(rx->value, path);
      }
      if (ok) {
        if (lcores.size() > 1 &&
            std::find(lcores.begin(), lcores.end(), dp.drip_lcore) != lcores.end())
          ctx.error(rx->value, path,
                    "with several RX lcores the drip lcore (" + std::to_string(dp.drip_lcore) +
                        ") must be another one");
        else
          dp.rx_lcores = std::move(lcores);
      }
    }
  }
  if (queues && dp.rx_queues != 0 && dp.rx_queues < dp.rx_lcores.size())
    ctx.error(*queues, f.path("ports") + ".rx_queues",
              "must be at least the number of RX lcores (" + std::to_string(dp.rx_lcores.size()) +
                  "): each polls its own queues");
}

void load_drip(Ctx& ctx, const Fields& f, Drip& drip) {
  const Entry* e = f.find("drip");
  if (!e) return;
  Fields d(ctx, e->value, f.path("drip"), {"rate_pps", "rate_bps", "batch", "max_catchup"});
  set_double(ctx, d, "rate_pps", drip.rate_pps, {0, false, "0 means unlimited"});
  set_double(ctx, d, "rate_bps", drip.rate_bps, {0, false, "0 means unlimited"});
  set_int(ctx, d, "batch", drip.batch, 1);
  set_int(ctx, d, "max_catchup", drip.max_catchup, 0);
}

// Returns the names of the classes defined, also of those whose values are bad, so that
// references to them do not fail as well.
std::set<std::string> load_classes(Ctx& ctx, const Fields& f, Dataplane& dp) {
  std::set<std::string> names;
  const Entry* e = f.require("classes");
  if (!e) return names;
  auto es = entries(ctx, e->value, f.path("classes"));
  if (!es) return names;
  if (es->empty()) ctx.error(e->value, f.path("classes"), "at least one class is required");
  for (const auto& ce : *es) {
    std::string path = join(f.path("classes"), ce.key);
    Class c;
    c.name = ce.key;
    bool id_ok = check_id(ctx, ce.key_node, path, ce.key);
    Fields cf(ctx, ce.value, path, {"weight", "rate_pps", "rate_bps", "queue_depth", "ttl_ms"});
    set_int(ctx, cf, "weight", c.weight, 1);
    set_double(ctx, cf, "rate_pps", c.rate_pps, {0, false, "0 means unlimited"});
    set_double(ctx, cf, "rate_bps", c.rate_bps, {0, false, "0 means unlimited"});
    set_int(ctx, cf, "queue_depth", c.queue_depth, 1);
    set_int(ctx, cf, "ttl_ms", c.ttl_ms, 1);
    if (id_ok) names.insert(c.name);
    if (id_ok && cf.ok()) dp.classes.push_back(c);
  }
  return names;
}

void load_rule_network(Ctx& ctx, const Fields& rf, const char* side, Rule& r) {
  const Entry* c = rf.find(side);
  if (!c) return;
  auto s = get_string(ctx, c->value, rf.path(side));
  if (!s) return;
  std::string why;
  auto net = parse_cidr(*s, &why);
  if (!net) {
    ctx.error(c->value, rf.path(side), "bad CIDR " + quote(*s) + ": " + why);
    return;
  }
  (std::string_view(side) == "src" ? r.src : r.dst) = *s;
  (std::string_view(side) == "src" ? r.src_net : r.dst_net) = *net;
}

void load_classify(Ctx& ctx, const Fields& f, Dataplane& dp, std::vector<ClassRef>& refs) {
  const Entry* e = f.find("classify");
  if (!e) return;
  if (!e->value.IsSequence() && !e->value.IsNull()) {
    ctx.error(e->value, f.path("classify"), "expected a list of rules, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    std::string path = index(f.path("classify"), i);
    Fields rf(ctx, e->value[i], path, {"src", "dst", "vlan", "dscp", "class"});
    if (!rf.ok()) continue;
    Rule r;
    load_rule_network(ctx, rf, "src", r);
    load_rule_network(ctx, rf, "dst", r);
    if (const Entry* c = rf.find("vlan"))
      if (auto v = get_int(ctx, c->value, rf.path("vlan"), 0, 4095))
        r.vlan = static_cast<uint16_t>(*v);
    if (const Entry* c = rf.find("dscp"))
      if (auto v = get_int(ctx, c->value, rf.path("dscp"), 0, 63))
        r.dscp = static_cast<uint8_t>(*v);
    if (const Entry* c = rf.require("class")) {
      if (auto s = get_string(ctx, c->value, rf.path("class"))) {
        r.cls = *s;
        refs.push_back({*s, c->value, rf.path("class"), false});
      }
    }
    dp.classify.push_back(std::move(r));
  }
}

void load_unknown_flows(Ctx& ctx, const Fields& f, const std::set<std::string>& class_names,
                        Dataplane& dp) {
  if (const Entry* e = f.find("unknown_flows")) {
    if (auto s = get_string(ctx, e->value, f.path("unknown_flows"))) {
      if (*s == "default") {
        dp.unknown_flows = UnknownFlows::kDefault;
      } else if (*s == "drop") {
        dp.unknown_flows = UnknownFlows::kDrop;
      } else if (*s == "pass") {
        dp.unknown_flows = UnknownFlows::kPass;
      } else {
        ctx.error(e->value, f.path("unknown_flows"),
                  "must be one of default, drop, pass; got " + quote(*s));
      }
    }
  }
  if (dp.unknown_flows == UnknownFlows::kDefault && f.find("classes") && !class_names.empty() &&
      !class_names.count("default")) {
    const Entry* e = f.find("unknown_flows");
    ctx.error(e ? e->value : f.find("classes")->value,
              e ? f.path("unknown_flows") : f.path("classes"),
              "is 'default' but there is no class named 'default' (defined: " + list(class_names) +
                  "); add one, or set unknown_flows to drop or pass");
  }
}

// Plans and classify rules name classes; each name must be a class of the dataplane.
void check_class_refs(Ctx& ctx, const std::set<std::string>& class_names,
                      const std::vector<ClassRef>& refs) {
  for (const auto& ref : refs) {
    if (class_names.count(ref.name) || class_names.empty()) continue;
    std::string msg = "no class named " + quote(ref.name) +
                      " in dataplane.classes (defined: " + list(class_names) + ")";
    if (ref.implicit) msg = "the plan has no class, so it uses 'default', but there is " + msg;
    ctx.error(ref.at, ref.path, msg);
  }
}

void load_dataplane(Ctx& ctx, const YAML::Node& n, Dataplane& dp, std::vector<ClassRef>& refs) {
  Fields f(ctx, n, "dataplane",
           {"eal", "ports", "lcores", "mbufs", "drip", "classes", "classify", "unknown_flows",
            "flow_idle_timeout_s", "flow_table_size", "control_socket"});
  if (!f.ok()) return;
  load_eal(ctx, f, dp);
  load_ports_and_lcores(ctx, f, dp);
  set_int(ctx, f, "mbufs", dp.mbufs, 1);
  load_drip(ctx, f, dp.drip);
  std::set<std::string> class_names = load_classes(ctx, f, dp);
  load_classify(ctx, f, dp, refs);
  load_unknown_flows(ctx, f, class_names, dp);
  set_int(ctx, f, "flow_idle_timeout_s", dp.flow_idle_timeout_s, 1);
  set_int(ctx, f, "flow_table_size", dp.flow_table_size, 1);
  load_socket_path(ctx, f, "control_socket", dp.control_socket);
  check_class_refs(ctx, class_names, refs);
}

// Where each document of a stream starts, without building nodes. yaml-cpp 0.7.0 (Debian 12)
// can report a document without consuming any input (a stray ',' at the top level), and its
// LoadAll() then loops forever, allocating (jbeder/yaml-cpp#1040, fixed upstream by #1319);
// so we never call LoadAll and stop as soon as a document starts where the previous one did.
// The same pass stops at the first collection nested deeper than kMaxDepth: yaml-cpp's own guard
// trips much deeper, after seconds of work, and says only "bad file" at the end of the input.
constexpr int kMaxDepth = 64;

struct TooDeep {
  YAML::Mark at;
};

class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxDepth) throw TooDeep{mark};
  }
  int depth_ = 0;
};

// Checks the document structure of the stream: false (with the error added) when the parser
// is stuck; `second` is set when there is more than one document.
bool scan_documents(Ctx& ctx, const std::string& yaml, std::optional<YAML::Mark>& second) {
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  DocumentStarts h;
  for (;;) {
    try {
      if (h.starts.size() >= 2 || !parser.HandleNextDocument(h)) break;
    } catch (const TooDeep& deep) {
      ctx.add(deep.at, "",
              "nested deeper than " + std::to_string(kMaxDepth) +
                  " levels; a configuration "
                  "is a few levels deep");
      return false;
    }
    const auto& s = h.starts;
    // A null document at the very spot of an unconsumed token: the parser made no progress.
    bool stuck = s.size() >= 2 && s[s.size() - 1].pos == s[s.size() - 2].pos;
    if (!stuck && s.size() == 1 && static_cast<size_t>(s[0].pos) < yaml.size() &&
        yaml[s[0].pos] == ',') {
      stuck = true;
    }
    if (stuck) {
      const YAML::Mark& m = s.back();
      char c = static_cast<size_t>(m.pos) < yaml.size() ? yaml[m.pos] : '?';
      ctx.add(m, "", std::string("YAML syntax error: unexpected '") + c + "'");
      return false;
    }
  }
  if (h.starts.size() >= 2) second = h.starts[1];
  return true;
}

void load_root(Ctx& ctx, const YAML::Node& root, Config& cfg) {
  if (root.IsNull()) {
    ctx.add(YAML::Mark(), "",
            "the configuration is empty; expected a mapping of redis, control, plans, tenants, "
            "global_gates, dataplane");
    return;
  }
  Fields f(ctx, root, "", {"redis", "control", "plans", "tenants", "global_gates", "dataplane"});
  if (!f.ok()) return;
  LocalModeUse local;
  if (const Entry* e = f.find("redis")) load_redis(ctx, e->value, cfg.redis, local);
  if (const Entry* e = f.find("control")) load_control(ctx, e->value, cfg.control);

  std::vector<ClassRef> refs;
  std::set<std::string> plan_names;  // also those with bad contents, so tenants do not cascade
  if (const Entry* e = f.find("plans")) {
    if (auto es = entries(ctx, e->value, "plans")) {
      for (const auto& pe : *es) {
        std::string path = join("plans", pe.key);
        if (!check_id(ctx, pe.key_node, path, pe.key)) continue;
        plan_names.insert(pe.key);
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
        cfg.plans[p.name] = p;
      }
    }
  }
  if (const Entry* e = f.find("tenants")) {
    if (auto es = entries(ctx, e->value, "tenants")) {
      for (const auto& te : *es) {
        std::string path = join("tenants", te.key);
        // "*" is the default plan's entry: every tenant not listed gets its own buckets and
        // quota on that plan.
        bool id_ok = te.key == kAnyTenant || check_id(ctx, te.key_node, path, te.key);
        Fields tf(ctx, te.value, path, {"plan"});
        const Entry* pe = tf.require("plan");
        if (!pe) continue;
        auto plan = get_string(ctx, pe->value, tf.path("plan"));
        if (!plan) continue;
        if (!plan_names.count(*plan)) {
          ctx.error(pe->value, tf.path("plan"),
                    "no plan named " + quote(*plan) + " (defined: " + list(plan_names) + ")");
          continue;
        }
        if (id_ok) cfg.tenants[te.key] = Tenant{te.key, *plan};
      }
    }
  }
  if (const Entry* e = f.find("global_gates")) load_global_gates(ctx, e->value, cfg.global_gates);
  // Local decisions are charged to Redis later, from the journal: without one a restart during
  // an outage would forget them.
  if (local.at && cfg.redis.journal.empty())
    ctx.error(*local.at, local.path,
              "local needs redis.journal: the file that keeps the local decisions until they are "
              "reconciled into Redis");
  if (const Entry* e = f.find("dataplane")) {
    Dataplane dp;
    load_dataplane(ctx, e->value, dp, refs);
    cfg.dataplane = std::move(dp);
  }
}

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& name, Secrets secrets) {
  loader::Ctx ctx(name, secrets);
  if (yaml.size() > kMaxConfigBytes) {
    ctx.add(YAML::Mark::null_mark(), "",
            "the configuration has " + std::to_string(yaml.size()) + " bytes; it is at most " +
                std::to_string(kMaxConfigBytes >> 20) + " MiB");
    return LoadResult{std::nullopt, ctx.take()};
  }
  Config cfg;
  cfg.source = name;
  try {
    std::optional<YAML::Mark> second;
    if (scan_documents(ctx, yaml, second)) {
      if (second)
        ctx.add(*second, "", "more than one YAML document; a config file holds exactly one");
      load_root(ctx, YAML::Load(yaml), cfg);
    }
  } catch (const YAML::Exception& e) {
    // Syntax errors come with their position; the message is yaml-cpp's own, without the
    // "yaml-cpp: error at line..." prefix that what() adds.
    ctx.add(e.mark, "", "YAML syntax error: " + e.msg);
  } catch (const std::exception& e) {
    ctx.add(YAML::Mark::null_mark(), "", std::string("cannot read the configuration: ") + e.what());
  }
  LoadResult r;
  r.errors = ctx.take();
  if (r.errors.empty()) r.config = std::move(cfg);
  return r;
}

LoadResult load_file(const std::string& path, Secrets secrets) {
  auto refuse = [&](std::string why) {
    LoadResult r;
    r.errors.push_back(Error{path, 0, 0, "", std::move(why)});
    return r;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return refuse("is a directory, not a YAML file");
  if (auto size = std::filesystem::file_size(path, ec); !ec && size > kMaxConfigBytes)
    return refuse("the file has " + std::to_string(size) + " bytes; a configuration is at most " +
                  std::to_string(kMaxConfigBytes >> 20) + " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult r;
    r.errors.push_back(Error{path, 0, 0, "", std::string("cannot open: ") + std::strerror(errno)});
    return r;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    LoadResult r;
    r.errors.push_back(Error{path, 0, 0, "", "cannot read the file"});
    return r;
  }
  return load_string(text.str(), path, secrets);
}

const std::string& default_yaml() {
  static const std::string text(embedded::default_yaml, embedded::default_yaml_size);
  return text;
}

LoadResult load_default() {
  return load_string(default_yaml(), "<embedded default>");
}

}  // namespace dripgate::config
