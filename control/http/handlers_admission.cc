// POST /v1/admit, /v1/settle, /v1/charge, /v1/release: the body parsed (api.h), the gateway
// asked, its decision rendered from the callback. These are the hot path: the callbacks capture
// the request alone, and an admission's answer is rendered into the worker's one Response.
#include <utility>

#include "control/http/handlers.h"

namespace dripgate::control::http {

void handle_admit(Request req) {
  AdmitRequest ar;
  Worker& w = req.worker();
  if (!read_body(req, api::parse_admit, ar)) return w.metrics->admission("", "", "bad_request");
  req.defer();
  const uint64_t waiter = w.gateway->admit(std::move(ar), [req](const AdmitDecision& d) {
    api::Response& answer = req.worker().admit_answer;
    api::render_admit(d.result, d.flow_tag, 0, answer);
    req.finish(answer);
  });
  // A request that may wait leaves the queue when its connection goes (Worker::close_conn).
  req.waiting(waiter);
}

void handle_settle(Request req) {
  SettleRequest sr;
  if (!read_body(req, api::parse_settle, sr)) return;
  req.defer();
  req.worker().gateway->settle(std::move(sr),
                               [req](const SettleResult& r) { req.finish(api::render_settle(r)); });
}

void handle_charge(Request req) {
  ChargeRequest cr;
  if (!read_body(req, api::parse_charge, cr))
    return req.worker().metrics->charge("", "bad_request");
  req.defer();
  req.worker().gateway->charge(std::move(cr), [req](const ChargeDecision& d) {
    req.finish(api::render_charge(d.result, d.flow_tag));
  });
}

void handle_release(Request req) {
  ReleaseRequest rr;
  if (!read_body(req, api::parse_release, rr)) return;
  req.defer();
  req.worker().gateway->release(std::move(rr), [req](const ReleaseDecision& d) {
    req.finish(api::render_release(d.result, d.flow_tag));
  });
}

}  // namespace dripgate::control::http
