// Redis endpoints as URLs, the one parser used by the YAML loader and by command-line
// overrides: `redis://[[user][:password]@]host[:port][/db]` or `unix:///path`. A user name
// selects a Redis ACL user (sent as `AUTH user password`); without one, `AUTH password`
// authenticates the default user. `user@` without a password leaves the password to be given
// elsewhere (config::Redis::password_file). No TLS: hiredis 0.14 has none.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dripgate::common {

struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string user;       // ACL user; empty: the default user
  std::string password;   // empty: no AUTH
  std::string unix_path;  // set for unix:///path URLs (host is then empty)

  bool operator==(const RedisUrl&) const = default;
};

// Fills `out` from `url`; on failure returns why and leaves `out` unchanged. The reason never
// contains the password.
std::optional<std::string> parse_redis_url(std::string_view url, RedisUrl& out);

// `url` with its password replaced by `***`: what logs, errors and health answers show.
std::string redact_redis_url(std::string_view url);

}  // namespace dripgate::common
