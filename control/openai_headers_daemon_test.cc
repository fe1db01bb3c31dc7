// OpenAI's rate-limit headers end to end: a real dripgate-control on a real redis-server, over
// HTTP. The values follow the buckets as they drain, a plan without a token-rate gate has no
// token headers, and control.openai_headers: false removes all six.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_server.h"

namespace {

using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::RedisServer;

const char* const kOpenAi[] = {"x-ratelimit-limit-requests",   "x-ratelimit-remaining-requests",
                               "x-ratelimit-reset-requests",   "x-ratelimit-limit-tokens",
                               "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"};

// Tenant m: 4 requests refilled at one per 100 s and 1000 tokens at 1 a second; tenant p: a user
// gate only.
std::string config(int redis_port, const std::string& control_extra = "") {
  return "redis: { url: \"redis://127.0.0.1:" + std::to_string(redis_port) +
         "\", timeout_ms: 2000 }\ncontrol: { threads: 1" + control_extra +
         " }\n"
         "plans:\n"
         "  metered:\n"
         "    gates:\n"
         "      tenant: { capacity: 4, refill_per_s: 0.01 }\n"
         "      tenant_tokens: { capacity: 1000, refill_per_s: 1 }\n"
         "  plain:\n"
         "    gates: { user: { capacity: 3, refill_per_s: 0.01 } }\n"
         "tenants:\n  m: { plan: metered }\n  p: { plan: plain }\n";
}

// A Go duration as OpenAI writes it ("1m40s", "99.9s", "20ms") in milliseconds; -1 when it is
// not one.
int64_t duration_ms(const std::string& s) {
  if (s == "0s") return 0;
  int64_t total = 0;
  size_t i = 0;
  while (i < s.size()) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str() + i, &end);
    if (end == s.c_str() + i) return -1;
    i = static_cast<size_t>(end - s.c_str());
    const std::string rest = s.substr(i);
    double unit = 0;
    if (rest.rfind("ms", 0) == 0) {
      unit = 1, i += 2;
    } else if (rest.rfind('h', 0) == 0) {
      unit = 3600000, i += 1;
    } else if (rest.rfind('m', 0) == 0) {
      unit = 60000, i += 1;
    } else if (rest.rfind('s', 0) == 0) {
      unit = 1000, i += 1;
    } else {
      return -1;
    }
    total += static_cast<int64_t>(v * unit + 0.5);
  }
  return total;
}

TEST(GoDurationParse, ReadsWhatTheDaemonWrites) {
  EXPECT_EQ(duration_ms("1m40s"), 100000);
  EXPECT_EQ(duration_ms("1h0m0.5s"), 3600500);
  EXPECT_EQ(duration_ms("20ms"), 20);
  EXPECT_EQ(duration_ms("10"), -1);
}

HttpResponse admit(int port, const std::string& body) {
  return http(port, "POST", "/v1/admit", body);
}

// Each admission takes a request and 100 tokens: the remaining values fall by one and by 100,
// the resets grow by the time those take to refill (100 s), and the refusal that follows still
// says where the binding gates stand.
TEST(OpenAiHeaders, FollowTheBucketsAsTheyDrain) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port()));
  ASSERT_TRUE(d.ready()) << d.log();
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("admission " + std::to_string(i + 1));
    HttpResponse r = admit(d.port(), R"({"tenant":"m","tokens":100})");
    if (i < 4) {
      ASSERT_EQ(r.status, 200) << r.body;
    } else {
      ASSERT_EQ(r.status, 429) << r.body;
      EXPECT_EQ(r.body_json().value("gate", ""), "tenant");
    }
    const int taken = std::min(i + 1, 4);  // the refused one took nothing
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "4");
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), std::to_string(4 - taken));
    // 100 s a request to refill: at most a few seconds of the test's own time less.
    const int64_t req_reset = duration_ms(r.header("x-ratelimit-reset-requests"));
    EXPECT_LE(req_reset, taken * 100000) << r.header("x-ratelimit-reset-requests");
    EXPECT_GE(req_reset, taken * 100000 - 5000) << r.header("x-ratelimit-reset-requests");
    EXPECT_EQ(r.header("x-ratelimit-limit-tokens"), "1000");
    // 1 token a second refills while the test runs: a few at most.
    const int left = std::stoi(r.header("x-ratelimit-remaining-tokens"));
    EXPECT_GE(left, 1000 - 100 * taken);
    EXPECT_LE(left, 1000 - 100 * taken + 5);
    const int64_t tok_reset = duration_ms(r.header("x-ratelimit-reset-tokens"));
    EXPECT_LE(tok_reset, taken * 100000) << r.header("x-ratelimit-reset-tokens");
    EXPECT_GE(tok_reset, taken * 100000 - 5000) << r.header("x-ratelimit-reset-tokens");
  }
  // Tenant p's plan has no token-rate gate: its user gate binds, and no token header is sent.
  HttpResponse r = admit(d.port(), R"({"tenant":"p","user":"u1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "3");
  EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), "2");
  for (const char* h :
       {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"})
    EXPECT_EQ(r.header(h), "<absent>") << h;
}

// Off: neither an admission nor a refusal carries any of them; the IETF fields stay.
TEST(OpenAiHeaders, OffRemovesThem) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port(), ", openai_headers: false"));
  ASSERT_TRUE(d.ready()) << d.log();
  for (int i = 0; i < 5; ++i) {
    HttpResponse r = admit(d.port(), R"({"tenant":"m","tokens":100})");
    ASSERT_EQ(r.status, i < 4 ? 200 : 429) << r.body;
    EXPECT_NE(r.header("ratelimit"), "<absent>");
    for (const char* h : kOpenAi) EXPECT_EQ(r.header(h), "<absent>") << h;
  }
}

}  // namespace
