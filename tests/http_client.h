// A small blocking HTTP/1.1 client for tests that talk to dripgate-control over a real socket:
// one request per connection (Connection: close), the answer read to EOF.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dripgate::testing {

struct HttpResponse {
  int status = 0;                              // 0: no answer
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  // The header's value, or "<absent>" (so that a missing header reads clearly in a failure).
  std::string header(const std::string& name) const;
  // The body as JSON; a discarded value when it is not JSON.
  nlohmann::json body_json() const;
};

// Sends `method path` to 127.0.0.1:port with `body` (as application/json for POST) and the
// `extra` header lines ("Name: value"); waits up to 10 s for the answer.
HttpResponse http(int port, const std::string& method, const std::string& path,
                  const std::string& body = "", const std::vector<std::string>& extra = {});

// Waits up to 2 s for a daemon on port that answers to have its Redis connections up (/readyz
// 200 twice in a row, each worker's pool serving once its connect's whole setup was answered),
// so that a test's first request does not meet scripts still loading. A daemon whose Redis is
// away on purpose costs its test the 2 s.
void await_redis(int port);

}  // namespace dripgate::testing
