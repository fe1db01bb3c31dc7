#include "control/http/api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "common/json_writer.h"
#include "control/http/guidance.h"

namespace dripgate::control::api {
namespace {

using json = nlohmann::json;

std::string admit_error(const std::string& body) {
  AdmitRequest r;
  auto e = parse_admit(body, r);
  return e ? e->str() : "";
}

TEST(ParseAdmit, FullRequest) {
  AdmitRequest r;
  auto e = parse_admit(R"({"tenant":"ws-acme","user":"u1","api_key":"k.1","model":"llama-70b",
      "tool":"web_search","tokens":300,"request_id":"r-1",
      "flow":{"src":"10.0.0.1","sport":40000,"dst":"10.0.1.2","dport":443,"proto":"tcp"}})",
                       r);
  ASSERT_FALSE(e) << e->str();
  EXPECT_EQ(r.tenant, "ws-acme");
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.api_key, "k.1");
  EXPECT_EQ(r.model, "llama-70b");
  EXPECT_EQ(r.tool, "web_search");
  EXPECT_EQ(r.tokens, 300);
  EXPECT_EQ(r.request_id, "r-1");
  ASSERT_TRUE(r.flow);
  EXPECT_EQ(r.flow->src, "10.0.0.1");
  EXPECT_EQ(r.flow->sport, 40000);
  EXPECT_EQ(r.flow->dst, "10.0.1.2");
  EXPECT_EQ(r.flow->dport, 443);
  EXPECT_EQ(r.flow->proto, 6);
}

TEST(ParseAdmit, MinimalRequestLeavesOptionalFieldsEmpty) {
  AdmitRequest r;
  ASSERT_FALSE(parse_admit(R"({"tenant":"t","user":null})", r));
  EXPECT_EQ(r.tenant, "t");
  EXPECT_TRUE(r.user.empty());
  EXPECT_EQ(r.tokens, 0);
  EXPECT_FALSE(r.flow);
}

TEST(ParseAdmit, ErrorsNameTheField) {
  EXPECT_EQ(admit_error("{"), "body is not valid JSON");
  EXPECT_EQ(admit_error(""), "body is not valid JSON");
  EXPECT_EQ(admit_error("[1]"), "body must be a JSON object");
  EXPECT_EQ(admit_error("{}"), "tenant: required");
  EXPECT_EQ(admit_error(R"({"tenant":5})"), "tenant: must be a string");
  EXPECT_EQ(admit_error(R"({"tenant":"a b"})"), "tenant: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":""})"), "tenant: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":")" + std::string(65, 'a') + "\"}"),
            "tenant: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":"t","user":"x}y"})"), "user: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":"t","api_key":"{t:other}"})"),
            "api_key: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":"t","model":"a:b"})"),
            "model: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tool":[]})"), "tool: must be a string");
  EXPECT_EQ(admit_error(R"({"tenant":"t","request_id":"é"})"),
            "request_id: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(admit_error(R"({"tenant":"t","token":3})"), "token: unknown field");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tokens":-1})"), "tokens: must be a non-negative integer");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tokens":1.5})"),
            "tokens: must be a non-negative integer");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tokens":"3"})"),
            "tokens: must be a non-negative integer");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tokens":1e300})"), "tokens: too large");
  EXPECT_EQ(admit_error(R"({"tenant":"t","tokens":18446744073709551615})"), "tokens: too large");
}

TEST(ParseAdmit, IntegralFloatTokensAreAccepted) {
  AdmitRequest r;
  ASSERT_FALSE(parse_admit(R"({"tenant":"t","tokens":300.0})", r));
  EXPECT_EQ(r.tokens, 300);
}

