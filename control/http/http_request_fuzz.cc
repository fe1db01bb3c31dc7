// libFuzzer target: arbitrary bytes as what a client sends, fed to the request parser in pieces
// cut where the input's first byte says. It must never crash; each request it yields is whole
// (its path within its target, its body within the limit), and an error names its status.
// Run: tools/fuzz.sh http_request 30 control/http_request_fuzz.cc control/http_request.cc --
// -lhttp_parser (the meson test `http_request_fuzz` in suite 'fuzz' does it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "control/http/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dripgate::control::HttpRequest;
  using dripgate::control::HttpRequestParser;
  if (size == 0) return 0;
  const size_t piece = data[0] % 16 + 1;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const HttpRequestParser::Limits limits{.max_head = 512, .max_body = 256};
  HttpRequestParser p(limits);
  std::string held;
  size_t at = 0;
  while (at < bytes.size() || !held.empty()) {
    if (held.empty()) {
      held = bytes.substr(at, piece);
      at += held.size();
    }
    size_t used = 0;
    HttpRequestParser::Result r = p.feed(held.data(), held.size(), used);
    if (used > held.size()) std::abort();
    held.erase(0, used);
    if (r == HttpRequestParser::Result::kError) {
      const int st = p.error_status();
      if (st != 400 && st != 413 && st != 431 && st != 501 && st != 505) std::abort();
      break;
    }
    if (r == HttpRequestParser::Result::kRequest) {
      const HttpRequest& q = p.request();
      const char* t = q.target.data();
      if (q.path.size() &&
          (q.path.data() < t || q.path.data() + q.path.size() > t + q.target.size()))
        std::abort();
      if (q.body.size() > limits.max_body) std::abort();
      std::vector<std::pair<std::string, std::string>> params;
      dripgate::control::parse_query(q.query, params);
      if (!q.keep_alive) break;
      p.next();
    }
  }
  return 0;
}
