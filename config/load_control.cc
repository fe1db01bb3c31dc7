// The `control` section: the control daemon's listeners, tokens, limits and decision log.
#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "common/address.h"
#include "common/error.h"
#include "common/http_url.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::quote;

namespace {

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
  set_nonempty_string(ctx, f, f.require("path"), "path", "decision_log", d.path);
  set_share(ctx, f, "sample", {0, true}, "every decision", d.sample);
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

// control.tls, control.grpc_tls: { cert_file, key_file, client_ca_file }. The certificate and
// its key go together; a client CA needs them. Paths only: the listener reads the files (PEM,
// the key a secret) when it starts and on SIGHUP, and names the field of a file it cannot use.
void load_tls(Ctx& ctx, const Fields& parent, std::string_view key, Tls& out) {
  const Entry* e = parent.find(key);
  if (!e) return;
  Fields f(ctx, e->value, parent.path(key), {"cert_file", "key_file", "client_ca_file"});
  if (!f.ok()) return;
  Tls t;
  for (auto [name, field] : {std::pair{"cert_file", &t.cert_file},
                             {"key_file", &t.key_file},
                             {"client_ca_file", &t.client_ca_file}})
    set_nonempty_string(ctx, f, f.find(name), name, name, *field);
  const Entry* cert = f.find("cert_file");
  const Entry* pkey = f.find("key_file");
  if (cert && !pkey)
    ctx.error(cert->key_node, f.path("key_file"), "missing: a certificate needs its key_file");
  else if (pkey && !cert)
    ctx.error(pkey->key_node, f.path("cert_file"), "missing: a key_file needs its cert_file");
  else if (!cert && f.find("client_ca_file"))
    ctx.error(f.find("client_ca_file")->key_node, f.path("client_ca_file"),
              "needs cert_file and key_file (the server's own certificate)");
  out = std::move(t);
}

// control.status: the status page's metrics endpoints, each an http:// URL.
void load_status(Ctx& ctx, const YAML::Node& n, const std::string& path, Control::Status& out) {
  Fields f(ctx, n, path, {"dataplane_metrics_url", "iat_metrics_url"});
  if (!f.ok()) return;
  for (auto [key, field] : {std::pair{"dataplane_metrics_url", &out.dataplane_metrics_url},
                            {"iat_metrics_url", &out.iat_metrics_url}}) {
    const Entry* e = f.find(key);
    auto v = e ? get_string(ctx, e->value, f.path(key)) : std::nullopt;
    if (!v) continue;
    std::string why;
    if (common::parse_http_url(*v, &why))
      *field = *v;
    else
      ctx.error(e->value, f.path(key), why);
  }
}

}  // namespace

void load_control(Ctx& ctx, const YAML::Node& n, Control& c) {
  Fields f(ctx, n, "control",
           {"listen",
            "threads",
            "auth_token",
            "auth_token_file",
            "auth_token_env",
            "admin_token",
            "admin_token_file",
            "admin_token_env",
            "dataplane_socket",
            "max_connections",
            "request_timeout_s",
            "decision_log",
            "grpc_listen",
            "grpc_max_inflight",
            "rls",
            "queue",
            "tls",
            "grpc_tls",
            "status",
            "auth",
            "metrics_token",
            "metrics_token_file",
            "metrics_token_env",
            "openai_headers"});
  if (!f.ok()) return;
  load_listen(ctx, f, "listen", c.listen);
  load_listen(ctx, f, "grpc_listen", c.grpc_listen, true);
  load_tls(ctx, f, "tls", c.tls);
  load_tls(ctx, f, "grpc_tls", c.grpc_tls);
  set_int(ctx, f, "grpc_max_inflight", c.grpc_max_inflight, 1, 1000000);
  if (const Entry* e = f.find("rls")) load_rls(ctx, e->value, f.path("rls"), c.rls_domains);
  set_int(ctx, f, "threads", c.threads, 1, 1024);
  load_token(ctx, f, "auth_token", c.auth_token, c.auth_token_file, c.auth_token_env);
  load_token(ctx, f, "admin_token", c.admin_token, c.admin_token_file, c.admin_token_env);
  load_token(ctx, f, "metrics_token", c.metrics_token, c.metrics_token_file, c.metrics_token_env);
  if (const Entry* e = f.find("auth"))
    if (auto s = get_string(ctx, e->value, f.path("auth"))) {
      if (*s == "tenant_keys" || *s == "token")
        c.tenant_keys = *s == "tenant_keys";
      else
        ctx.error(
            e->value, f.path("auth"),
            "must be token (the shared auth_token) or tenant_keys (each tenant's keys), got " +
                quote(*s));
    }
  if (const Entry* e = f.find("openai_headers"))
    if (auto v = get_bool(ctx, e->value, f.path("openai_headers"))) c.openai_headers = *v;
  load_socket_path(ctx, f, "dataplane_socket", c.dataplane_socket);
  set_int(ctx, f, "max_connections", c.max_connections, 1, 1000000);
  set_int(ctx, f, "request_timeout_s", c.request_timeout_s, 1, 3600);
  if (const Entry* e = f.find("decision_log"))
    load_decision_log(ctx, e->value, f.path("decision_log"), c.decision_log);
  if (const Entry* e = f.find("status")) load_status(ctx, e->value, f.path("status"), c.status);
  if (const Entry* e = f.find("queue")) {
    Fields q(ctx, e->value, f.path("queue"), {"max_waiters", "max_waiters_per_tenant"});
    if (q.ok()) {
      set_int(ctx, q, "max_waiters", c.queue.max_waiters, 0, 10000000);
      set_int(ctx, q, "max_waiters_per_tenant", c.queue.max_waiters_per_tenant, 0, 10000000);
    }
  }
}

}  // namespace dripgate::config::loader
