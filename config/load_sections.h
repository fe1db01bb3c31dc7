// The loader's sections (internal to config/): one function per top-level key of the document,
// each in its own load_<section>.cc, called by load_root (loader.cc). What one section needs
// from another (plan names, class references, the first `on_failure: local`) travels through
// the arguments declared here, so load_root calls a section only after those it depends on.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/load_fields.h"

namespace dripgate::config::loader {

// Where local decisions go, which redis.on_failure (or a plan) sets to `local`.
struct LocalModeUse {
  std::optional<YAML::Node> at;  // the first on_failure: local
  std::string path;
};

// A class named by a plan or a classify rule, checked once dataplane.classes is read.
struct ClassRef {
  std::string name;
  YAML::Node at;
  std::string path;
  bool implicit = false;  // a plan without `class:` (uses "default")
};

// redis (load_redis.cc); notes the first on_failure: local in `local`.
void load_redis(Ctx& ctx, const YAML::Node& n, Redis& r, LocalModeUse& local);

// control (load_control.cc).
void load_control(Ctx& ctx, const YAML::Node& n, Control& c);

// A gate's limit: a token bucket (capacity, refill_per_s, warmup_s) or, on a request gate, a
// sliding window (algorithm: sliding_window, limit, window_s). `tokens`: a token-rate gate (its
// cost is a token estimate), which only a bucket can meter. `saturation`: the gate may follow
// its backends' saturation (a global model or model_tokens gate); elsewhere the key is unknown.
// Used by plans and by global_gates (load_plans.cc).
std::optional<Bucket> load_bucket(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                  bool tokens = false, bool saturation = false);

// A model gate's `saturation` (load_global_gates.cc) into b.saturation, checked against b's
// limit; false when it has errors.
bool load_saturation(Ctx& ctx, const YAML::Node& n, const std::string& path, Bucket& b,
                     bool tokens);

// plans (load_plans.cc). `names` gets every plan whose name is an id, also those with bad
// contents, so tenants naming them do not fail as well; `refs` gets the class each one uses.
void load_plans(Ctx& ctx, const YAML::Node& n, std::map<std::string, Plan>& plans,
                std::set<std::string>& names, std::vector<ClassRef>& refs, LocalModeUse& local);

// tenants (load_tenants.cc); each names one of `plan_names`.
void load_tenants(Ctx& ctx, const YAML::Node& n, const std::set<std::string>& plan_names,
                  std::map<std::string, Tenant>& tenants);

// global_gates (load_global_gates.cc).
void load_global_gates(Ctx& ctx, const YAML::Node& n, GlobalGates& g);

// dataplane (load_dataplane.cc); checks `refs` (and the classify rules' own) against its classes.
void load_dataplane(Ctx& ctx, const YAML::Node& n, Dataplane& dp, std::vector<ClassRef>& refs);

}  // namespace dripgate::config::loader
