// GET /v1/admin/usage/<tenant> end to end: a real dripgate-control on a real redis-server, the
// counters after admissions and a settle, the period's bounds, the projection, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_cluster.h"
#include "tests/redis_server.h"

namespace {

using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::RedisCluster;
using dripgate::testing::RedisServer;
using json = nlohmann::json;

const std::string kToken = "s3cret-admin-t0ken";
const std::vector<std::string> kAdmin = {"Authorization: Bearer " + kToken};

// Tenants m and s (a month's budget of 1000 tokens each), d (400 a day and 1000 a month), n (no
// quota); every other tenant on the quota plan through "*" only in the second daemon.
std::string config(const std::string& redis, bool any = false) {
  return "redis: { " + redis + ", timeout_ms: 2000 }\ncontrol: { threads: 1, admin_token: \"" +
         kToken +
         "\" }\n"
         "plans:\n"
         "  metered: { gates: { tenant: { capacity: 100, refill_per_s: 100 } }, quota: { "
         "tokens_per_month: 1000 } }\n"
         "  daily: { gates: { tenant: { capacity: 100, refill_per_s: 100 } }, quota: { "
         "tokens_per_day: 400, tokens_per_month: 1000 } }\n"
         "  free: { gates: { tenant: { capacity: 100, refill_per_s: 100 } } }\n"
         "tenants:\n  m: { plan: metered }\n  s: { plan: metered }\n  n: { plan: free }\n"
         "  d: { plan: daily }\n" +
         (any ? "  \"*\": { plan: metered }\n" : "");
}

std::string config(int redis_port, bool any = false) {
  return config("url: \"redis://127.0.0.1:" + std::to_string(redis_port) + "\"", any);
}

HttpResponse usage(int port, const std::string& tenant,
                   const std::vector<std::string>& auth = kAdmin) {
  return http(port, "GET", "/v1/admin/usage/" + tenant, "", auth);
}

// The first second of the UTC month holding `t`, and of the next one.
std::pair<int64_t, int64_t> utc_month(int64_t t) {
  time_t now = static_cast<time_t>(t);
  tm m{};
  gmtime_r(&now, &m);
  m.tm_mday = 1;
  m.tm_hour = m.tm_min = m.tm_sec = 0;
  const int64_t start = timegm(&m);
  m.tm_mon += 1;
  return {start, timegm(&m)};
}

const json& only_quota(const json& body) {
  static const json none;
  if (!body.contains("quotas") || body["quotas"].size() != 1) return none;
  return body["quotas"][0];
}

// A plan of two quotas lists both, shortest period first, each counted in its own period.
TEST(Usage, ListsEachQuotaOfThePlanInItsOwnPeriod) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"d","tokens":300})").status, 200);
  const json body = usage(d.port(), "d").body_json();
  ASSERT_TRUE(body.contains("quotas") && body["quotas"].size() == 2) << body.dump();
  const json& day = body["quotas"][0];
  const json& month = body["quotas"][1];
  EXPECT_EQ(day["quota"], "tokens_per_day");
  EXPECT_EQ(day["period"], "day");
  EXPECT_EQ(day["used"], 300);
  EXPECT_EQ(day["remaining"], 100);
  const int64_t now = body["now_unix"];
  EXPECT_EQ(day["period_start_unix"], now - now % 86400);  // UTC days
  EXPECT_EQ(day["resets_at_unix"], now - now % 86400 + 86400);
  EXPECT_EQ(month["quota"], "tokens_per_month");
  EXPECT_EQ(month["used"], 300);
  EXPECT_EQ(month["remaining"], 700);
  EXPECT_EQ(month["resets_at_unix"], utc_month(now).second);
  // The day's 100 left refuse a 200 estimate, and charge neither quota.
  const HttpResponse refused =
      http(d.port(), "POST", "/v1/admit", R"({"tenant":"d","tokens":200})");
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(usage(d.port(), "d").body_json()["quotas"][1]["used"], 300);
}

