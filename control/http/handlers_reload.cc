// POST /v1/admin/reload: runs on this worker's loop, since a reload takes milliseconds (a few
// KiB of YAML) and the other workers keep serving meanwhile.
#include <nlohmann/json.hpp>

#include "control/http/handlers.h"
#include "control/registry/reload.h"

namespace dripgate::control::http {

void handle_reload(Request req) {
  Reloader* reloader = req.worker().reloader;
  if (!reloader) return req.answer(api::render_error(404, "no reload here"));
  ReloadOutcome r = reloader->reload();
  nlohmann::json j = {{"status", r.ok ? "reloaded" : "refused"}, {"config_hash", r.hash}};
  if (!r.ok) j["errors"] = r.errors;
  req.answer(api::Response{r.ok ? 200 : 400, {}, j.dump() + "\n"});
}

}  // namespace dripgate::control::http
