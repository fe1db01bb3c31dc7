// The `tenants` section: each tenant's plan and the digests of its API keys.
#include <algorithm>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/error.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::quote;

namespace {

// keys_sha256: a list of SHA-256 digests, 64 hex digits each (read in either case, kept in
// lower case so that a digest has one spelling).
std::vector<std::string> load_key_digests(Ctx& ctx, const Fields& tf) {
  std::vector<std::string> out;
  const Entry* e = tf.find("keys_sha256");
  if (!e) return out;
  const std::string path = tf.path("keys_sha256");
  if (!e->value.IsSequence()) {
    ctx.error(e->value, path, "expected a list of SHA-256 digests, got " + describe(e->value));
    return out;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    auto s = get_string(ctx, e->value[i], index(path, i));
    if (!s) continue;
    std::string why;
    if (s->size() != 64)
      why = "must be 64 hex digits (a SHA-256 digest), got " + std::to_string(s->size()) +
            " characters";
    for (char& c : *s) {
      if (!why.empty()) break;
      if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
        why = "must be 64 hex digits (a SHA-256 digest), found a character that is no hex digit";
    }
    if (why.empty() && std::find(out.begin(), out.end(), *s) != out.end())
      why = "the same digest twice";
    if (!why.empty()) {
      ctx.error(e->value[i], index(path, i), why);
      continue;
    }
    out.push_back(std::move(*s));
  }
  return out;
}

// flows_from: CIDRs (host bits refused, as in the classifier's rules).
void load_flows_from(Ctx& ctx, const Fields& tf, Tenant& t) {
  const Entry* e = tf.find("flows_from");
  if (!e) return;
  const std::string path = tf.path("flows_from");
  if (!e->value.IsSequence()) {
    ctx.error(e->value, path, "expected a list of CIDRs, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    auto s = get_string(ctx, e->value[i], index(path, i));
    if (!s) continue;
    std::string why;
    auto net = common::parse_cidr(*s, &why);
    if (!net) {
      ctx.error(e->value[i], index(path, i), "bad CIDR " + quote(*s) + ": " + why);
      continue;
    }
    t.flows_from.push_back(*s);
    t.flows_from_nets.push_back(*net);
  }
}

}  // namespace

void load_tenants(Ctx& ctx, const YAML::Node& n, const std::set<std::string>& plan_names,
                  std::map<std::string, Tenant>& tenants) {
  auto es = entries(ctx, n, "tenants");
  if (!es) return;
  for (const auto& te : *es) {
    std::string path = join("tenants", te.key);
    // "*" is the default plan's entry: every tenant not listed gets its own buckets and
    // quota on that plan.
    bool id_ok = te.key == kAnyTenant || check_id(ctx, te.key_node, path, te.key);
    Fields tf(ctx, te.value, path, {"plan", "keys_sha256", "flows_from"});
    const Entry* pe = tf.require("plan");
    if (!pe) continue;
    auto plan = get_string(ctx, pe->value, tf.path("plan"));
    if (!plan) continue;
    if (!plan_names.count(*plan)) {
      ctx.error(pe->value, tf.path("plan"),
                "no plan named " + quote(*plan) + " (defined: " + list(plan_names) + ")");
      continue;
    }
    Tenant t{te.key, *plan, load_key_digests(ctx, tf)};
    load_flows_from(ctx, tf, t);
    if (id_ok) tenants[te.key] = std::move(t);
  }
}

}  // namespace dripgate::config::loader
