// OpenAI's rate-limit headers: the duration text, the binding gates, and what an admission's
// answer carries with them on and off.
#include "control/http/openai_headers.h"

#include <gtest/gtest.h>

#include "control/http/api.h"

namespace dripgate::control::api {
namespace {

std::string header_of(const Headers& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "<absent>";
}

// Go's time.Duration text, which OpenAI's headers use ("1s", "6m0s", "20ms"), to the ms.
TEST(GoDuration, WritesOpenAisForms) {
  EXPECT_EQ(go_duration(0), "0s");
  EXPECT_EQ(go_duration(-5), "0s");
  EXPECT_EQ(go_duration(1), "1ms");
  EXPECT_EQ(go_duration(20), "20ms");
  EXPECT_EQ(go_duration(999), "999ms");
  EXPECT_EQ(go_duration(1000), "1s");
  EXPECT_EQ(go_duration(1500), "1.5s");
  EXPECT_EQ(go_duration(2005), "2.005s");
  EXPECT_EQ(go_duration(17280), "17.28s");
  EXPECT_EQ(go_duration(59999), "59.999s");
  EXPECT_EQ(go_duration(60000), "1m0s");
  EXPECT_EQ(go_duration(360000), "6m0s");
  EXPECT_EQ(go_duration(72500), "1m12.5s");
  EXPECT_EQ(go_duration(3600000), "1h0m0s");
  EXPECT_EQ(go_duration(3723040), "1h2m3.04s");
  EXPECT_EQ(go_duration(int64_t{31} * 86400 * 1000), "744h0m0s");
}

// A bucket's reset is the time its level takes to refill to the capacity, rounded up to the
// millisecond (a client that waits it finds the bucket full), float noise aside.
TEST(GoDuration, BucketResetRoundsUpToTheMillisecond) {
  EXPECT_EQ(bucket_remaining("tenant", 10, 3, 9).reset_ms, 334);  // 333.33 ms
  EXPECT_EQ(bucket_remaining("tenant", 10, 2, 9).reset_ms, 500);
  EXPECT_EQ(bucket_remaining("tenant", 1, 10, 1 - 0.3).reset_ms, 30);  // 0.7 is no double
  EXPECT_EQ(bucket_remaining("tenant", 10, 2, 10).reset_ms, 0);
  EXPECT_EQ(bucket_remaining("tenant", 10, 2, 12).reset_ms, 0);
  EXPECT_EQ(bucket_remaining("tenant", 600, 10, 0).reset_ms, 60000);
  EXPECT_EQ(bucket_remaining("tenant", 10, 0, 3).reset_ms, 0);  // never refills: not said
  // A bucket below zero (a settle charged more than the estimate) takes longer than a full one.
  EXPECT_EQ(bucket_remaining("tenant_tokens", 1000, 100, -500).reset_ms, 15000);
}

// The lowest remaining request gate and token-rate gate of the plan bind; global gates (shared
// by every tenant), the quota and concurrency are not the headers'.
TEST(OpenAiLimits, PicksThePlansLowestRemaining) {
  std::vector<Remaining> rem = {bucket_remaining("tenant", 100, 10, 40),
                                bucket_remaining("user", 20, 1, 7),
                                bucket_remaining("model", 5, 1, 0),
                                bucket_remaining("tenant_tokens", 9000, 150, 800),
                                bucket_remaining("user_tokens", 5000, 50, 900),
                                bucket_remaining("model_tokens", 10, 1, 0),
                                {"quota", 3, 1000, 2592000, 86400},
                                {"concurrency", 0, 4, 120, 30}};
  OpenAiLimits l = openai_limits(rem);
  ASSERT_TRUE(l.requests && l.tokens);
  EXPECT_EQ(l.requests->gate, "user");
  EXPECT_EQ(l.tokens->gate, "tenant_tokens");
  // As little left: the one that takes longer to be whole again.
  rem = {bucket_remaining("tenant", 10, 10, 2), bucket_remaining("ip", 10, 1, 2)};
  EXPECT_EQ(openai_limits(rem).requests->gate, "ip");
  EXPECT_FALSE(openai_limits(rem).tokens);
  EXPECT_FALSE(openai_limits({bucket_remaining("total", 10, 1, 2)}).requests);
}

AdmitResult admitted(std::vector<Remaining> rem) {
  AdmitResult a;
  a.outcome = Outcome::kAllowed;
  a.request_id = "t.00ff";
  a.remaining = std::move(rem);
  return a;
}

TEST(OpenAiHeaders, OnAnAdmissionAndARefusal) {
  AdmitResult a = admitted({bucket_remaining("tenant", 60, 1, 41.7),
                            bucket_remaining("tenant_tokens", 150000, 2500, 149984)});
  Response r = render_admit(a);
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-limit-requests"), "60");
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-remaining-requests"), "41");
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-reset-requests"), "18.3s");
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-limit-tokens"), "150000");
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-remaining-tokens"), "149984");
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-reset-tokens"), "7ms");  // 6.4 ms, up
  // The IETF fields stay as they were.
  EXPECT_EQ(header_of(r.headers, "RateLimit"),
            "\"tenant\";r=41;t=19, \"tenant_tokens\";r=149984;t=1");
  a.outcome = Outcome::kRefused;
  a.gate = "tenant_tokens";
  a.reason = "rate";
  a.retry_after_ms = 900;
  a.remaining[1] = bucket_remaining("tenant_tokens", 150000, 2500, -100);
  r = render_admit(a, {}, 1796083200);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-remaining-tokens"), "0");  // never below zero
  EXPECT_EQ(header_of(r.headers, "x-ratelimit-reset-tokens"), "1m0.04s");
  EXPECT_EQ(header_of(r.headers, "Retry-After"), "1");
}

// A plan without a token-rate gate has no token headers; a sliding window resets within its
// window; off, none of the six is written and the rest of the answer is the same.
TEST(OpenAiHeaders, AbsentWithoutTheirGateAndWhenOff) {
  Remaining window{"user", 3, 10, 60, 60, 60000};
  AdmitResult a = admitted({window, {"quota", 700, 1000, 2592000, 86400}});
  Response on = render_admit(a);
  EXPECT_EQ(header_of(on.headers, "x-ratelimit-limit-requests"), "10");
  EXPECT_EQ(header_of(on.headers, "x-ratelimit-remaining-requests"), "3");
  EXPECT_EQ(header_of(on.headers, "x-ratelimit-reset-requests"), "1m0s");
  for (const char* h :
       {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"})
    EXPECT_EQ(header_of(on.headers, h), "<absent>") << h;
  Response off = render_admit(a, {}, 0, false);
  EXPECT_EQ(off.headers.size() + 3, on.headers.size());
  for (const auto& [k, v] : off.headers) EXPECT_EQ(k.rfind("x-ratelimit-", 0), std::string::npos);
  EXPECT_EQ(off.body, on.body);
  EXPECT_EQ(ratelimit_headers(a, false), off.headers);
  EXPECT_EQ(ratelimit_headers(a, true), on.headers);
}

}  // namespace
}  // namespace dripgate::control::api
