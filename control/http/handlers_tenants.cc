// The tenant registry (tenant_registry.h), /v1/admin/tenants[/<id>]. PUT, DELETE and GET of one
// tenant go to Redis, so that an answer reflects every write made before it, on any daemon; the
// list pages through this daemon's copy (at most a poll behind).
#include <algorithm>
#include <charconv>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/id.h"
#include "control/http/handlers.h"
#include "control/registry/tenant_registry.h"

namespace dripgate::control::http {
namespace {

// The list: at most this many tenants a page (100 when the client says none).
constexpr size_t kMaxPage = 1000;
constexpr size_t kDefaultPage = 100;

// The list's cursor and limit from the query's parameters; the error's message when one is
// wrong.
std::string page_of(const std::vector<std::pair<std::string, std::string>>& query,
                    std::string& cursor, size_t& limit) {
  for (const auto& [key, value] : query) {
    if (key == "cursor") {
      if (!value.empty() && !common::valid_id(value))
        return "cursor: must be the last tenant of the previous page (or empty)";
      cursor = value;
    } else if (key == "limit") {
      size_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > kMaxPage)
        return "limit: must be an integer 1.." + std::to_string(kMaxPage);
      limit = n;
    } else {
      return key + ": unknown parameter (cursor, limit)";
    }
  }
  return {};
}

}  // namespace

std::string tenant_of(Request req, std::string_view prefix) {
  const std::string_view path = req.path();
  std::string id(path.substr(std::min(path.size(), prefix.size())));
  if (common::valid_id(id)) return id;
  req.answer(api::render_error(400, "tenant: must match [A-Za-z0-9._-]{1,64} (in the path)"));
  return {};
}

// GET /v1/admin/tenants?cursor=<last id of the previous page>&limit=<1..1000>: the registry's
// tenants in id order.
void handle_tenant_list(Request req) {
  Worker& w = req.worker();
  const std::shared_ptr<const TenantDirectory>& dir = w.gateway->registry();
  if (!dir) return req.answer(api::render_error(503, "the tenant registry is not read yet"));
  if (!parse_query(req.http().query, w.query))
    return req.answer(api::render_error(400, "the query string is malformed"));
  std::string cursor;
  size_t limit = kDefaultPage;
  if (std::string error = page_of(w.query, cursor, limit); !error.empty())
    return req.answer(api::render_error(400, error));
  // One more than asked says whether a next page exists.
  std::vector<TenantDirectory::Entry> page = dir->page(cursor, limit + 1);
  const bool more = page.size() > limit;
  if (more) page.pop_back();
  req.answer(api::render_tenant_page(page, more, dir->version()));
}

void handle_tenant_put(Request req) {
  std::string id = tenant_of(req);
  if (id.empty()) return;
  std::string plan;
  if (!read_body(req, api::parse_tenant_plan, plan)) return;
  Gateway& gateway = *req.worker().gateway;
  const config::Config& cfg = gateway.snapshot()->cfg;
  if (!cfg.plans.count(plan)) {
    std::string known;
    for (const auto& [name, p] : cfg.plans) known += (known.empty() ? "" : ", ") + name;
    return req.answer(api::render_error(
        400, "plan: unknown plan '" + plan + "' (the configuration has: " + known + ")"));
  }
  req.defer();
  registry::write(
      gateway.redis(), id, plan,
      [req, id, plan](const std::string& previous, const std::string& error) {
        if (!error.empty()) return req.finish(api::render_error(503, error));
        req.finish(api::render_tenant(previous.empty() ? 201 : 200, id, plan, "registry"));
      });
}

void handle_tenant_get(Request req) {
  std::string id = tenant_of(req);
  if (id.empty()) return;
  req.defer();
  registry::read(
      req.worker().gateway->redis(), id,
      [req, id](const std::optional<std::string>& plan, const std::string& error) {
        if (!error.empty()) return req.finish(api::render_error(503, error));
        if (plan) return req.finish(api::render_tenant(200, id, *plan, "registry"));
        const config::Config& cfg = req.worker().gateway->snapshot()->cfg;
        if (auto it = cfg.tenants.find(id); it != cfg.tenants.end())
          return req.finish(api::render_tenant(200, id, it->second.plan, "config"));
        req.finish(api::render_error(
            404, "tenant: '" + id + "' is neither in the registry nor in the configuration"));
      });
}

void handle_tenant_delete(Request req) {
  std::string id = tenant_of(req);
  if (id.empty()) return;
  req.defer();
  registry::write(
      req.worker().gateway->redis(), id, "",
      [req, id](const std::string& previous, const std::string& error) {
        if (!error.empty()) return req.finish(api::render_error(503, error));
        if (!previous.empty()) return req.finish(api::Response{204, {}, {}});
        const bool in_file = req.worker().gateway->snapshot()->cfg.tenants.count(id) > 0;
        req.finish(api::render_error(404, "tenant: '" + id + "' is not in the registry" +
                                              (in_file ? " (the configuration file lists it: "
                                                         "edit the file and reload)"
                                                       : "")));
      });
}

}  // namespace dripgate::control::http

namespace dripgate::control::http {

// POST /v1/admin/keys/<id>: adds, rotates or revokes an API key of a registry tenant (its digest
// only). A rotation's overlap ends at this daemon's clock plus overlap_s; the answer lists the
// tenant's keys by their digest's first 8 hex digits.
void handle_tenant_keys(Request req) {
  std::string id = tenant_of(req, kKeysPath);
  if (id.empty()) return;
  api::KeyChangeBody body;
  if (!read_body(req, api::parse_key_change, body)) return;
  const int64_t now = std::time(nullptr);
  registry::KeyChange change{id};
  change.op = body.op == "add"      ? registry::KeyOp::kAdd
              : body.op == "rotate" ? registry::KeyOp::kRotate
                                    : registry::KeyOp::kRevoke;
  change.sha256 = *digest_from_hex(body.key_sha256);  // checked by the parser
  change.expires_at =
      change.op == registry::KeyOp::kRotate ? now + body.overlap_s : body.expires_at;
  change.now_s = now;
  if (change.op == registry::KeyOp::kAdd && change.expires_at != 0 && change.expires_at <= now)
    return req.answer(api::render_error(400, "expires_at: already past"));
  req.defer();
  registry::keys(
      req.worker().gateway->redis(), change,
      [req, id](const registry::KeyResult& r, const std::string& error) {
        if (!error.empty()) return req.finish(api::render_error(503, error));
        if (r.status == 0)
          return req.finish(api::render_error(
              404, "tenant: '" + id + "' is not in the registry (PUT /v1/admin/tenants/" + id +
                       " first; a tenant of the file has its keys_sha256 there)"));
        if (r.status == -1)
          return req.finish(
              api::render_error(404, "key_sha256: tenant '" + id + "' has no such key"));
        if (r.status == -2)
          return req.finish(
              api::render_error(409, "key_sha256: tenant '" + id + "' would hold more than " +
                                         std::to_string(registry::kMaxKeys) + " keys"));
        req.finish(api::render_tenant_keys(id, r.keys));
      });
}

}  // namespace dripgate::control::http
