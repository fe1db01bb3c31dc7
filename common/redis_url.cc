#include "common/redis_url.h"

#include <charconv>

#include "common/address.h"
#include "common/error.h"

namespace dripgate::common {
namespace {

constexpr std::string_view kUnix = "unix://", kRedis = "redis://";

bool printable_no_space(std::string_view s) {
  for (unsigned char c : s)
    if (c <= ' ' || c == 0x7f) return false;
  return true;
}

// The credentials part of a redis:// URL: everything before the last '@' (a password may
// itself contain '@'), or npos when there is none.
size_t credentials_end(std::string_view rest) {
  return rest.rfind('@');
}

std::optional<std::string> parse_unix(std::string_view path, RedisUrl& out) {
  if (path.size() < 2 || path.front() != '/') return "the socket path must be absolute";
  if (path.size() > kSunPathMax)
    return "the socket path is longer than " + std::to_string(kSunPathMax) + " bytes";
  out = RedisUrl{};
  out.host.clear();
  out.port = 0;
  out.unix_path = std::string(path);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_redis_url(std::string_view url, RedisUrl& out) {
  if (url.substr(0, kUnix.size()) == kUnix) return parse_unix(url.substr(kUnix.size()), out);
  if (url.substr(0, 9) == "rediss://") return "TLS (rediss://) is not supported";
  if (url.substr(0, kRedis.size()) != kRedis) return "the scheme must be redis:// or unix://";
  std::string_view rest = url.substr(kRedis.size());
  RedisUrl u;
  if (auto at = credentials_end(rest); at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    // `user@` alone names an ACL user whose password is given elsewhere (a password file).
    auto colon = cred.find(':');
    u.user = std::string(cred.substr(0, colon));
    if (colon != std::string_view::npos) {
      u.password = std::string(cred.substr(colon + 1));
      if (u.password.empty()) return "empty password";
    } else if (u.user.empty()) {
      return "empty user name";
    }
    if (!printable_no_space(u.user)) return "bad user name " + quote(u.user);
    rest = rest.substr(at + 1);
  }
  std::string_view hostport = rest.substr(0, rest.find('/'));
  std::string_view dbpart =
      hostport.size() < rest.size() ? rest.substr(hostport.size() + 1) : std::string_view();
  std::optional<int> port;
  if (auto why = split_host_port(hostport, false, u.host, port)) return why;
  if (port && *port == 0) return "bad port '0' (1 to 65535)";
  u.port = port.value_or(6379);
  if (!dbpart.empty()) {
    auto [end, ec] = std::from_chars(dbpart.data(), dbpart.data() + dbpart.size(), u.db);
    if (ec != std::errc() || end != dbpart.data() + dbpart.size() || u.db < 0)
      return "bad database number " + quote(dbpart);
  }
  out = std::move(u);
  return std::nullopt;
}

std::string redact_redis_url(std::string_view url) {
  if (url.substr(0, kRedis.size()) != kRedis) return std::string(url);
  std::string_view rest = url.substr(kRedis.size());
  auto at = credentials_end(rest);
  if (at == std::string_view::npos) return std::string(url);
  std::string_view cred = rest.substr(0, at);
  // Without a ':' the whole part may be a password written without its colon: hide all of it.
  auto colon = cred.find(':');
  std::string user =
      colon == std::string_view::npos ? "" : std::string(cred.substr(0, colon)) + ":";
  return std::string(kRedis) + user + "***" + std::string(rest.substr(at));
}

}  // namespace dripgate::common