TEST(ParseAdmit, FlowValidation) {
  auto flow = [](const std::string& f) {
    return admit_error(R"({"tenant":"t","flow":)" + f + "}");
  };
  EXPECT_EQ(flow("1"), "flow: must be an object");
  EXPECT_EQ(flow(R"({"sport":1,"dst":"1.2.3.4","dport":2,"proto":6})"), "flow.src: required");
  EXPECT_EQ(flow(R"({"src":"1.2.3","sport":1,"dst":"1.2.3.4","dport":2,"proto":6})"),
            "flow.src: must be an IPv4 or IPv6 address");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":0,"dst":"1.2.3.4","dport":2,"proto":6})"),
            "flow.sport: must be an integer 1..65535");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":1,"dst":"1.2.3.4","dport":65536,"proto":6})"),
            "flow.dport: must be an integer 1..65535");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":1,"dst":"1.2.3.4","dport":2,"proto":"icmp"})"),
            "flow.proto: must be \"tcp\", \"udp\", 6 or 17");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":1,"dst":"1.2.3.4","dport":2,"proto":1})"),
            "flow.proto: must be \"tcp\", \"udp\", 6 or 17");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":1,"dst":"::1","dport":2,"proto":6})"),
            "flow.dst: must be of the same address family as flow.src");
  EXPECT_EQ(flow(R"({"src":"1.2.3.4","sport":1,"dst":"1.2.3.4","dport":2,"proto":6,"x":1})"),
            "flow.x: unknown field");
  AdmitRequest r;
  ASSERT_FALSE(parse_admit(
      R"({"tenant":"t","flow":{"src":"fd00::1","sport":1,"dst":"fd00::2","dport":2,"proto":"udp"}})",
      r));
  EXPECT_EQ(r.flow->proto, 17);
  EXPECT_EQ(json::parse(flow_json(*r.flow)),
            json::parse(R"({"src":"fd00::1","sport":1,"dst":"fd00::2","dport":2,"proto":17})"));
}

// A repeated key is a smuggling vector (one reader takes the first, another the last): refused.
TEST(ParseAdmit, DuplicateKeysAreRefusedNamingTheKey) {
  EXPECT_EQ(admit_error(R"({"tenant":"a","tenant":"b"})"), "tenant: duplicate key");
  EXPECT_EQ(admit_error(R"({"tenant":"a","tokens":1,"tokens":2})"), "tokens: duplicate key");
  EXPECT_EQ(
      admit_error(
          R"({"tenant":"a","flow":{"src":"10.0.0.1","src":"10.0.0.2","sport":1,"dst":"10.0.0.3","dport":2,"proto":6}})"),
      "src: duplicate key");
  // The same name in different objects is no duplicate.
  AdmitRequest r;
  EXPECT_FALSE(parse_admit(
      R"({"tenant":"a","flow":{"src":"10.0.0.1","sport":1,"dst":"10.0.0.3","dport":2,"proto":6}})",
      r));
  SettleRequest s;
  EXPECT_EQ(parse_settle(R"({"request_id":"r","request_id":"q","tokens":1})", s)->str(),
            "request_id: duplicate key");
  ReleaseRequest rel;
  EXPECT_EQ(parse_release(R"({"request_id":"r","tenant":"a","tenant":"a"})", rel)->str(),
            "tenant: duplicate key");
}

TEST(ParseSettle, RequiresRequestIdAndTokens) {
  SettleRequest s;
  ASSERT_FALSE(parse_settle(R"({"request_id":"r1","tokens":250})", s));
  EXPECT_EQ(s.request_id, "r1");
  EXPECT_EQ(s.tokens, 250);
  EXPECT_TRUE(s.tenant.empty());
  EXPECT_EQ(parse_settle(R"({"tokens":1})", s)->str(), "request_id: required");
  EXPECT_EQ(parse_settle(R"({"request_id":"r"})", s)->str(), "tokens: required");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":-5})", s)->str(),
            "tokens: must be a non-negative integer");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":1,"flow":{}})", s)->str(),
            "flow: unknown field");
}

