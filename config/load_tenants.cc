// The `tenants` section: each tenant's plan.
#include <string>

#include "common/error.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::quote;

void load_tenants(Ctx& ctx, const YAML::Node& n, const std::set<std::string>& plan_names,
                  std::map<std::string, Tenant>& tenants) {
  auto es = entries(ctx, n, "tenants");
  if (!es) return;
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
    if (id_ok) tenants[te.key] = Tenant{te.key, *plan};
  }
}

}  // namespace dripgate::config::loader
