// The HTTP API's handlers, one a route (router.cc): each parses its request, asks the gateway
// or the registry, and answers (worker.h's Request). Grouped by resource, one file each.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "control/http/worker.h"

namespace dripgate::control::http {

// Reads the request's body into `out` by one of api.h's parsers; answers 400 with its error and
// returns false when the body is not one.
template <class T>
bool read_body(Request req, std::optional<api::FieldError> (*parse)(std::string_view, T&), T& out) {
  if (auto e = parse(req.body(), out)) {
    req.answer(api::render_error(400, e->str()));
    return false;
  }
  return true;
}

// handlers_admission.cc: POST /v1/admit, /v1/settle, /v1/charge, /v1/release; under
// control.auth: tenant_keys each checks the request's key against its tenant first.
void handle_admit(Request req);
void handle_settle(Request req);
void handle_charge(Request req);
void handle_release(Request req);

// handlers_tenants.cc: the tenant registry, /v1/admin/tenants and /v1/admin/tenants/<id>.
inline constexpr std::string_view kTenantsPath = "/v1/admin/tenants/";
// The tenant id of <prefix><id> (a prefix route's path); answers 400 naming `tenant` and returns
// empty when it is no id.
std::string tenant_of(Request req, std::string_view prefix = kTenantsPath);
void handle_tenant_list(Request req);
void handle_tenant_get(Request req);
void handle_tenant_put(Request req);
void handle_tenant_delete(Request req);
// A registry tenant's API keys: POST /v1/admin/keys/<id> (tenant_keys.h).
inline constexpr std::string_view kKeysPath = "/v1/admin/keys/";
void handle_tenant_keys(Request req);

// handlers_usage.cc: a tenant's quotas used, GET /v1/admin/usage/<id>.
inline constexpr std::string_view kUsagePath = "/v1/admin/usage/";
void handle_usage(Request req);

// handlers_brake.cc: the service-wide brake, /v1/admin/brake.
void handle_brake_post(Request req);
void handle_brake_get(Request req);
void handle_brake_delete(Request req);

// handlers_reload.cc: POST /v1/admin/reload.
void handle_reload(Request req);

// handlers_status.cc: /healthz, /readyz, /metrics, and the status page's JSON,
// /v1/admin/status.
void handle_healthz(Request req);
void handle_readyz(Request req);
void handle_metrics(Request req);
void handle_admin_status(Request req);

// handlers_ui.cc: the status page, /ui.
void handle_ui(Request req);

}  // namespace dripgate::control::http
