// The `global_gates` section: gates shared by every tenant (per tool, per model, per model
// in tokens, and one total).
#include <map>
#include <string>
#include <utility>

#include "config/load_sections.h"

namespace dripgate::config::loader {

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

}  // namespace dripgate::config::loader
