// The route table of the HTTP API (router.cc): which handler (handlers.h) answers a method on a
// path, and whether the request must carry a token.
#pragma once

#include "control/http/worker.h"

namespace dripgate::control::http {

// Answers the request of a connection whose request just arrived: its route's handler, or 401,
// 404 or 405 (with Allow). Every method reaches the table, one http-parser does not know too.
void dispatch(Request req);

}  // namespace dripgate::control::http
