#include "common/http_url.h"

#include "common/address.h"

namespace dripgate::common {

namespace {

std::optional<HttpUrl> fail(std::string* why, std::string message) {
  if (why) *why = std::move(message);
  return std::nullopt;
}

}  // namespace

std::optional<HttpUrl> parse_http_url(std::string_view url, std::string* why) {
  constexpr std::string_view kScheme = "http://";
  if (url.size() > kMaxHttpUrlBytes)
    return fail(why, "longer than " + std::to_string(kMaxHttpUrlBytes) + " bytes");
  if (url.starts_with("https://"))
    return fail(why, "https is not supported: the endpoint is scraped over plain http://");
  if (!url.starts_with(kScheme)) return fail(why, "expected http://host[:port][/path]");
  // Printable ASCII: the target goes on the request line as it is.
  for (unsigned char ch : url)
    if (ch <= ' ' || ch >= 0x7f)
      return fail(why, "expected printable ASCII without spaces (percent-encode the rest)");
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find('#') != std::string_view::npos) return fail(why, "a fragment ('#') is not sent");
  size_t end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos)
    return fail(why, "user info ('user@host') is not supported");
  HttpUrl u;
  std::optional<int> port;
  if (auto bad = split_host_port(authority, false, u.host, port)) return fail(why, *bad);
  if (port) {
    if (*port == 0) return fail(why, "port 0 is not a port to connect to");
    u.port = *port;
  }
  if (end != std::string_view::npos) {
    u.target = std::string(rest.substr(end));
    if (u.target.front() == '?') u.target.insert(0, "/");
  }
  return u;
}

std::string http_host_header(const HttpUrl& u) {
  std::string h = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  return h + ":" + std::to_string(u.port);
}

}  // namespace dripgate::common