TEST(Usage, CountsAdmissionsAndSettles) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  json q = only_quota(usage(d.port(), "m").body_json());
  ASSERT_TRUE(q.is_object()) << usage(d.port(), "m").body;
  EXPECT_EQ(q["used"], 0);
  EXPECT_EQ(q["remaining"], 1000);
  EXPECT_TRUE(q["projected_exhaustion"].is_null());

  HttpResponse a = http(d.port(), "POST", "/v1/admit", R"({"tenant":"m","tokens":300})");
  ASSERT_EQ(a.status, 200) << a.body;
  HttpResponse b = http(d.port(), "POST", "/v1/admit", R"({"tenant":"m","tokens":200})");
  ASSERT_EQ(b.status, 200) << b.body;
  HttpResponse r = usage(d.port(), "m");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.body_json();
  EXPECT_EQ(body["tenant"], "m");
  EXPECT_EQ(body["plan"], "metered");
  q = only_quota(body);
  EXPECT_EQ(q["quota"], "tokens_per_month");
  EXPECT_EQ(q["unit"], "tokens");
  EXPECT_EQ(q["period"], "month");
  EXPECT_EQ(q["mode"], "enforce");
  EXPECT_EQ(q["used"], 500);  // the estimates, while open
  EXPECT_EQ(q["limit"], 1000);
  EXPECT_EQ(q["remaining"], 500);

  // The settle replaces the first estimate by the tokens used.
  HttpResponse s = http(d.port(), "POST", "/v1/settle",
                        R"({"tenant":"m","request_id":")" +
                            a.body_json()["request_id"].get<std::string>() + R"(","tokens":120})");
  ASSERT_EQ(s.status, 200) << s.body;
  body = usage(d.port(), "m").body_json();
  q = only_quota(body);
  EXPECT_EQ(q["used"], 320);
  EXPECT_EQ(q["remaining"], 680);

  // The period is this UTC month, in both forms.
  const int64_t now = body["now_unix"];
  EXPECT_LE(std::abs(now - static_cast<int64_t>(std::time(nullptr))), 5);
  const auto [start, end] = utc_month(now);
  EXPECT_EQ(q["period_start_unix"], start);
  EXPECT_EQ(q["resets_at_unix"], end);
  char label[8];
  const time_t st = static_cast<time_t>(start);
  tm m{};
  gmtime_r(&st, &m);
  strftime(label, sizeof label, "%Y-%m", &m);
  EXPECT_EQ(q["period_label"], label);
  EXPECT_EQ(q["period_start"], std::string(label) + "-01T00:00:00Z");
  char reset[32];
  const time_t en = static_cast<time_t>(end);
  gmtime_r(&en, &m);
  strftime(reset, sizeof reset, "%Y-%m-%dT%H:%M:%SZ", &m);
  EXPECT_EQ(q["resets_at"], reset);
  // The rate is the month's so far.
  const double elapsed = static_cast<double>(std::max<int64_t>(now - start, 60));
  EXPECT_NEAR(q["rate_per_s"].get<double>(), 320 / elapsed, 320 / elapsed * 0.01);
}

// 999 of 1000 tokens used since the month began: at that average the last one goes within
// (time since the month began) / 999 seconds, long before the month ends.
TEST(Usage, ProjectsExhaustionFromTheMonthsAverage) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"s","tokens":999})").status, 200);
  json body = usage(d.port(), "s").body_json();
  json q = only_quota(body);
  ASSERT_TRUE(q.is_object()) << body;
  const int64_t now = body["now_unix"];
  const auto [start, end] = utc_month(now);
  ASSERT_TRUE(q["projected_exhaustion_unix"].is_number_integer()) << body;
  const int64_t at = q["projected_exhaustion_unix"];
  const int64_t elapsed = std::max<int64_t>(now - start, 60);
  EXPECT_GE(at, now);
  EXPECT_LE(at, now + (elapsed + 998) / 999);
  EXPECT_LT(at, end);
  EXPECT_EQ(q["projected_exhaustion"].get<std::string>().size(), 20u);  // 2026-12-07T22:40:00Z
  // Spent: now.
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"s","tokens":1})").status, 200);
  q = only_quota(usage(d.port(), "s").body_json());
  EXPECT_EQ(q["remaining"], 0);
  EXPECT_GE(q["projected_exhaustion_unix"].get<int64_t>(), now);
}

TEST(Usage, ErrorsAndAuth) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  // A plan without a quota: an empty list.
  HttpResponse r = usage(d.port(), "n");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body_json()["quotas"], json::array());
  r = usage(d.port(), "nobody");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.body_json().value("error", "").rfind("tenant: 'nobody'", 0), 0u) << r.body;
  r = usage(d.port(), "a:b");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body_json().value("error", "").rfind("tenant: ", 0), 0u) << r.body;
  EXPECT_EQ(usage(d.port(), "m", {}).status, 401);
  EXPECT_EQ(usage(d.port(), "m", {"Authorization: Bearer " + kToken + "x"}).status, 401);
  EXPECT_EQ(http(d.port(), "POST", "/v1/admin/usage/m", "{}", kAdmin).status, 405);
  // The token, right or wrong, is in no line the daemon wrote (at debug level).
  EXPECT_EQ(d.log().find(kToken), std::string::npos) << d.log();
}

// On a Redis Cluster the tenant's counters are read in its slot's master, in one command.
TEST(Usage, OnARedisCluster) {
  RedisCluster cluster(3, 0);
  std::string seeds;
  for (const std::string& s : cluster.seeds()) seeds += (seeds.empty() ? "\"" : ", \"") + s + "\"";
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config("cluster: [" + seeds + "]"));
  ASSERT_TRUE(d.ready()) << d.log();
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"m","tokens":300})").status, 200);
  HttpResponse r = usage(d.port(), "m");
  ASSERT_EQ(r.status, 200) << r.body << d.log();
  EXPECT_EQ(only_quota(r.body_json())["used"], 300) << r.body;
}

// Under "*" every tenant id has the default plan's quota, counted from nothing.
TEST(Usage, AnyTenantUnderTheDefaultPlan) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port(), true));
  ASSERT_TRUE(d.ready()) << d.log();
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"w1","tokens":40})").status, 200);
  json q = only_quota(usage(d.port(), "w1").body_json());
  EXPECT_EQ(q["used"], 40);
  EXPECT_EQ(only_quota(usage(d.port(), "w2").body_json())["used"], 0);
}

}  // namespace
