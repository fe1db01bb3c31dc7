// POST /v1/admin/reload: the reload runs on the reload thread (reload.h), which runs SIGHUP's
// too, one at a time. A reload reads a file, which may take long (a file on a hung mount): on
// this worker's loop it would hold every connection the worker serves. The loop serves them
// meanwhile, and the request is answered when the outcome comes back through its inbox.
#include <nlohmann/json.hpp>

#include "control/http/handlers.h"
#include "control/registry/reload.h"

namespace dripgate::control::http {

void handle_reload(Request req) {
  Worker& w = req.worker();
  if (!w.reloads) return req.answer(api::render_error(404, "no reload here"));
  req.defer();
  w.reloads->request([req, inbox = w.inbox](const ReloadOutcome& r) {
    nlohmann::json j = {{"status", r.ok ? "reloaded" : "refused"}, {"config_hash", r.hash}};
    if (!r.ok) j["errors"] = r.errors;
    inbox->post([req, answer = api::Response{r.ok ? 200 : 400, {}, j.dump() + "\n"}] {
      req.finish(answer);
    });
  });
}

}  // namespace dripgate::control::http
