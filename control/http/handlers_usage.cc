// GET /v1/admin/usage/<tenant>: each quota of the tenant's plan, used, limit, remaining, its
// period's bounds and a projected exhaustion (usage.h), read from Redis in one round trip so
// that it counts every daemon's admissions.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "control/admission/usage.h"
#include "control/http/handlers.h"
#include "control/redis/redis_calls.h"
#include "control/redis/wall_clock.h"

namespace dripgate::control::http {

void handle_usage(Request req) {
  std::string id = tenant_of(req, kUsagePath);
  if (id.empty()) return;
  Gateway& g = *req.worker().gateway;
  std::shared_ptr<const Snapshot> snap = g.snapshot();
  // The tenant as an admission finds it (registry, file, "*"), named after itself, so its keys
  // are its own.
  std::shared_ptr<const TenantInfo> unlisted;
  std::string why;
  const TenantInfo* t = snap->tables.find(id, unlisted, g.registry().get(), &why);
  if (!t)
    return req.answer(api::render_error(
        404, !why.empty() ? why
                          : "tenant: '" + id +
                                "' is neither in the registry nor in the configuration (and no "
                                "plan takes every tenant: \"*\")"));
  // On Redis's clock, as the admissions' periods are.
  const int64_t now = (wall_ms() + g.redis().clock_offset_ms()) / 1000;
  std::string plan = t->plan->name;
  req.defer();
  // The specs point into the snapshot and the tenant's copy: both stay alive until the answer.
  usage::read(g.redis(), usage::plan_quotas(*t), usage::zone_of(*t), now,
              [req, snap, unlisted, id = std::move(id), plan = std::move(plan), now](
                  std::vector<usage::QuotaUsage> quotas, std::string error) {
                if (!error.empty()) return req.finish(api::render_error(503, error));
                req.finish(api::render_usage(id, plan, now, quotas));
              });
}

}  // namespace dripgate::control::http
