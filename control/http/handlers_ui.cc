// The status page, GET /ui (behind the admin token, router.cc): one HTML file with its script
// and styles inline, compiled into the binary (status_page.html, embedded at build time by
// tools/embed.py), which reads GET /v1/admin/status once a second (handlers_status.cc).
#include <string_view>

#include "control/http/handlers.h"

namespace dripgate::control::http {

namespace embedded {
extern const char status_page[];
extern const unsigned long status_page_size;
}  // namespace embedded

void handle_ui(Request req) {
  api::Response r{200, {}, std::string(embedded::status_page, embedded::status_page_size)};
  r.headers.emplace_back("Cache-Control", "no-store");
  // Nothing but the page itself: its inline script and styles, its fetches to this origin.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src "
                         "'unsafe-inline'; img-src data:; connect-src 'self'; "
                         "frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  req.answer(r, "text/html; charset=utf-8");
}

}  // namespace dripgate::control::http
