#include "control/http/router.h"

#include <string>
#include <string_view>

#include "control/http/handlers.h"

namespace dripgate::control::http {
namespace {

// The route table. The API (POST) needs the bearer token when one is configured; the admin API
// needs control.admin_token and is off without one (404, as if it did not exist: a box that
// never configured it shows no admin surface); /healthz, /readyz and /metrics stay open for
// probes and scrapers.
enum class Auth { kNone, kApi, kAdmin };
struct Route {
  std::string_view path;
  http_method method;
  Auth auth;
  void (*handle)(Request);
};
constexpr Route kRoutes[] = {
    {"/v1/admit", HTTP_POST, Auth::kApi, &handle_admit},
    {"/v1/settle", HTTP_POST, Auth::kApi, &handle_settle},
    {"/v1/charge", HTTP_POST, Auth::kApi, &handle_charge},
    {"/v1/release", HTTP_POST, Auth::kApi, &handle_release},
    {"/v1/admin/reload", HTTP_POST, Auth::kAdmin, &handle_reload},
    {"/v1/admin/tenants", HTTP_GET, Auth::kAdmin, &handle_tenant_list},
    {"/v1/admin/brake", HTTP_POST, Auth::kAdmin, &handle_brake_post},
    {"/v1/admin/brake", HTTP_GET, Auth::kAdmin, &handle_brake_get},
    {"/v1/admin/brake", HTTP_DELETE, Auth::kAdmin, &handle_brake_delete},
    // A path ending in '/' is a prefix: the rest is the resource (a tenant id).
    {kTenantsPath, HTTP_GET, Auth::kAdmin, &handle_tenant_get},
    {kTenantsPath, HTTP_PUT, Auth::kAdmin, &handle_tenant_put},
    {kTenantsPath, HTTP_DELETE, Auth::kAdmin, &handle_tenant_delete},
    {"/healthz", HTTP_GET, Auth::kNone, &handle_healthz},
    {"/readyz", HTTP_GET, Auth::kNone, &handle_readyz},
    {"/metrics", HTTP_GET, Auth::kNone, &handle_metrics},
};

// Whether the request may use the route; answers it when not. The tokens come from the
// configuration in force, so a reload rotates them.
bool authorized(Request req, Auth auth) {
  if (auth == Auth::kNone) return true;
  const config::Control& c = req.worker().gateway->snapshot()->cfg.control;
  const std::string& token = auth == Auth::kAdmin ? c.admin_token : c.auth_token;
  if (token.empty()) {
    if (auth == Auth::kApi) return true;
    req.answer(api::render_error(404, "the admin API is off: set control.admin_token"));
    return false;
  }
  const HttpRequest& q = req.http();
  const char* got = q.has_authorization ? q.authorization.c_str() : nullptr;
  if (api::token_matches(token, got)) return true;
  api::Response r = api::render_error(
      401, got ? "invalid bearer token" : "missing bearer token (Authorization: Bearer …)");
  r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dripgate\"");
  req.answer(r);
  return false;
}

bool matches(const Route& r, std::string_view path) {
  return r.path == path ||
         (r.path.back() == '/' && path.size() > r.path.size() && path.starts_with(r.path));
}

}  // namespace

// A path the table has with another method is a 405 with Allow.
void dispatch(Request req) {
  const HttpRequest& q = req.http();
  const std::string_view path = q.path;
  for (const Route& r : kRoutes) {
    if (!q.known_method || q.method != r.method || !matches(r, path)) continue;
    if (authorized(req, r.auth)) r.handle(req);
    return;
  }
  std::string allow;  // the methods of the path
  for (const Route& r : kRoutes)
    if (matches(r, path))
      allow += (allow.empty() ? "" : ", ") + std::string(http_method_str(r.method));
  if (allow.empty())
    return req.answer(api::render_error(404, "no such path: " + std::string(path)));
  api::Response r = api::render_error(405, "use " + allow);
  r.headers.emplace_back("Allow", allow);
  req.answer(r);
}

}  // namespace dripgate::control::http