// tokens split by type: each type optional and a count; an unknown type or a negative count is
// a 400 naming it; a plain number stays the total.
TEST(ParseSettle, TokensByType) {
  SettleRequest s;
  ASSERT_FALSE(parse_settle(
      R"({"request_id":"r","tokens":{"input":100,"output":20,"cached_input":1000,"reasoning":7}})",
      s));
  ASSERT_TRUE(s.typed);
  EXPECT_EQ(*s.typed, (TokenCounts{100, 20, 1000, 7}));
  ASSERT_FALSE(parse_settle(R"({"request_id":"r","tokens":{"output":3}})", s));
  EXPECT_EQ(*s.typed, (TokenCounts{0, 3, 0, 0}));
  SettleRequest plain;
  ASSERT_FALSE(parse_settle(R"({"request_id":"r","tokens":42})", plain));
  EXPECT_FALSE(plain.typed);
  EXPECT_EQ(plain.tokens, 42);
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":{"images":1}})", s)->str(),
            "tokens.images: unknown field");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":{"output":-1}})", s)->str(),
            "tokens.output: must be a non-negative integer");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":{"input":1.5}})", s)->str(),
            "tokens.input: must be a non-negative integer");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":{"input":"1"}})", s)->str(),
            "tokens.input: must be a non-negative integer");
  EXPECT_EQ(parse_settle(R"({"request_id":"r","tokens":{"reasoning":2000000000000000}})", s)->str(),
            "tokens.reasoning: too large");
  ChargeRequest c;
  ASSERT_FALSE(parse_charge(R"({"request_id":"r","tokens":{"input":5,"output":6}})", c));
  ASSERT_TRUE(c.typed);
  EXPECT_EQ(*c.typed, (TokenCounts{5, 6, 0, 0}));
}

// An admission's estimate may be split by type as a settle's count is (or a plain number, or
// absent); bad types and counts are a 400 naming them.
TEST(ParseAdmit, EstimateByType) {
  AdmitRequest a;
  ASSERT_FALSE(parse_admit(R"({"tenant":"t","tokens":{"input":1000,"output":200}})", a));
  ASSERT_TRUE(a.typed);
  EXPECT_EQ(*a.typed, (TokenCounts{1000, 200, 0, 0}));
  AdmitRequest plain;
  ASSERT_FALSE(parse_admit(R"({"tenant":"t","tokens":42})", plain));
  EXPECT_FALSE(plain.typed);
  EXPECT_EQ(plain.tokens, 42);
  AdmitRequest none;
  ASSERT_FALSE(parse_admit(R"({"tenant":"t"})", none));
  EXPECT_FALSE(none.typed);
  EXPECT_EQ(none.tokens, 0);
  EXPECT_EQ(parse_admit(R"({"tenant":"t","tokens":{"audio":1}})", a)->str(),
            "tokens.audio: unknown field");
  EXPECT_EQ(parse_admit(R"({"tenant":"t","tokens":{"input":-3}})", a)->str(),
            "tokens.input: must be a non-negative integer");
  EXPECT_EQ(parse_admit(R"({"tenant":"t","tokens":-3})", a)->str(),
            "tokens: must be a non-negative integer");
}

