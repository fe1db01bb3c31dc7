#include "common/redis_url.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::common {
namespace {

RedisUrl parse_ok(const std::string& url) {
  RedisUrl u;
  auto why = parse_redis_url(url, u);
  EXPECT_FALSE(why) << url << ": " << *why;
  return u;
}

std::string error_of(const std::string& url) {
  RedisUrl u;
  u.host = "unchanged";
  auto why = parse_redis_url(url, u);
  EXPECT_EQ(u.host, "unchanged") << "a failed parse must leave its output alone";
  return why.value_or("(parsed)");
}

TEST(RedisUrl, PartsOfAUrl) {
  RedisUrl u = parse_ok("redis://:s3cr@t@cache.example:6380/3");
  EXPECT_EQ(u.host, "cache.example");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "s3cr@t");
  u = parse_ok("redis://10.0.0.5");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.db, 0);
  EXPECT_EQ(u.password, "");
  u = parse_ok("redis://[::1]:7000/");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 7000);
  u = parse_ok("unix:///run/redis/redis.sock");
  EXPECT_EQ(u.unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(u.host, "");
}

TEST(RedisUrl, AclUsers) {
  RedisUrl u = parse_ok("redis://gateway:pa:ss@h:1/2");
  EXPECT_EQ(u.user, "gateway");
  EXPECT_EQ(u.password, "pa:ss");
  EXPECT_EQ(u.db, 2);
  u = parse_ok("redis://gateway@h:1");  // the password comes from elsewhere
  EXPECT_EQ(u.user, "gateway");
  EXPECT_EQ(u.password, "");
  EXPECT_EQ(error_of("redis://@h:1"), "empty user name");
  EXPECT_EQ(error_of("redis://gateway:@h:1"), "empty password");
  EXPECT_EQ(error_of("redis://gate way:pw@h:1"), "bad user name 'gate way'");
}

TEST(RedisUrl, Errors) {
  EXPECT_EQ(error_of("http://h:1"), "the scheme must be redis:// or unix://");
  EXPECT_EQ(error_of("rediss://h:1"), "TLS (rediss://) is not supported");
  EXPECT_EQ(error_of("redis://:6379"), "missing host");
  EXPECT_EQ(error_of("redis://h:0"), "bad port '0' (1 to 65535)");
  EXPECT_EQ(error_of("redis://h:1/x"), "bad database number 'x'");
  EXPECT_EQ(error_of("unix://relative.sock"), "the socket path must be absolute");
  EXPECT_EQ(error_of("unix:///" + std::string(120, 's')),
            "the socket path is longer than 107 bytes");
}

TEST(RedisUrl, RedactionHidesEveryPassword) {
  EXPECT_EQ(redact_redis_url("redis://:s3cr@t@h:1/0"), "redis://:***@h:1/0");
  EXPECT_EQ(redact_redis_url("redis://gateway:s3cr@t@h:1"), "redis://gateway:***@h:1");
  EXPECT_EQ(redact_redis_url("redis://s3cret@h:1"), "redis://***@h:1");
  EXPECT_EQ(redact_redis_url("redis://h:1/0"), "redis://h:1/0");
  EXPECT_EQ(redact_redis_url("unix:///run/r.sock"), "unix:///run/r.sock");
  for (const char* bad : {"redis://gateway:s3cr@t@h:x", "redis://:s3cr@t@h:0"}) {
    RedisUrl u;
    auto why = parse_redis_url(bad, u);
    ASSERT_TRUE(why);
    EXPECT_EQ(why->find("s3cr"), std::string::npos) << *why;
  }
}

}  // namespace
}  // namespace dripgate::common
