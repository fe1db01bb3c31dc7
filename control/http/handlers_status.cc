// /healthz, /readyz and /metrics: open to probes and scrapers, answered from this worker's
// state at once.
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "control/http/handlers.h"

namespace dripgate::control::http {

using json = nlohmann::json;

// While Redis does not answer: "down" (503, the box cannot admit) under redis.on_failure
// closed, else "degraded" (200, so a load balancer keeps the box) with the mode and the
// outage's age.
void handle_healthz(Request req) {
  Worker& w = req.worker();
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