// The weighted cost: Σ weight · count in millionths, rounded up to a whole token, exact.
TEST(TokenCost, WeighsExactlyAndRoundsUp) {
  const config::TokenWeights w{1'000'000, 4'000'000, 100'000, 4'000'000};
  EXPECT_EQ(weighted_tokens({100, 20, 1000, 7}, w, 1'000'000), 100 + 80 + 100 + 28);
  EXPECT_EQ(weighted_tokens({0, 0, 1, 0}, w, 1'000'000), 1);   // 0.1 rounds up
  EXPECT_EQ(weighted_tokens({0, 0, 10, 0}, w, 1'000'000), 1);  // exactly 1, not 2
  EXPECT_EQ(weighted_tokens({0, 0, 11, 0}, w, 1'000'000), 2);
  EXPECT_EQ(weighted_tokens({}, w, 1'000'000), 0);
  EXPECT_EQ(weighted_tokens({0, 250'001, 0, 0}, w, 1'000'000), std::nullopt);
  EXPECT_EQ(weighted_tokens({0, 250'000, 0, 0}, w, 1'000'000), 1'000'000);
  // The largest counts the API takes, at the largest weight: no overflow.
  const int64_t big = int64_t{1} << 50;
  const config::TokenWeights heavy{config::TokenWeights::kMax, config::TokenWeights::kMax,
                                   config::TokenWeights::kMax, config::TokenWeights::kMax};
  EXPECT_EQ(weighted_tokens({big, big, big, big}, heavy, INT64_MAX), 4 * 1000 * big);
  EXPECT_EQ(weighted_tokens({big, big, big, big}, heavy, 4 * 1000 * big - 1), std::nullopt);
  EXPECT_EQ(weighted_tokens({big, 0, 0, 0}, config::TokenWeights{}, INT64_MAX), big);
}

TEST(ParseSettle, AcceptsEngineGeneratedIdsOfLongTenants) {
  SettleRequest s;
  std::string rid = std::string(64, 't') + ".0123456789abcdef";
  ASSERT_FALSE(parse_settle(R"({"request_id":")" + rid + R"(","tokens":1})", s));
  EXPECT_EQ(s.request_id, rid);
  std::string bad = std::string(64, 't') + ".not-hex-at-all!";
  EXPECT_EQ(parse_settle(R"({"request_id":")" + bad + R"(","tokens":1})", s)->field, "request_id");
}

TEST(ParseRelease, RequiresRequestId) {
  ReleaseRequest r;
  ASSERT_FALSE(parse_release(R"({"tenant":"ws","request_id":"ws.1f"})", r));
  EXPECT_EQ(r.tenant, "ws");
  EXPECT_EQ(r.request_id, "ws.1f");
  EXPECT_EQ(parse_release("{}", r)->str(), "request_id: required");
  EXPECT_EQ(parse_release(R"({"request_id":"a/b"})", r)->str(),
            "request_id: must match [A-Za-z0-9._-]{1,64}");
}

std::string header(const Response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "<absent>";
}

TEST(Render, Allowed) {
  AdmitResult a;
  a.outcome = Outcome::kAllowed;
  a.request_id = "ws-acme.00ff";
  a.cls = "gold";
  a.remaining = {{"tenant", 3.0104999, 5, 5, 2}, {"quota", 700, 1000, 2592000, 86400}};
  auto r = render_admit(a);
  EXPECT_EQ(r.status, 200);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["allowed"], true);
  EXPECT_EQ(j["request_id"], "ws-acme.00ff");
  EXPECT_EQ(j["class"], "gold");
  EXPECT_DOUBLE_EQ(j["remaining"]["tenant"].get<double>(), 3.0105);
  EXPECT_TRUE(j["remaining"]["quota"].is_number_integer());
  EXPECT_EQ(j["remaining"]["quota"], 700);
  EXPECT_EQ(header(r, "Retry-After"), "<absent>");
  EXPECT_EQ(header(r, "RateLimit-Policy"),
            "\"tenant\";q=5;w=5, \"quota\";q=1000;qu=\"tokens\";w=2592000");
  EXPECT_EQ(header(r, "RateLimit"), "\"tenant\";r=3;t=2, \"quota\";r=700;t=86400");
}

// What a shadow gate would have refused and the brake's factor are headers of the shared
// builder, so the HTTP answer and the gRPC one (response_headers_to_add) both carry them.
TEST(Render, ShadowRefusalAndBrakeAreHeadersOfBothFronts) {
  AdmitResult a;
  a.outcome = Outcome::kAllowed;
  a.request_id = "ws-acme.00ff";
  a.remaining = {{"tenant", 0, 5, 5, 2}};
  auto plain = render_admit(a);
  EXPECT_EQ(header(plain, kShadowRefusedHeader), "<absent>");
  EXPECT_EQ(header(plain, kBrakeHeader), "<absent>");
  a.shadow_refused = "tenant";
  a.shadow_retry_ms = 1500;
  a.brake = 0.25;
  auto r = render_admit(a);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r, kShadowRefusedHeader), "tenant");
  EXPECT_EQ(header(r, kBrakeHeader), "0.25");
  EXPECT_EQ(header(r, "Retry-After"), "<absent>");  // admitted: nothing to wait for
  auto j = json::parse(r.body);
  EXPECT_EQ(j["shadow_refused"], "tenant");
  EXPECT_EQ(j["shadow_retry_after_ms"], 1500);
  // The headers of the answer are ratelimit_headers' (plus the HTTP-only flow tag).
  Headers shared = ratelimit_headers(a);
  EXPECT_EQ(shared, r.headers);
}

TEST(Render, RefusedCarriesRetryAfterRoundedUp) {
  AdmitResult a;
  a.outcome = Outcome::kRefused;
  a.gate = "tool";
  a.reason = "rate";
  a.retry_after_ms = 1001;
  a.remaining = {{"tool", 0.0132, 2, 4, 4}};
  auto r = render_admit(a);
  EXPECT_EQ(r.status, 429);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["allowed"], false);
  EXPECT_EQ(j["gate"], "tool");
  EXPECT_EQ(j["reason"], "rate");
  EXPECT_EQ(j["retry_after_ms"], 1001);
  EXPECT_DOUBLE_EQ(j["remaining"]["tool"].get<double>(), 0.0132);
  EXPECT_EQ(header(r, "Retry-After"), "2");
  EXPECT_EQ(header(r, "RateLimit-Policy"), "\"tool\";q=2;w=4");
  EXPECT_EQ(header(r, "RateLimit"), "\"tool\";r=0;t=4");
}

// A worker renders every admission into the Response it keeps: each answer must come out as a
// fresh render would, whatever the previous one left there (more headers, fewer, a longer body,
// an error).
TEST(Render, IntoAReusedResponseEqualsAFreshRender) {
  AdmitResult refused;
  refused.outcome = Outcome::kRefused;
  refused.gate = "tool";
  refused.reason = "rate";
  refused.retry_after_ms = 1001;
  refused.remaining = {{"tool", 0.0132, 2, 4, 4}, {"quota", 700, 1000, 2592000, 86400}};
  refused.degraded = "local";
  refused.brake = 0.5;
  AdmitResult allowed;
  allowed.outcome = Outcome::kAllowed;
  allowed.request_id = "ws-acme.00ff";
  allowed.remaining = {{"tenant", 3, 5, 5, 2}};
  AdmitResult bare = allowed;
  bare.remaining.clear();
  AdmitResult failed;
  failed.outcome = Outcome::kUnavailable;
  const int64_t now = 1796083200;
  Response kept;
  for (const AdmitResult* a : {&refused, &allowed, &refused, &bare, &failed, &allowed}) {
    for (const std::string& tag : {std::string("ft-7"), std::string()}) {
      render_admit(*a, tag, now, true, kept);
      Response fresh = render_admit(*a, tag, now);
      EXPECT_EQ(kept.status, fresh.status);
      EXPECT_EQ(kept.headers, fresh.headers);
      EXPECT_EQ(kept.body, fresh.body);
    }
  }
}

// Each refusal says what to do: back off, stop (with what is missing, when the quota resets and
// the plan's fallback), skip the tool, wait for a stream, settle.
TEST(Render, RefusalsCarryGuidanceByReason) {
  const int64_t now = 1796083200 - 3600;  // 2026-11-30T23:00:00Z, an hour before December
  auto advice = [&](AdmitResult a) {
    a.outcome = Outcome::kRefused;
    Response r = render_admit(a, {}, now);
    EXPECT_EQ(r.status, 429);
    return json::parse(r.body).at("guidance");
  };
  AdmitResult rate;
  rate.gate = "user";
  rate.reason = "rate";
  rate.retry_after_ms = 250;
  json g = advice(rate);
  EXPECT_EQ(g["action"], "backoff");
  EXPECT_EQ(g["retry"], true);
  EXPECT_EQ(g["backoff"], json::parse(R"({"initial_ms":250,"multiplier":2,"max_ms":60000,
                                           "jitter":"full"})"));
  EXPECT_EQ(g["message"],
            "The user rate limit is reached: wait 250 ms before retrying, then, if refused "
            "again, back off exponentially (doubling, full jitter, at most 60 s).");
  EXPECT_FALSE(g.contains("fallback_model"));

  AdmitResult quota;
  quota.gate = "quota";
  quota.reason = "quota";
  quota.tokens_missing = 1500;
  quota.degrade_model = "llama-8b";
  quota.upgrade_url = "https://example.com/upgrade";
  quota.remaining = {{"quota", 500, 100000, 2592000, 3600 - 7}};  // Redis 7 s ahead
  g = advice(quota);
  EXPECT_EQ(g["action"], "stop");
  EXPECT_EQ(g["retry"], false);
  EXPECT_FALSE(g.contains("backoff"));
  EXPECT_EQ(g["tokens_missing"], 1500);
  EXPECT_EQ(g["resets_at"], "2026-12-01T00:00:00Z");
  EXPECT_EQ(g["resets_in_s"], 3600);
  EXPECT_EQ(g["fallback_model"], "llama-8b");
  EXPECT_EQ(g["upgrade_url"], "https://example.com/upgrade");
  EXPECT_EQ(g["message"],
            "The plan's monthly LLM-token quota is spent: this request needs 1500 tokens more "
            "than are left, and retrying will not help before the quota resets at "
            "2026-12-01T00:00:00Z. Use model llama-8b instead. Upgrade the plan at "
            "https://example.com/upgrade.");

  AdmitResult tool;
  tool.gate = "tool";
  tool.reason = "rate";
  tool.retry_after_ms = 1200;
  g = advice(tool);
  EXPECT_EQ(g["action"], "skip_tool");
  EXPECT_EQ(g["retry"], true);
  EXPECT_NE(g["message"].get<std::string>().find("use another tool or go on without it"),
            std::string::npos);

  AdmitResult streams;
  streams.gate = "concurrency";
  streams.reason = "concurrency";
  streams.retry_after_ms = 30000;
  g = advice(streams);
  EXPECT_EQ(g["action"], "wait_for_stream");
  EXPECT_NE(g["message"].get<std::string>().find("in 30000 ms"), std::string::npos);

  AdmitResult open;
  open.gate = "reservations";
  open.reason = "reservations";
  g = advice(open);
  EXPECT_EQ(g["action"], "settle_open_requests");
  EXPECT_EQ(g["backoff"], nullptr);

  AdmitResult model = rate;
  model.gate = "model";
  model.degrade_model = "llama-8b";
  g = advice(model);
  EXPECT_EQ(g["fallback_model"], "llama-8b");
  EXPECT_NE(g["message"].get<std::string>().find("Or use model llama-8b."), std::string::npos);

  EXPECT_EQ(guidance::utc_iso8601(0), "1970-01-01T00:00:00Z");
}

TEST(Render, RetryAfterSeconds) {
  EXPECT_EQ(retry_after_seconds(0), 0);
  EXPECT_EQ(retry_after_seconds(1), 1);
  EXPECT_EQ(retry_after_seconds(999), 1);
  EXPECT_EQ(retry_after_seconds(1000), 1);
  EXPECT_EQ(retry_after_seconds(1001), 2);
  EXPECT_EQ(retry_after_seconds(-5), 0);
}

TEST(Render, ConcurrencyPolicyHasNoWindow) {
  std::vector<Remaining> rem = {{"concurrency", 49, 50, 0, 0}};
  EXPECT_EQ(ratelimit_policy_header(rem), "\"concurrency\";q=50;qu=\"concurrent-requests\"");
}

// The policy is written again whenever what it says changes (another plan, a reload, a brake,
// a month of another length), however often the same one came before.
TEST(Render, PolicyFollowsEveryChangeOfItsGates) {
  const std::vector<Remaining> plan = {{"tenant", 4, 5, 5, 1}, {"quota", 900, 1000, 2678400, 9}};
  const std::string text = "\"tenant\";q=5;w=5, \"quota\";q=1000;qu=\"tokens\";w=2678400";
  EXPECT_EQ(ratelimit_policy_header(plan), text);
  // Only the remaining values moved: the same policy.
  std::vector<Remaining> other = plan;
  other[0].value = 1;
  other[1].reset_s = 1;
  EXPECT_EQ(ratelimit_policy_header(other), text);
  other = plan;
  other[1].window_s = 2592000;  // a 30-day month
  EXPECT_EQ(ratelimit_policy_header(other),
            "\"tenant\";q=5;w=5, \"quota\";q=1000;qu=\"tokens\";w=2592000");
  other = plan;
  other[0].limit = 2.5;  // under a brake
  other[0].window_s = 2.5;
  EXPECT_EQ(ratelimit_policy_header(other),
            "\"tenant\";q=2;w=3, \"quota\";q=1000;qu=\"tokens\";w=2678400");
  other = plan;
  other[0].gate = "user";
  EXPECT_EQ(ratelimit_policy_header(other),
            "\"user\";q=5;w=5, \"quota\";q=1000;qu=\"tokens\";w=2678400");
  other.pop_back();
  EXPECT_EQ(ratelimit_policy_header(other), "\"user\";q=5;w=5");
  EXPECT_EQ(ratelimit_policy_header({}), "");
  EXPECT_EQ(ratelimit_policy_header(plan), text);
}

TEST(Render, ErrorsAndOtherOutcomes) {
  AdmitResult a;
  a.outcome = Outcome::kBadRequest;
  a.error = "tenant: unknown tenant";
  auto r = render_admit(a);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"], "tenant: unknown tenant");
  a.outcome = Outcome::kUnavailable;
  a.error = "redis: connection refused";
  EXPECT_EQ(render_admit(a).status, 503);
  a.outcome = Outcome::kConflict;
  EXPECT_EQ(render_admit(a).status, 409);

  SettleResult s;
  s.outcome = Outcome::kAllowed;
  s.settled = true;
  s.charged = 250;
  s.remaining = 750;
  s.detail = "settled";
  auto sr = render_settle(s);
  EXPECT_EQ(sr.status, 200);
  EXPECT_EQ(json::parse(sr.body),
            json::parse(R"({"settled":true,"charged":250,"remaining":750,"detail":"settled"})"));

  s.remaining = -1;  // the plan has no quota
  EXPECT_TRUE(json::parse(render_settle(s).body)["remaining"].is_null());

  ReleaseResult rel;
  rel.outcome = Outcome::kAllowed;
  rel.released = false;
  EXPECT_EQ(json::parse(render_release(rel).body), json::parse(R"({"released":false})"));
  rel.outcome = Outcome::kUnavailable;
  EXPECT_EQ(render_release(rel).status, 503);

  // A local reservation's charge during an outage says it was decided locally.
  ChargeResult c;
  c.outcome = Outcome::kAllowed;
  c.charged = 150;
  c.degraded = "local";
  Response cr = render_charge(c);
  EXPECT_EQ(cr.status, 200);
  EXPECT_EQ(header(cr, "Dripgate-Degraded"), "local");
  EXPECT_EQ(json::parse(cr.body)["charged"], 150);
  c.degraded.clear();
  EXPECT_EQ(header(render_charge(c), "Dripgate-Degraded"), "<absent>");
  EXPECT_EQ(json::parse(render_error(401, "missing bearer token").body)["error"],
            "missing bearer token");
}

}  // namespace
}  // namespace dripgate::control::api

namespace dripgate::control {
namespace {

// What the writer makes reads back as what was written, for every kind of value, and strings
// with quotes, backslashes, control characters and UTF-8 survive.
TEST(JsonWriter, WritesWhatAParserReadsBack) {
  std::string out;
  JsonWriter w(out);
  const std::string odd = "q\"b\\n\n\t\r\x01\x1f é";
  w.begin_object();
  w.key("s").string(odd).key("i").integer(-9007199254740993).key("d").number(19.5);
  w.key("tiny").number(1e-300).key("nan").number(std::nan("")).key("t").boolean(true);
  w.key("n").null().key("o").begin_object().key("x").integer(1).key("y").integer(2).end_object();
  w.key("after").begin_object().end_object();
  w.end_object();
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["s"], odd);
  EXPECT_EQ(j["i"].get<int64_t>(), -9007199254740993);
  EXPECT_EQ(j["d"].get<double>(), 19.5);
  EXPECT_EQ(j["tiny"].get<double>(), 1e-300);
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_EQ(j["t"], true);
  EXPECT_TRUE(j["n"].is_null());
  EXPECT_EQ(j["o"], nlohmann::json::parse(R"({"x":1,"y":2})"));
  EXPECT_TRUE(j["after"].is_object() && j["after"].empty());
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace dripgate::control

namespace dripgate::control::api {
namespace {

// GET /v1/admin/usage's body: each time in RFC 3339 and unix seconds, the projection null when
// the quota lasts its period.
TEST(Render, Usage) {
  usage::QuotaUsage lasts, runs_out;
  lasts.spec = {"tokens_per_month", "tokens", common::Period::kMonth, 1000, false, "p:"};
  lasts.span = {1796083200, 1798761600, "2026-12"};
  lasts.used = 320;
  lasts.rate_per_s = 0.5;
  runs_out = lasts;
  runs_out.spec.shadow = true;
  runs_out.used = 1200;
  runs_out.exhausts_at = 1796170000;
  const json j = json::parse(render_usage("ws-1", "pro", 1796169600, {lasts, runs_out}).body);
  EXPECT_EQ(j["tenant"], "ws-1");
  EXPECT_EQ(j["plan"], "pro");
  EXPECT_EQ(j["now"], "2026-12-02T00:00:00Z");
  EXPECT_EQ(j["now_unix"], 1796169600);
  ASSERT_EQ(j["quotas"].size(), 2u);
  const json& a = j["quotas"][0];
  EXPECT_EQ(a["quota"], "tokens_per_month");
  EXPECT_EQ(a["unit"], "tokens");
  EXPECT_EQ(a["period"], "month");
  EXPECT_EQ(a["period_label"], "2026-12");
  EXPECT_EQ(a["mode"], "enforce");
  EXPECT_EQ(a["used"], 320);
  EXPECT_EQ(a["limit"], 1000);
  EXPECT_EQ(a["remaining"], 680);
  EXPECT_EQ(a["period_start"], "2026-12-01T00:00:00Z");
  EXPECT_EQ(a["period_start_unix"], 1796083200);
  EXPECT_EQ(a["resets_at"], "2027-01-01T00:00:00Z");
  EXPECT_EQ(a["resets_at_unix"], 1798761600);
  EXPECT_EQ(a["rate_per_s"], 0.5);
  EXPECT_TRUE(a["projected_exhaustion"].is_null());
  EXPECT_TRUE(a["projected_exhaustion_unix"].is_null());
  const json& b = j["quotas"][1];
  EXPECT_EQ(b["mode"], "shadow");
  EXPECT_EQ(b["remaining"], 0);
  EXPECT_EQ(b["projected_exhaustion"], "2026-12-02T00:06:40Z");
  EXPECT_EQ(b["projected_exhaustion_unix"], 1796170000);
  // No quota: an empty list.
  EXPECT_EQ(json::parse(render_usage("ws-2", "free", 1796169600, {}).body)["quotas"],
            json::array());
}

}  // namespace
}  // namespace dripgate::control::api
