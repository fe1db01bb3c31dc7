#include "control/gateway.h"

#include <utility>

#include "control/redis_client.h"

namespace dripgate::control {

namespace {

const char* result_label(Outcome o) {
  switch (o) {
    case Outcome::kAllowed:
      return "allowed";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kBadRequest:
      return "bad_request";
    case Outcome::kConflict:
      return "conflict";
    case Outcome::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

}  // namespace

Gateway::Gateway(const ConfigStore& store, event_base* base, FlowRegistry& flows, Metrics& metrics,
                 int dataplane_timeout_ms, const DecisionLogFile* decisions, std::string front)
    : flows_(flows),
      metrics_(metrics),
      front_(std::move(front)),
      engine_(store, base, &metrics),
      dp_(base, store.current()->cfg.control.dataplane_socket, &metrics, dataplane_timeout_ms) {
  if (decisions)
    decisions_ = std::make_unique<DecisionLog>(base, *decisions,
                                               store.current()->cfg.control.decision_log.sample);
}

Gateway::~Gateway() = default;

void Gateway::admit(AdmitRequest req, std::function<void(AdmitDecision)> done) {
  // Read once: the label and the decision come from the same configuration.
  std::shared_ptr<const Snapshot> snap = engine_.snapshot();
  std::string tenant(snap->tenant_label(req.tenant, engine_.registry().get()));
  std::optional<Flow> flow = req.flow;
  std::optional<DecisionWho> who;
  if (decisions_ && decisions_->sampled())
    who = DecisionWho{req.tenant, req.user, req.model, req.tool};
  engine_.admit(
      std::move(req),
      [this, tenant = std::move(tenant), flow = std::move(flow), who = std::move(who),
       done = std::move(done)](AdmitResult r) mutable {
        metrics_.admission(tenant, r.outcome == Outcome::kRefused ? r.gate : "",
                           result_label(r.outcome), front_);
        if (who) decisions_->record(*who, r, result_label(r.outcome));
        if (r.outcome != Outcome::kAllowed || !flow) return done(AdmitDecision{std::move(r), {}});
        flows_.put(r.request_id, *flow);
        // The flow stays in its class as long as the lease would, unless released earlier.
        int ttl_s = r.lease_s > 0 ? static_cast<int>(r.lease_s) : kDefaultTagTtlS;
        std::string cls = r.cls;
        dp_.tag(*flow, cls, ttl_s,
                [r = std::move(r), done = std::move(done)](const std::string& tag) mutable {
                  done(AdmitDecision{std::move(r), tag});
                });
      },
      std::move(snap));
}

void Gateway::settle(SettleRequest req, std::function<void(SettleResult)> done) {
  engine_.settle(std::move(req.tenant), std::move(req.request_id), req.tokens, std::move(done));
}

void Gateway::release(ReleaseRequest req, std::function<void(ReleaseDecision)> done) {
  std::string rid = req.request_id;
  engine_.release(std::move(req.tenant), std::move(req.request_id),
                  [this, rid = std::move(rid), done = std::move(done)](ReleaseResult r) mutable {
                    std::optional<Flow> flow;
                    if (r.outcome == Outcome::kAllowed) flow = flows_.take(rid);
                    if (!flow) return done(ReleaseDecision{std::move(r), {}});
                    dp_.untag(*flow, [r = std::move(r),
                                      done = std::move(done)](const std::string& tag) mutable {
                      done(ReleaseDecision{std::move(r), tag});
                    });
                  });
}

}  // namespace dripgate::control
