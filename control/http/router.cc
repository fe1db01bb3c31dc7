#include "control/http/router.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>

#include <optional>
#include <string>
#include <string_view>

#include "control/http/handlers.h"

namespace dripgate::control::http {
namespace {

// The route table. The API (POST) needs the bearer token when one is configured; the admin API
// needs control.admin_token and is off without one (404, as if it did not exist: a box that
// never configured it shows no admin surface); /healthz and /metrics need control.metrics_token
// when one is set; /readyz stays open for probes. Under control.auth: tenant_keys the API's
// handlers check the key against the body's tenant (tenant_keys.h). The status page and its
// JSON (kAdminPage) take the admin token as the password of HTTP Basic too, since a browser
// cannot add a bearer token to a navigation: it asks for it on a 401 with a Basic challenge and
// sends it again on the page's same-origin requests. Only these two read-only GETs: a browser
// also sends cached Basic credentials with a cross-site form's POST, which must not reach the
// admin API's changes.
enum class Auth { kNone, kApi, kAdmin, kAdminPage, kMetrics };
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
    {kKeysPath, HTTP_POST, Auth::kAdmin, &handle_tenant_keys},
    {kUsagePath, HTTP_GET, Auth::kAdmin, &handle_usage},
    {"/ui", HTTP_GET, Auth::kAdminPage, &handle_ui},
    {"/v1/admin/status", HTTP_GET, Auth::kAdminPage, &handle_admin_status},
    {"/healthz", HTTP_GET, Auth::kMetrics, &handle_healthz},
    {"/readyz", HTTP_GET, Auth::kNone, &handle_readyz},
    {"/metrics", HTTP_GET, Auth::kMetrics, &handle_metrics},
};

// The password of an `Authorization: Basic` value (RFC 7617: base64 of "user:password"; the
// user name is not looked at); nullopt when the value is not one.
std::optional<std::string> basic_password(const char* header) {
  static constexpr char kPrefix[] = "Basic ";
  if (!header || strncasecmp(header, kPrefix, sizeof kPrefix - 1) != 0) return std::nullopt;
  std::string_view b64(header + sizeof kPrefix - 1);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  while (!b64.empty() && b64.back() == ' ') b64.remove_suffix(1);
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 8192) return std::nullopt;
  std::string plain(b64.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(plain.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  const size_t pad = b64.ends_with("==") ? 2 : b64.ends_with('=') ? 1 : 0;
  std::optional<std::string> password;
  if (n >= 0 && static_cast<size_t>(n) >= pad) {
    plain.resize(static_cast<size_t>(n) - pad);
    if (size_t colon = plain.find(':'); colon != std::string::npos)
      password = plain.substr(colon + 1);
  }
  OPENSSL_cleanse(plain.data(), plain.size());
  return password;
}

bool basic_matches(const std::string& token, const char* header) {
  std::optional<std::string> password = basic_password(header);
  if (!password) return false;
  const bool same = api::secret_equals(token, *password);
  OPENSSL_cleanse(password->data(), password->size());
  return same;
}

// Whether the request may use the route; answers it when not. The tokens come from the
// configuration in force, so a reload rotates them.
bool authorized(Request req, Auth auth) {
  if (auth == Auth::kNone) return true;
  const config::Control& c = req.worker().gateway->snapshot()->cfg.control;
  if (auth == Auth::kApi && c.tenant_keys) return true;
  const std::string& token = auth == Auth::kApi       ? c.auth_token
                             : auth == Auth::kMetrics ? c.metrics_token
                                                      : c.admin_token;
  if (token.empty()) {
    if (auth == Auth::kApi || auth == Auth::kMetrics) return true;
    req.answer(api::render_error(404, "the admin API is off: set control.admin_token"));
    return false;
  }
  const HttpRequest& q = req.http();
  const char* got = q.has_authorization ? q.authorization.c_str() : nullptr;
  if (api::token_matches(token, got)) return true;
  if (auth == Auth::kAdminPage && basic_matches(token, got)) return true;
  req.worker().metrics->auth_refusal("http",
                                     auth == Auth::kApi       ? "api"
                                     : auth == Auth::kMetrics ? "metrics"
                                                              : "admin",
                                     got ? "unknown_key" : "missing");
  if (auth == Auth::kAdminPage) {
    api::Response r = api::render_error(
        401,
        "the admin token is needed: as the password of HTTP Basic (any user name), or as a "
        "bearer token");
    r.headers.emplace_back("WWW-Authenticate", "Basic realm=\"dripgate\", charset=\"UTF-8\"");
    req.answer(r);
    return false;
  }
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
