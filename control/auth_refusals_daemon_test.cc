// dripgate_auth_refusals_total end to end: a real dripgate-control under control.auth:
// tenant_keys on a real redis-server, each kind of refused credential counted once by front,
// scope and reason, and nothing counted for the calls that pass.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_server.h"

namespace {

using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::RedisServer;
using namespace std::chrono_literals;

// SHA-256 of "key-of-a", "key-of-b", "key-r-old", "key-r-new".
const char kDigestA[] = "ee063bb3d7270fdf6148f09dde510a5cf346c4aa4dd2ff4b2caec5348d799043";
const char kDigestB[] = "caad66a34f6dbd2c56b4fceb13caf74761aba0720534d6e33185edd493ea0f63";
const char kDigestROld[] = "173e57ee13d1d99ff7a7da87ba30d329709b7407cc6c3568d2d765db0ce9b382";
const char kDigestRNew[] = "33d28b53354cd24525c486eb28172e3e4cf5605b7ee99de51b95c0f542e81f3c";
const std::vector<std::string> kAdmin = {"Authorization: Bearer adm1n"};
const std::vector<std::string> kMetrics = {"Authorization: Bearer m3trics"};

std::vector<std::string> bearer(const std::string& key) {
  return {"Authorization: Bearer " + key};
}

std::string config(int redis_port) {
  return "redis: { url: \"redis://127.0.0.1:" + std::to_string(redis_port) +
         "\", timeout_ms: 2000 }\n"
         "control: { threads: 1, auth: tenant_keys, admin_token: adm1n, metrics_token: m3trics "
         "}\n"
         "plans:\n  p: { gates: { tenant: { capacity: 100, refill_per_s: 100 } } }\n"
         "tenants:\n"
         "  a: { plan: p, keys_sha256: [\"" +
         std::string(kDigestA) + "\"] }\n  b: { plan: p, keys_sha256: [\"" + kDigestB + "\"] }\n";
}

int refusals(int port, const std::string& scope, const std::string& reason) {
  const std::string body = http(port, "GET", "/metrics", "", kMetrics).body;
  const std::string series = "dripgate_auth_refusals_total{front=\"http\",scope=\"" + scope +
                             "\",reason=\"" + reason + "\"} ";
  const size_t at = body.find(series);
  return at == std::string::npos ? 0 : std::stoi(body.substr(at + series.size()));
}

TEST(AuthRefusals, CountedByScopeAndReason) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  const std::string admit_a = R"({"tenant":"a"})";
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit", admit_a, bearer("key-of-a")).status, 200);
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit", admit_a).status, 401);
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit", admit_a, bearer("nobody's")).status, 401);
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit", admit_a, bearer("key-of-b")).status, 403);
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit",
                 R"({"tenant":"a","flow":{"src":"10.9.9.9","sport":4000,"dst":"10.0.0.2",)"
                 R"("dport":443,"proto":"tcp"}})",
                 bearer("key-of-a"))
                .status,
            403);
  EXPECT_EQ(http(d.port(), "GET", "/v1/admin/brake").status, 401);
  EXPECT_EQ(http(d.port(), "GET", "/v1/admin/brake", "", bearer("adm1nx")).status, 401);
  EXPECT_EQ(http(d.port(), "GET", "/v1/admin/brake", "", kAdmin).status, 200);
  EXPECT_EQ(http(d.port(), "GET", "/healthz").status, 401);

  // A registry tenant's key rotated with a second's overlap: the old key is refused as expired
  // once that second is over (and this daemon's copy has the rotation: a poll).
  ASSERT_EQ(http(d.port(), "PUT", "/v1/admin/tenants/r", R"({"plan":"p"})", kAdmin).status, 201);
  ASSERT_EQ(http(d.port(), "POST", "/v1/admin/keys/r",
                 std::string(R"({"op":"add","key_sha256":")") + kDigestROld + "\"}", kAdmin)
                .status,
            200);
  ASSERT_EQ(
      http(d.port(), "POST", "/v1/admin/keys/r",
           std::string(R"({"op":"rotate","key_sha256":")") + kDigestRNew + R"(","overlap_s":1})",
           kAdmin)
          .status,
      200);
  // Until this daemon's copy has the added key (a poll), the key is no one's: counted so.
  HttpResponse old_key;
  int unknown = 0;
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(20ms)) {
    old_key = http(d.port(), "POST", "/v1/admit", R"({"tenant":"r"})", bearer("key-r-old"));
    if (old_key.body.find("expired") != std::string::npos) break;
    unknown += old_key.body.find("unknown API key") != std::string::npos;
  }
  EXPECT_EQ(old_key.status, 401) << old_key.body;

  EXPECT_EQ(refusals(d.port(), "api", "missing"), 1);
  EXPECT_EQ(refusals(d.port(), "api", "unknown_key"), 1 + unknown);
  EXPECT_EQ(refusals(d.port(), "api", "wrong_tenant"), 1);
  EXPECT_EQ(refusals(d.port(), "api", "flow_source"), 1);
  EXPECT_EQ(refusals(d.port(), "api", "expired"), 1);
  EXPECT_EQ(refusals(d.port(), "admin", "missing"), 1);
  EXPECT_EQ(refusals(d.port(), "admin", "unknown_key"), 1);
  // ControlDaemon's own readiness probe of /healthz, and the test's: each without the token.
  EXPECT_GE(refusals(d.port(), "metrics", "missing"), 1);
  EXPECT_EQ(refusals(d.port(), "metrics", "unknown_key"), 0);
}

}  // namespace
