// An http:// URL that a daemon fetches from itself (an inference backend's metrics endpoint):
// `http://host[:port][/path[?query]]`. Plain HTTP only: the endpoints scraped sit on the
// cluster's own network, and the client is a small one (control/registry/scrape.h). No user
// info, no fragment. Parsing only; no sockets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dripgate::common {

struct HttpUrl {
  std::string host;  // a DNS name or an IP address (IPv6 without brackets)
  int port = 80;
  std::string target = "/";  // path and query, as sent on the request line

  bool operator==(const HttpUrl&) const = default;
};

// The longest URL accepted.
inline constexpr size_t kMaxHttpUrlBytes = 2048;

// `url` parsed; on failure nullopt and, when why is given, what is wrong.
std::optional<HttpUrl> parse_http_url(std::string_view url, std::string* why = nullptr);

// "host:port" as a Host header says it (IPv6 in brackets).
std::string http_host_header(const HttpUrl& u);

}  // namespace dripgate::common
