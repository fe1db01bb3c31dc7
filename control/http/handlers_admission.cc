// POST /v1/admit, /v1/settle, /v1/charge, /v1/release: the body parsed (api.h), the gateway
// asked, its decision rendered from the callback. These are the hot path: the callbacks capture
// the request alone, and an admission's answer is rendered into the worker's one Response.
#include <arpa/inet.h>
#include <sys/socket.h>

#include <ctime>
#include <utility>

#include "common/id.h"
#include "control/admission/keys.h"
#include "control/admission/tenant_keys.h"
#include "control/http/handlers.h"

namespace dripgate::control::http {
namespace {

// The caller's address as inet_ntop writes it; empty when the socket cannot say.
std::string peer_address(Request req) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(req.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = ss.ss_family == AF_INET6
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                      : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  if ((ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ||
      !inet_ntop(ss.ss_family, a, buf, sizeof buf))
    return {};
  return buf;
}

// Under control.auth: tenant_keys, whether the request's key may act as its tenant (a settle's,
// charge's or release's, when it names none, is its engine-made request id's), and whether the
// flow a tenant's key would have tagged comes from the caller or the tenant's flows_from.
// Answers 401 or 403 when not, before the gateway is asked: nothing is charged or tagged, no
// Redis call is made.
bool tenant_allowed(Request req, const std::string& tenant, const std::string& request_id = {},
                    const Flow* flow = nullptr) {
  Gateway& g = *req.worker().gateway;
  const std::shared_ptr<const Snapshot>& snap = g.snapshot();
  if (!snap->cfg.control.tenant_keys) return true;
  const HttpRequest& q = req.http();
  const std::optional<std::string_view> key =
      q.has_authorization ? bearer_of(q.authorization) : std::nullopt;
  const std::string t =
      tenant.empty() ? std::string(keys::tenant_of_request_id(request_id)) : tenant;
  // No tenant to act as: the gateway's 400 says so, and asks nothing of Redis.
  if (key && !common::valid_id(t)) return true;
  const KeyCheck c = check_tenant_key(*snap, g.registry().get(), t, key, std::time(nullptr));
  Metrics& metrics = *req.worker().metrics;
  if (c == KeyCheck::kOk && flow) {
    std::string why = check_flow_source(*snap, t, flow->src, peer_address(req));
    if (why.empty()) return true;
    metrics.auth_refusal("http", "api", "flow_source");
    req.answer(api::render_error(403, why));
    return false;
  }
  if (key_allowed(c)) return true;
  metrics.auth_refusal("http", "api", key_check_reason(c));
  api::Response r = api::render_error(key_check_status(c), key_check_message(c, t));
  if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dripgate\"");
  req.answer(r);
  return false;
}

}  // namespace

void handle_admit(Request req) {
  AdmitRequest ar;
  Worker& w = req.worker();
  if (!read_body(req, api::parse_admit, ar)) return w.metrics->admission("", "", "bad_request");
  if (!tenant_allowed(req, ar.tenant, {}, ar.flow ? &*ar.flow : nullptr)) return;
  req.defer();
  const uint64_t waiter = w.gateway->admit(std::move(ar), [req](const AdmitDecision& d) {
    Worker& worker = req.worker();
    api::Response& answer = worker.admit_answer;
    const bool openai = worker.gateway->snapshot()->cfg.control.openai_headers;
    api::render_admit(d.result, d.flow_tag, 0, openai, answer);
    req.finish(answer);
  });
  // A request that may wait leaves the queue when its connection goes (Worker::close_conn).
  req.waiting(waiter);
}

void handle_settle(Request req) {
  SettleRequest sr;
  if (!read_body(req, api::parse_settle, sr) || !tenant_allowed(req, sr.tenant, sr.request_id))
    return;
  req.defer();
  req.worker().gateway->settle(std::move(sr),
                               [req](const SettleResult& r) { req.finish(api::render_settle(r)); });
}

void handle_charge(Request req) {
  ChargeRequest cr;
  if (!read_body(req, api::parse_charge, cr))
    return req.worker().metrics->charge("", "bad_request");
  if (!tenant_allowed(req, cr.tenant, cr.request_id)) return;
  req.defer();
  req.worker().gateway->charge(std::move(cr), [req](const ChargeDecision& d) {
    req.finish(api::render_charge(d.result, d.flow_tag));
  });
}

void handle_release(Request req) {
  ReleaseRequest rr;
  if (!read_body(req, api::parse_release, rr) || !tenant_allowed(req, rr.tenant, rr.request_id))
    return;
  req.defer();
  req.worker().gateway->release(std::move(rr), [req](const ReleaseDecision& d) {
    req.finish(api::render_release(d.result, d.flow_tag));
  });
}

}  // namespace dripgate::control::http
