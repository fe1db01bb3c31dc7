// The service-wide brake (brake_sync.h), /v1/admin/brake: every answer reflects Redis, not this
// daemon's copy (at most a poll behind).
#include <optional>
#include <string>

#include "control/http/handlers.h"
#include "control/registry/brake_sync.h"

namespace dripgate::control::http {

void handle_brake_post(Request req) {
  Brake b;
  if (!read_body(req, api::parse_brake, b)) return;
  Gateway& gateway = *req.worker().gateway;
  const config::Config& cfg = gateway.snapshot()->cfg;
  for (const std::string& plan : b.exempt_plans)
    if (!cfg.plans.count(plan))
      return req.answer(api::render_error(400, "exempt_plans: unknown plan '" + plan + "'"));
  req.defer();
  brake::set(gateway.redis(), b, [req, b](const std::string& error) {
    if (!error.empty()) return req.finish(api::render_error(503, error));
    req.finish(api::render_brake(200, &b));
  });
}

void handle_brake_get(Request req) {
  req.defer();
  brake::read(req.worker().gateway->redis(),
              [req](const std::optional<Brake>& b, const std::string& error) {
                if (!error.empty()) return req.finish(api::render_error(503, error));
                req.finish(api::render_brake(200, b ? &*b : nullptr));
              });
}

void handle_brake_delete(Request req) {
  req.defer();
  brake::lift(req.worker().gateway->redis(), [req](const std::string& error) {
    if (!error.empty()) return req.finish(api::render_error(503, error));
    req.finish(api::render_brake(200, nullptr));
  });
}

}  // namespace dripgate::control::http
