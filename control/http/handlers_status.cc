// /healthz, /readyz and /metrics: open to probes and scrapers, answered from this worker's
// state at once.
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "control/http/handlers.h"
#include "control/registry/status_scrape.h"

namespace dripgate::control::http {

using json = nlohmann::json;

namespace {

// While Redis does not answer: "down" (503, the box cannot admit) under redis.on_failure
// closed, else "degraded" (200, so a load balancer keeps the box) with the mode and the
// outage's age. /healthz's body, and the status page's "health".
json health(Worker& w) {
  Gateway& gateway = *w.gateway;
  const auto& snap = gateway.snapshot();
  const int64_t since = gateway.outage_since_ms();
  const bool outage = !gateway.redis_up() || since != 0;
  const config::OnFailure mode = snap->cfg.redis.on_failure;
  // Down only when no tenant can be admitted: a plan failing open or local keeps the box.
  bool all_closed = mode == config::OnFailure::kClosed;
  for (const auto& [name, plan] : snap->cfg.plans)
    all_closed = all_closed && plan.on_failure.value_or(mode) == config::OnFailure::kClosed;
  std::string status = w.draining ? "stopping" : !outage ? "ok" : all_closed ? "down" : "degraded";
  json j = {{"status", status},
            {"redis", gateway.redis_state()},
            {"dataplane", gateway.dataplane_connected() ? "connected" : "not connected"},
            {"config_hash", snap->hash},
            {"worker", w.index}};
  if (outage) {
    j["mode"] = config::on_failure_name(mode);
    int64_t now =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
            .count();
    j["outage_s"] = since ? static_cast<double>(now - since) / 1000.0 : 0.0;
  }
  if (size_t n = gateway.journal_pending()) j["journal_pending"] = n;
  if (const auto& b = gateway.brake())
    j["brake"] = {{"factor", b->factor}, {"exempt_plans", b->exempt_plans}};
  return j;
}

}  // namespace

void handle_healthz(Request req) {
  json j = health(req.worker());
  const std::string& status = j["status"].get_ref<const std::string&>();
  req.answer(
      api::Response{status == "ok" || status == "degraded" ? 200 : 503, {}, j.dump() + "\n"});
}

// For orchestrators: ready to decide admissions (Redis answers; a configuration is always in
// force once serving: the daemon does not start without one); 503 with the reasons otherwise.
void handle_readyz(Request req) {
  Worker& w = req.worker();
  Gateway& gateway = *w.gateway;
  json why = json::array();
  if (w.draining) why.push_back("stopping");
  if (!gateway.redis_up())
    why.push_back(std::string("redis: ") + std::string(gateway.redis_state()));
  if (w.store->registry_expected() && !gateway.registry())
    why.push_back("tenant registry: not read yet");
  json j = {{"ready", why.empty()}, {"config_hash", gateway.snapshot()->hash}};
  if (!why.empty()) j["why"] = why;
  req.answer(api::Response{why.empty() ? 200 : 503, {}, j.dump() + "\n"});
}

void handle_metrics(Request req) {
  req.answer(api::Response{200, {}, req.worker().metrics->render()},
             "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace dripgate::control::http

namespace dripgate::control::http {

namespace {

// Admissions of every tenant and front by result, the refused and shadow-refused by gate.
json admissions(const Metrics& m) {
  json j = {{"allowed", 0},
            {"refused", json::object()},
            {"shadow_refused", json::object()},
            {"other", json::object()}};
  for (const auto& [labels, n] : m.admissions().values()) {
    if (labels.size() < 3) continue;
    const std::string& gate = labels[1];
    const std::string& result = labels[2];
    if (result == "allowed")
      j["allowed"] = j["allowed"].get<uint64_t>() + n;
    else if (result == "refused" || result == "shadow_refused")
      j[result][gate] = j[result].value(gate, uint64_t{0}) + n;
    else
      j["other"][result] = j["other"].value(result, uint64_t{0}) + n;
  }
  return j;
}

json closest(const Metrics& m) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count();
  json rows = json::array();
  for (const LimitTracker::Row& r : m.limits().lowest(now))
    rows.push_back({{"quota", r.quota},
                    {"tenant", r.tenant},
                    {"remaining", r.remaining},
                    {"limit", r.limit},
                    {"ratio", r.ratio()},
                    {"age_s", static_cast<double>(now - r.at_ms) / 1000.0}});
  return rows;
}

// NaN (not known) as null.
json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

json source(const StatusSource& s) {
  json j = {{"url", s.url}, {"at_ms", s.at_ms}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

json dataplane(const StatusReading& r) {
  json j = source(r.dataplane);
  json classes = json::array();
  for (const ClassStatus& c : r.classes) {
    json drops = json::object();
    for (const auto& [cause, d] : c.drops)
      drops[cause] = {{"total", d.total}, {"per_s", number(d.per_s)}};
    classes.push_back({{"class", c.cls},
                       {"sent_bytes", c.sent_bytes},
                       {"sent_packets", c.sent_packets},
                       {"sent_bytes_per_s", number(c.sent_bytes_per_s)},
                       {"sent_packets_per_s", number(c.sent_packets_per_s)},
                       {"configured_bytes_per_s", number(c.configured_bytes_per_s)},
                       {"queue_depth", number(c.queue_depth)},
                       {"queue_limit", number(c.queue_limit)},
                       {"drops", drops}});
  }
  j["classes"] = classes;
  return j;
}

json iat(const StatusReading& r) {
  json j = source(r.iat);
  json ifaces = json::array();
  for (const IatStatus& f : r.ifaces) {
    json le = json::array();
    for (double v : f.le) le.push_back(std::isinf(v) ? json("+Inf") : json(v));
    ifaces.push_back({{"iface", f.iface},
                      {"le", le},
                      {"counts", f.counts},
                      {"recent", f.recent},
                      {"burst_factor", f.burst_factor}});
  }
  j["ifaces"] = ifaces;
  return j;
}

}  // namespace

// The status page's data (ui, handlers_ui.cc): this daemon's health as /healthz says it (from
// the answering worker), its admissions, the circuit breakers and the brake from the metrics,
// the tenants closest to their limits, and when control.status names them the dataplane's and
// the receiver's latest readings. Counters, not rates: the page divides what moved between
// two answers by the time between them (now_ms).
void handle_admin_status(Request req) {
  Worker& w = req.worker();
  const Metrics& m = *w.metrics;
  const config::Config& cfg = w.gateway->snapshot()->cfg;
  json j = {{"now_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()},
            {"health", health(w)},
            {"redis",
             {{"up", m.redis_up()},
              {"breaker_open", m.breaker_open()},
              {"workers", cfg.control.threads}}},
            {"brake_factor", m.brake_factor()},
            {"admissions", admissions(m)},
            {"closest", closest(m)}};
  const std::shared_ptr<const StatusReading> r = w.status ? w.status->watched() : nullptr;
  if (!cfg.control.status.dataplane_metrics_url.empty())
    j["dataplane"] = r ? dataplane(*r)
                       : json{{"url", cfg.control.status.dataplane_metrics_url},
                              {"at_ms", 0},
                              {"classes", json::array()}};
  if (!cfg.control.status.iat_metrics_url.empty())
    j["iat"] = r ? iat(*r)
                 : json{{"url", cfg.control.status.iat_metrics_url},
                        {"at_ms", 0},
                        {"ifaces", json::array()}};
  api::Response resp{200, {}, j.dump() + "\n"};
  resp.headers.emplace_back("Cache-Control", "no-store");
  req.answer(resp);
}

}  // namespace dripgate::control::http
