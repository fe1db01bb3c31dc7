// The config loader: exact messages and positions for every kind of error, all errors of a file
// reported together, the shipped examples, and a round trip of every field.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "config/test_class.h"

namespace dripgate::config {
namespace {

// Raw string literals start with a newline so the YAML can begin on its own line; drop it so
// line 1 of the text is the first line of YAML.
std::string Y(const char* text) {
  std::string s(text);
  if (!s.empty() && s.front() == '\n') s.erase(0, 1);
  return s;
}

std::vector<std::string> errors_of(const std::string& yaml) {
  LoadResult r = load_string(yaml, "t.yaml");
  EXPECT_EQ(r.config.has_value(), r.errors.empty());
  std::vector<std::string> out;
  for (const auto& e : r.errors) out.push_back(e.str());
  return out;
}

// The single error a snippet must produce.
std::string error_of(const std::string& yaml) {
  auto errs = errors_of(yaml);
  if (errs.size() != 1) {
    std::string all;
    for (const auto& e : errs) all += "\n  " + e;
    ADD_FAILURE() << "expected exactly one error, got " << errs.size() << ":" << all;
    return errs.empty() ? "" : errs[0];
  }
  return errs[0];
}

Config load_ok(const std::string& yaml) {
  LoadResult r = load_string(yaml, "t.yaml");
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  return r.config.value_or(Config{});
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kExamples = DRIPGATE_CONFIG_EXAMPLES;

// A dataplane section that is valid on its own, to put one mistake into.
const std::string kDp = Y(R"(
dataplane:
  classes:
    default: { weight: 1 }
)");

// ---------------------------------------------------------------------------------------------
// the shipped examples

TEST(Examples, DefaultIsEmbeddedVerbatimAndLoadsClean) {
  EXPECT_EQ(default_yaml(), read(kExamples + "/default.yaml"));
  LoadResult r = load_default();
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  ASSERT_TRUE(r.config);
  EXPECT_EQ(r.config->source, "<embedded default>");
  LoadResult f = load_file(kExamples + "/default.yaml");
  ASSERT_TRUE(f.config);
  EXPECT_EQ(f.config->source, kExamples + "/default.yaml");
  f.config->source = r.config->source;
  EXPECT_EQ(*f.config, *r.config);
}

TEST(Examples, DefaultHasItsDocumentedValues) {
  Config c = load_default().config.value();
  EXPECT_EQ(c.redis.url, "redis://127.0.0.1:6379/0");
  EXPECT_EQ(c.redis.host, "127.0.0.1");
  EXPECT_EQ(c.redis.port, 6379);
  EXPECT_EQ(c.redis.db, 0);
  EXPECT_EQ(c.redis.timeout_ms, 50);
  EXPECT_EQ(c.control.listen, "127.0.0.1:8080");

  const Plan& pro = c.plans.at("pro");
  EXPECT_EQ(pro.cls, "gold");
  EXPECT_EQ(pro.tenant, (Bucket{20, 5}));
  EXPECT_EQ(pro.user, (Bucket{6, 2}));
  EXPECT_EQ(pro.api_key, (Bucket{10, 5}));
  EXPECT_EQ(
      pro.quota,
      (Quota{{{common::Period::kDay, 200000}, {common::Period::kMonth, 1000000}}, 600, 100000}));
  EXPECT_EQ(pro.concurrency, (Concurrency{50, 120}));

  EXPECT_EQ(c.global_gates.tool.at("web_search"), (Bucket{2, 0.5}));
  EXPECT_EQ(c.global_gates.model.at("llama-70b"), (Bucket{200, 100}));
  // Warm-up is documented by example.
  EXPECT_EQ(c.plans.at("pro").tenant_tokens->warmup_s, 60);
  // A shadow gate is documented by example: it loads as one.
  EXPECT_EQ(c.global_gates.model.at("llama-405b").mode, GateMode::kShadow);

  ASSERT_TRUE(c.dataplane);
  const Dataplane& dp = *c.dataplane;
  EXPECT_EQ(dp.eal, (std::vector<std::string>{"-l", "0-1", "--no-huge", "--no-shconf", "-m", "512",
                                              "--no-pci", "--vdev=net_null0", "--vdev=net_null1"}));
  ASSERT_EQ(dp.classes.size(), 2u);
  EXPECT_EQ(dp.classes[0], (test_class("gold", 4, 10000, 0, 4096, 3000)));
  Class documented = test_class("default", 1, 2000, 0, 1024, 1000);
  documented.priority = 1;
  documented.tenant_depth = 256;
  documented.aqm = Aqm{5, 100, true};
  EXPECT_EQ(dp.classes[1], documented);
  ASSERT_EQ(dp.classify.size(), 2u);
  EXPECT_EQ(dp.classify[0].src, "10.1.0.0/16");
  EXPECT_EQ(dp.classify[0].cls, "gold");
  EXPECT_EQ(dp.classify[1].vlan, 100);
  EXPECT_EQ(dp.classify[1].cls, "gold");
  EXPECT_EQ(dp.unknown_flows, UnknownFlows::kDefault);
  EXPECT_EQ(dp.control_socket, "/run/dripgate/dataplane.sock");
}

TEST(Examples, WalkthroughHasOnlyItsOwnNumbers) {
  LoadResult r = load_file(kExamples + "/walkthrough.yaml");
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  ASSERT_TRUE(r.config);
  const Config& c = *r.config;
  EXPECT_EQ(c.plans.size(), 3u);
  const Plan& bucket = c.plans.at("walkthrough-bucket");
  EXPECT_EQ(bucket.tenant, (Bucket{5, 1}));
  EXPECT_FALSE(bucket.user || bucket.api_key || bucket.quota || bucket.concurrency);
  const Plan& quota = c.plans.at("walkthrough-quota");
  EXPECT_EQ(quota.quota->tokens_per_month(), 1000);
  EXPECT_FALSE(quota.tenant || quota.user || quota.api_key || quota.concurrency);
  const Plan& gates = c.plans.at("walkthrough-gates");
  EXPECT_EQ(gates.tenant, (Bucket{20, 5}));
  EXPECT_EQ(gates.user, (Bucket{6, 2}));
  EXPECT_FALSE(gates.api_key || gates.quota || gates.concurrency);
  // The tenants tools/dripgate-demo names, one per run.
  EXPECT_EQ(c.tenants.size(), 3u);
  EXPECT_EQ(c.tenants.at("ws-acme").plan, "walkthrough-bucket");
  EXPECT_EQ(c.tenants.at("ws-quota").plan, "walkthrough-quota");
  EXPECT_EQ(c.tenants.at("ws-gates").plan, "walkthrough-gates");
  EXPECT_EQ(c.global_gates.tool.at("web_search"), (Bucket{2, 0.5}));
  EXPECT_TRUE(c.global_gates.model.empty());
  EXPECT_FALSE(c.dataplane);
}

TEST(Examples, DataplaneVethLoadsClean) {
  LoadResult r = load_file(kExamples + "/dataplane-veth.yaml");
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  ASSERT_TRUE(r.config && r.config->dataplane);
  const Dataplane& dp = *r.config->dataplane;
  bool af_packet = false;
  for (const auto& a : dp.eal) af_packet |= a.rfind("--vdev=net_af_packet0,iface=veth-c", 0) == 0;
  EXPECT_TRUE(af_packet);
  EXPECT_EQ(dp.classes.size(), 3u);
  EXPECT_EQ(dp.classify.size(), 4u);
}

// The production layout: the dataplane reads it without the control's credentials; the control
// reads the secret files it names.
TEST(Examples, ApplianceLoadsWithItsSecretsOrWithout) {
  LoadResult r = load_file(kExamples + "/appliance.yaml", Secrets::kSkip);
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  ASSERT_TRUE(r.config && r.config->dataplane);
  EXPECT_EQ(r.config->redis.user, "dripgate");
  EXPECT_EQ(r.config->redis.password, "");
  EXPECT_EQ(r.config->redis.password_file,
            "/run/credentials/dripgate-control.service/redis-password");
  EXPECT_EQ(r.config->dataplane->drip_lcore, 3u);
  // Read as dripgate-control reads it, each missing credential is an error at its key.
  std::vector<std::string> errs;
  for (const auto& e : load_file(kExamples + "/appliance.yaml").errors) errs.push_back(e.str());
  ASSERT_EQ(errs.size(), 2u);
  EXPECT_NE(errs[0].find("redis.password_file: '/run/credentials/dripgate-control.service/"
                         "redis-password': cannot open"),
            std::string::npos)
      << errs[0];
  EXPECT_NE(errs[1].find("control.auth_token_file: '/run/credentials/dripgate-control.service/"
                         "auth-token': cannot open"),
            std::string::npos)
      << errs[1];
}

// ---------------------------------------------------------------------------------------------
// each kind of error: exact message, line and column

TEST(Errors, UnknownKeysNameTheAllowedOnes) {
  EXPECT_EQ(error_of("redis: { url: \"redis://h:1\", timeout: 5 }\n"),
            "t.yaml:1:30: redis.timeout: unknown key 'timeout' (allowed: url, password_file, "
            "password_env, timeout_ms, pool_size, cluster, user, on_failure, local_share, "
            "journal, journal_fsync, journal_max_mb, journal_full, breaker)");
  EXPECT_EQ(error_of("plan: {}\n"),
            "t.yaml:1:1: plan: unknown key 'plan' (allowed: redis, control, plans, tenants, "
            "global_gates, dataplane)");
  EXPECT_EQ(error_of(Y(R"(
plans:
  pro:
    gates:
      tenant: { capacity: 1, refill_per_s: 1, burst: 2 }
)")),
            "t.yaml:4:47: plans.pro.gates.tenant.burst: unknown key 'burst' (allowed: capacity, "
            "refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
  EXPECT_EQ(error_of("plans: { pro: { gates: { tool: {} } } }\n"),
            "t.yaml:1:26: plans.pro.gates.tool: unknown key 'tool' (allowed: tenant, user, "
            "api_key, ip, tenant_tokens, user_tokens, api_key_tokens)");
  EXPECT_EQ(error_of("control: { listen: \"127.0.0.1:1\", https: true }\n"),
            "t.yaml:1:35: control.https: unknown key 'https' (allowed: listen, threads, "
            "auth_token, auth_token_file, auth_token_env, admin_token, admin_token_file, "
            "admin_token_env, dataplane_socket, max_connections, request_timeout_s, decision_log, "
            "grpc_listen, grpc_max_inflight, rls, queue, tls, grpc_tls, status, auth, "
            "metrics_token, metrics_token_file, metrics_token_env, openai_headers)");
}

// A plan's degrade: a model id and/or an http(s) URL, at least one of them.
TEST(Errors, Degrade) {
  Config c = load_ok(
      "plans: { pro: { degrade: { model: llama-8b, upgrade_url: \"https://x.example/up?p=1\" } } "
      "}\n");
  EXPECT_EQ(c.plans.at("pro").degrade, (Degrade{"llama-8b", "https://x.example/up?p=1"}));
  EXPECT_EQ(load_ok("plans: { pro: { degrade: { model: m } } }\n").plans.at("pro").degrade,
            (Degrade{"m", ""}));
  EXPECT_EQ(error_of("plans: { pro: { degrade: {} } }\n"),
            "t.yaml:1:26: plans.pro.degrade: needs model, upgrade_url or both");
  EXPECT_EQ(error_of("plans: { pro: { degrade: { model: \"a b\" } } }\n"),
            "t.yaml:1:35: plans.pro.degrade.model: 'a b' is not a valid id (1 to 64 of A-Z a-z 0-9 "
            ". _ -)");
  EXPECT_EQ(error_of("plans: { pro: { degrade: { upgrade_url: \"ftp://x\" } } }\n"),
            "t.yaml:1:41: plans.pro.degrade.upgrade_url: expected an http:// or https:// URL "
            "(printable, no spaces or quotes, at most 2048 bytes)");
  EXPECT_EQ(error_of("plans: { pro: { degrade: { upgrade_url: \"https://x/a b\" } } }\n"),
            "t.yaml:1:41: plans.pro.degrade.upgrade_url: expected an http:// or https:// URL "
            "(printable, no spaces or quotes, at most 2048 bytes)");
  EXPECT_EQ(error_of("plans: { pro: { degrade: { upgrade_url: \"https:///x\" } } }\n"),
            "t.yaml:1:41: plans.pro.degrade.upgrade_url: expected an http:// or https:// URL "
            "(printable, no spaces or quotes, at most 2048 bytes)");
}

// A plan's waiting room and the daemon's bounds on it.
TEST(Errors, Queue) {
  Config c = load_ok(
      "plans: { pro: { queue: { max_wait_ms: 2000, priority: 1 } }, free: {} }\n"
      "control: { queue: { max_waiters: 500, max_waiters_per_tenant: 20 } }\n");
  EXPECT_EQ(c.plans.at("pro").queue, (PlanQueue{2000, 1}));
  EXPECT_FALSE(c.plans.at("free").queue);
  EXPECT_EQ(c.control.queue, (Control::Queue{500, 20}));
  EXPECT_EQ(load_ok("plans: { pro: { queue: { max_wait_ms: 0 } } }\n").plans.at("pro").queue,
            (PlanQueue{0, 0}));
  EXPECT_EQ(error_of("plans: { pro: { queue: { priority: 1 } } }\n"),
            "t.yaml:1:24: plans.pro.queue.max_wait_ms: required field is missing");
  EXPECT_EQ(error_of("plans: { pro: { queue: { max_wait_ms: 300001 } } }\n"),
            "t.yaml:1:39: plans.pro.queue.max_wait_ms: must be between 0 and 300000, got 300001");
  EXPECT_EQ(error_of("plans: { pro: { queue: { max_wait_ms: 10, priority: 8 } } }\n"),
            "t.yaml:1:53: plans.pro.queue.priority: must be between 0 and 7, got 8");
  EXPECT_EQ(error_of("control: { queue: { max_waiters: -1 } }\n"),
            "t.yaml:1:34: control.queue.max_waiters: must be between 0 and 10000000, got -1");
  EXPECT_EQ(error_of("control: { queue: { wait: 1 } }\n"),
            "t.yaml:1:21: control.queue.wait: unknown key 'wait' (allowed: max_waiters, "
            "max_waiters_per_tenant)");
}

// quota_timezone: a zone of the system's tz database, UTC by default; written back, read equal.
TEST(Errors, QuotaTimezone) {
  Config c = load_ok("plans: { de: { quota_timezone: Europe/Berlin }, free: {} }\n");
  EXPECT_EQ(c.plans.at("de").quota_timezone, "Europe/Berlin");
  EXPECT_EQ(c.plans.at("free").quota_timezone, "UTC");
  EXPECT_EQ(load_ok(to_yaml(c)), c);
  EXPECT_EQ(error_of("plans: { p: { quota_timezone: Mars/Olympus_Mons } }"),
            "t.yaml:1:31: plans.p.quota_timezone: unknown time zone 'Mars/Olympus_Mons' (not in "
            "the system's tz database)");
  EXPECT_EQ(error_of("plans: { p: { quota_timezone: \"\" } }"),
            "t.yaml:1:31: plans.p.quota_timezone: unknown time zone '' (not in the system's tz "
            "database)");
}

// Several quotas a plan, one per period, shortest period first whatever the order written; the
// month's alone as before; written back, read equal. A period the loader does not know is an
// unknown key, a bad limit is named, and a plan with a bad one has no quota at all.
TEST(Errors, QuotaPeriods) {
  Config c = load_ok(
      "plans:\n"
      "  multi: { quota: { tokens_per_month: 3000000, tokens_per_minute: 5000,\n"
      "                    tokens_per_day: 200000, tokens_per_week: 900000,\n"
      "                    tokens_per_hour: 20000 } }\n"
      "  monthly: { quota: { tokens_per_month: 1000 } }\n");
  const Quota& q = *c.plans.at("multi").quota;
  using common::Period;
  EXPECT_EQ(q.limits, (std::vector<QuotaLimit>{{Period::kMinute, 5000},
                                               {Period::kHour, 20000},
                                               {Period::kDay, 200000},
                                               {Period::kWeek, 900000},
                                               {Period::kMonth, 3000000}}));
  EXPECT_EQ(q.tokens_per_month(), 3000000);
  EXPECT_EQ(c.plans.at("monthly").quota->limits, (std::vector<QuotaLimit>{{Period::kMonth, 1000}}));
  EXPECT_EQ(load_ok(to_yaml(c)), c);
  Config d = load_ok("plans: { daily: { quota: { tokens_per_day: 7 } } }\n");
  EXPECT_EQ(d.plans.at("daily").quota->tokens_per_month(), std::nullopt);
  EXPECT_EQ(quota_gate(Period::kDay), "quota_day");
  EXPECT_EQ(quota_gate(Period::kMonth), "quota");
  EXPECT_TRUE(is_quota_gate("quota_minute") && is_quota_gate("quota") && !is_quota_gate("tenant"));
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_fortnight: 5, tokens_per_month: 9 } } }"),
            "t.yaml:1:24: plans.p.quota.tokens_per_fortnight: unknown key 'tokens_per_fortnight' "
            "(allowed: tokens_per_minute, tokens_per_hour, tokens_per_day, tokens_per_week, "
            "tokens_per_month, reservation_ttl_s, max_open_reservations, mode)");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_day: -1, tokens_per_month: 5 } } }"),
            "t.yaml:1:40: plans.p.quota.tokens_per_day: must be >= 1, got -1");
}

// Token weights: exact millionths from the text, 1 for a type left out; each bad value named.
TEST(Errors, Weights) {
  Config c = load_ok(
      "plans: { pro: { weights: { input: 1, output: 4, cached_input: 0.1, "
      "reasoning: 3.000001 } }, free: {} }\n");
  EXPECT_EQ(c.plans.at("pro").weights, (TokenWeights{1'000'000, 4'000'000, 100'000, 3'000'001}));
  EXPECT_EQ(c.plans.at("free").weights, TokenWeights{});
  EXPECT_EQ(load_ok("plans: { p: { weights: { output: 0 } } }").plans.at("p").weights,
            (TokenWeights{1'000'000, 0, 1'000'000, 1'000'000}));
  EXPECT_EQ(error_of("plans: { p: { weights: { images: 2 } } }"),
            "t.yaml:1:26: plans.p.weights.images: unknown key 'images' (allowed: input, output, "
            "cached_input, reasoning)");
  EXPECT_EQ(error_of("plans: { p: { weights: { input: -1 } } }"),
            "t.yaml:1:33: plans.p.weights.input: expected a number >= 0 with at most 6 decimals, "
            "got -1");
  EXPECT_EQ(error_of("plans: { p: { weights: { output: 0.0000001 } } }"),
            "t.yaml:1:34: plans.p.weights.output: expected a number >= 0 with at most 6 "
            "decimals, got 0.0000001");
  EXPECT_EQ(error_of("plans: { p: { weights: { output: \"4\" } } }"),
            "t.yaml:1:34: plans.p.weights.output: expected a number >= 0 with at most 6 "
            "decimals, got 4");
  EXPECT_EQ(error_of("plans: { p: { weights: { output: 1000.5 } } }"),
            "t.yaml:1:34: plans.p.weights.output: must be <= 1000, got 1000.5");
  EXPECT_EQ(error_of("plans: { p: { weights: { output: 99999999999999999999 } } }"),
            "t.yaml:1:34: plans.p.weights.output: must be <= 1000, got 99999999999999999999");
  EXPECT_EQ(error_of("plans: { p: { weights: 2 } }"),
            "t.yaml:1:24: plans.p.weights: expected a mapping, got '2'");
}

TEST(Errors, WrongTypes) {
  EXPECT_EQ(error_of("plans: [pro]\n"), "t.yaml:1:8: plans: expected a mapping, got a list");
  EXPECT_EQ(error_of("plans: { pro: { gates: { tenant: { capacity: abc, refill_per_s: 1 } } } }"),
            "t.yaml:1:46: plans.pro.gates.tenant.capacity: expected a number, got 'abc'");
  EXPECT_EQ(error_of("plans: { pro: { gates: { tenant: { capacity: \"5\", refill_per_s: 1 } } } }"),
            "t.yaml:1:46: plans.pro.gates.tenant.capacity: expected a number, got the string '5'");
  EXPECT_EQ(error_of("plans: { pro: { quota: { tokens_per_month: 1.5 } } }"),
            "t.yaml:1:44: plans.pro.quota.tokens_per_month: expected an integer, got '1.5'");
  EXPECT_EQ(error_of("plans: { pro: { quota: { tokens_per_month: [1] } } }"),
            "t.yaml:1:44: plans.pro.quota.tokens_per_month: expected an integer, got a list");
  EXPECT_EQ(error_of("redis: { url: { host: x } }"),
            "t.yaml:1:15: redis.url: expected a string, got a mapping");
  EXPECT_EQ(error_of("redis: { timeout_ms: .nan }"),
            "t.yaml:1:22: redis.timeout_ms: expected an integer, got '.nan'");
  EXPECT_EQ(error_of("plans: { p: { gates: { user: { capacity: .inf, refill_per_s: 1 } } } }"),
            "t.yaml:1:42: plans.p.gates.user.capacity: expected a number, got '.inf'");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_month: 99999999999999999999 } } }"),
            "t.yaml:1:42: plans.p.quota.tokens_per_month: integer out of range: "
            "99999999999999999999");
  EXPECT_EQ(error_of("tenants: { ws-a: pro }\n"),
            "t.yaml:1:18: tenants.ws-a: expected a mapping, got 'pro'");
  EXPECT_EQ(error_of("redis: 5\n"), "t.yaml:1:8: redis: expected a mapping, got '5'");
  EXPECT_EQ(error_of("- a\n- b\n"), "t.yaml:1:1: expected a mapping, got a list");
}

TEST(Errors, MissingRequiredFieldsPointAtTheirMapping) {
  EXPECT_EQ(error_of(Y(R"(
plans:
  pro:
    gates:
      user: { capacity: 6 }
)")),
            "t.yaml:4:13: plans.pro.gates.user.refill_per_s: required field is missing");
  // An empty value is reported at its key, not at the next line where yaml-cpp puts it.
  EXPECT_EQ(errors_of(Y(R"(
plans:
  pro:
    gates:
      user:
tenants:
  ws-a: {}
)")),
            (std::vector<std::string>{
                "t.yaml:4:7: plans.pro.gates.user.capacity: required field is missing",
                "t.yaml:4:7: plans.pro.gates.user.refill_per_s: required field is missing",
                "t.yaml:6:9: tenants.ws-a.plan: required field is missing",
            }));
  EXPECT_EQ(error_of("plans: { p: { quota: { reservation_ttl_s: 5 } } }"),
            "t.yaml:1:22: plans.p.quota: needs at least one of tokens_per_minute, "
            "tokens_per_hour, tokens_per_day, tokens_per_week, tokens_per_month");
  EXPECT_EQ(error_of("plans: { p: { concurrency: { lease_s: 5 } } }"),
            "t.yaml:1:28: plans.p.concurrency.max_streams: required field is missing");
  EXPECT_EQ(error_of("global_gates: { tool: { web_search: { refill_per_s: 1 } } }"),
            "t.yaml:1:37: global_gates.tool.web_search.capacity: required field is missing");
}

TEST(Errors, ZeroAndNegativeRatesAndCapacities) {
  auto bucket = [](const char* cap, const char* refill) {
    return error_of(std::string("plans: { p: { gates: { tenant: { capacity: ") + cap +
                    ", refill_per_s: " + refill + " } } } }");
  };
  EXPECT_EQ(bucket("0", "1"),
            "t.yaml:1:44: plans.p.gates.tenant.capacity: must be >= 1, got 0 (a request costs 1 "
            "token)");
  EXPECT_EQ(bucket("-3", "1"),
            "t.yaml:1:44: plans.p.gates.tenant.capacity: must be >= 1, got -3 (a request costs 1 "
            "token)");
  EXPECT_EQ(bucket("0.5", "1"),
            "t.yaml:1:44: plans.p.gates.tenant.capacity: must be >= 1, got 0.5 (a request costs 1 "
            "token)");
  EXPECT_EQ(bucket("5", "0"), "t.yaml:1:61: plans.p.gates.tenant.refill_per_s: must be > 0, got 0");
  EXPECT_EQ(bucket("5", "-0.5"),
            "t.yaml:1:61: plans.p.gates.tenant.refill_per_s: must be > 0, got -0.5");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_month: 0 } } }"),
            "t.yaml:1:42: plans.p.quota.tokens_per_month: must be >= 1, got 0");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_month: 5, reservation_ttl_s: 0 } } }"),
            "t.yaml:1:64: plans.p.quota.reservation_ttl_s: must be between 1 and 2419200, got 0");
  // At most 28 days: a reservation's quota month is then among those the gateway declares.
  EXPECT_EQ(
      error_of("plans: { p: { quota: { tokens_per_month: 5, reservation_ttl_s: 2419201 } } }"),
      "t.yaml:1:64: plans.p.quota.reservation_ttl_s: must be between 1 and 2419200, got 2419201");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_month: 5, max_open_reservations: 0 } } }"),
            "t.yaml:1:68: plans.p.quota.max_open_reservations: must be >= 1, got 0");
  EXPECT_EQ(error_of("plans: { p: { concurrency: { max_streams: -1 } } }"),
            "t.yaml:1:43: plans.p.concurrency.max_streams: must be >= 1, got -1");
  EXPECT_EQ(error_of("plans: { p: { concurrency: { max_streams: 1, lease_s: 0 } } }"),
            "t.yaml:1:55: plans.p.concurrency.lease_s: must be >= 1, got 0");
  EXPECT_EQ(error_of("redis: { timeout_ms: 0 }"),
            "t.yaml:1:22: redis.timeout_ms: must be >= 1, got 0");
  EXPECT_EQ(error_of("redis: { pool_size: 0 }"),
            "t.yaml:1:21: redis.pool_size: must be >= 1, got 0");
  EXPECT_EQ(error_of("redis: { timeout_ms: 3000000000 }"),
            "t.yaml:1:22: redis.timeout_ms: must be <= 2147483647, got 3000000000");
  EXPECT_EQ(error_of("control: { threads: 0 }"),
            "t.yaml:1:21: control.threads: must be between 1 and 1024, got 0");
  EXPECT_EQ(error_of("control: { max_connections: 0 }"),
            "t.yaml:1:29: control.max_connections: must be between 1 and 1000000, got 0");
  EXPECT_EQ(error_of("control: { request_timeout_s: 7200 }"),
            "t.yaml:1:31: control.request_timeout_s: must be between 1 and 3600, got 7200");
  EXPECT_EQ(error_of("global_gates: { model: { m: { capacity: 5, refill_per_s: 0 } } }"),
            "t.yaml:1:58: global_gates.model.m.refill_per_s: must be > 0, got 0");
}

// warmup_s: seconds, 0 (no warm-up) up to a day, on every kind of bucket; each bad value is an
// error naming file, line, column and field.
TEST(Errors, WarmupIsSecondsUpToADay) {
  auto plan = [](const char* gate, const char* warmup) {
    return error_of(std::string("plans: { p: { gates: { ") + gate +
                    ": { capacity: 5, refill_per_s: 1, warmup_s: " + warmup + " } } } }");
  };
  EXPECT_EQ(plan("tenant", "-1"),
            "t.yaml:1:74: plans.p.gates.tenant.warmup_s: must be >= 0, got -1 (0 is no warm-up)");
  EXPECT_EQ(plan("user_tokens", "86400.5"),
            "t.yaml:1:79: plans.p.gates.user_tokens.warmup_s: must be <= 86400, got 86400.5 (a "
            "day)");
  EXPECT_EQ(plan("ip", "abc"),
            "t.yaml:1:70: plans.p.gates.ip.warmup_s: expected a number, got 'abc'");
  EXPECT_EQ(plan("api_key", "\"60\""),
            "t.yaml:1:75: plans.p.gates.api_key.warmup_s: expected a number, got the string '60'");
  EXPECT_EQ(plan("tenant", "[60]"),
            "t.yaml:1:74: plans.p.gates.tenant.warmup_s: expected a number, got a list");
  EXPECT_EQ(error_of("global_gates: { model_tokens: { m: { capacity: 5, refill_per_s: 1, "
                     "warmup_s: 1e6 } } }"),
            "t.yaml:1:78: global_gates.model_tokens.m.warmup_s: must be <= 86400, got 1e6 (a "
            "day)");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 5, refill_per_s: 1, warmup_s: .nan } }"),
            "t.yaml:1:66: global_gates.total.warmup_s: expected a number, got '.nan'");
  // In range, and 0: none.
  Config c = load_ok(
      "plans: { p: { gates: { tenant: { capacity: 5, refill_per_s: 1, warmup_s: 86400 }, user: { "
      "capacity: 5, refill_per_s: 1, warmup_s: 0 } } } }");
  EXPECT_EQ(c.plans.at("p").tenant->warmup_s, 86400);
  EXPECT_EQ(c.plans.at("p").user->warmup_s, 0);
}

// saturation: on global model and model_tokens gates only; url, metric and target required,
// the rest defaulted; every bad value an error naming file, line, column and field; it
// survives to_yaml.
TEST(Saturation, ModelGatesFollowTheirBackends) {
  Config c = load_ok(Y(R"(
global_gates:
  model:
    llama:
      capacity: 20
      refill_per_s: 10
      saturation:
        url: http://10.0.0.5:8000/metrics
        metric: 'vllm:num_requests_waiting{model_name="llama"}'
        target: 8
  model_tokens:
    llama:
      capacity: 90000
      refill_per_s: 900
      saturation: { url: "http://vllm:8000/metrics", metric: "vllm:gpu_cache_usage_perc",
                    aggregate: sum, target: 0.9, min_share: 0.05, max_share: 1.5,
                    increase: 0.1, decrease: 0.5, interval_ms: 250, timeout_ms: 200,
                    failures: 5 }
)"));
  const Saturation& m = *c.global_gates.model.at("llama").saturation;
  EXPECT_EQ(m, (Saturation{"http://10.0.0.5:8000/metrics",
                           "vllm:num_requests_waiting{model_name=\"llama\"}",
                           common::PromAggregate::kMax, 8, 0.1, 1, 0.05, 0.7, 1000, 1000, 3}));
  EXPECT_EQ(*c.global_gates.model_tokens.at("llama").saturation,
            (Saturation{"http://vllm:8000/metrics", "vllm:gpu_cache_usage_perc",
                        common::PromAggregate::kSum, 0.9, 0.05, 1.5, 0.1, 0.5, 250, 200, 5}));
  // The timeout defaults to the interval when that is shorter than a second.
  Config d = load_ok(
      "global_gates: { model: { m: { capacity: 20, refill_per_s: 1, saturation: { url: "
      "'http://h/', metric: m, target: 1, interval_ms: 300 } } } }");
  EXPECT_EQ(d.global_gates.model.at("m").saturation->timeout_ms, 300);
  LoadResult back = load_string(to_yaml(c), "back.yaml");
  ASSERT_TRUE(back.config) << (back.errors.empty() ? "" : back.errors[0].str());
  EXPECT_EQ(back.config->global_gates, c.global_gates);
}

// The status page's metrics endpoints: http:// URLs, checked as a saturation URL is.
TEST(StatusPage, MetricsUrlsAreChecked) {
  const Config c = load_ok(
      "control: { status: { dataplane_metrics_url: 'http://127.0.0.1:9101/metrics', "
      "iat_metrics_url: 'http://[::1]:9102/metrics' } }");
  EXPECT_EQ(c.control.status.dataplane_metrics_url, "http://127.0.0.1:9101/metrics");
  EXPECT_EQ(c.control.status.iat_metrics_url, "http://[::1]:9102/metrics");
  EXPECT_EQ(load_ok("control: {}").control.status, Control::Status{});
  EXPECT_EQ(error_of("control: { status: { dataplane_metrics_url: 'https://h/m' } }"),
            "t.yaml:1:45: control.status.dataplane_metrics_url: https is not supported: the "
            "endpoint is scraped over plain http://");
  EXPECT_EQ(error_of("control: {\n  status: { iat_metrics_url: 'http://h:x/m' } }"),
            "t.yaml:2:30: control.status.iat_metrics_url: bad port 'x' (0 to 65535)");
  EXPECT_EQ(error_of("control: { status: { iat_metrics_url: 7 } }"),
            "t.yaml:1:39: control.status.iat_metrics_url: expected http://host[:port][/path]");
  EXPECT_EQ(error_of("control: { status: { url: 'http://h/' } }"),
            "t.yaml:1:22: control.status.url: unknown key 'url' (allowed: dataplane_metrics_url, "
            "iat_metrics_url)");
}

TEST(Saturation, BadValuesAreNamed) {
  auto model = [](const std::string& sat) {
    return error_of("global_gates: { model: { m: { capacity: 20, refill_per_s: 1, saturation: { " +
                    sat + " } } } }");
  };
  const std::string ok = "url: 'http://h:9/m', metric: m, target: 1";
  EXPECT_EQ(model("metric: m, target: 1"),
            "t.yaml:1:74: global_gates.model.m.saturation.url: required field is missing");
  EXPECT_EQ(model("url: 'https://h/m', metric: m, target: 1"),
            "t.yaml:1:81: global_gates.model.m.saturation.url: https is not supported: the "
            "endpoint is scraped over plain http://");
  EXPECT_EQ(model("url: 'http://h:x/m', metric: m, target: 1"),
            "t.yaml:1:81: global_gates.model.m.saturation.url: bad port 'x' (0 to 65535)");
  EXPECT_EQ(model("url: 'http://h/', metric: 'm{a=1}', target: 1"),
            "t.yaml:1:102: global_gates.model.m.saturation.metric: expected '\"' to open a label "
            "value");
  EXPECT_EQ(model("url: 'http://h/', metric: m"),
            "t.yaml:1:74: global_gates.model.m.saturation.target: required field is missing");
  EXPECT_EQ(model("url: 'http://h/', metric: m, target: -1"),
            "t.yaml:1:113: global_gates.model.m.saturation.target: must be >= 0, got -1");
  EXPECT_EQ(model(ok + ", aggregate: avg"),
            "t.yaml:1:130: global_gates.model.m.saturation.aggregate: expected max or sum, got "
            "'avg'");
  EXPECT_EQ(model(ok + ", min_share: 0"),
            "t.yaml:1:130: global_gates.model.m.saturation.min_share: must be > 0, got 0");
  EXPECT_EQ(model(ok + ", min_share: 1.5"),
            "t.yaml:1:130: global_gates.model.m.saturation.min_share: must be <= 1, got 1.5 (the "
            "configured rate)");
  EXPECT_EQ(model(ok + ", max_share: 11"),
            "t.yaml:1:130: global_gates.model.m.saturation.max_share: must be <= 10, got 11 (ten "
            "times the configured rate)");
  EXPECT_EQ(model(ok + ", min_share: 0.5, max_share: 0.25"),
            "t.yaml:1:146: global_gates.model.m.saturation.max_share: must be >= min_share (0.5)");
  EXPECT_EQ(model(ok + ", decrease: 1"),
            "t.yaml:1:129: global_gates.model.m.saturation.decrease: must be < 1 (the factor the "
            "share is multiplied by), got 1");
  EXPECT_EQ(model(ok + ", increase: 0"),
            "t.yaml:1:129: global_gates.model.m.saturation.increase: must be > 0, got 0");
  EXPECT_EQ(model(ok + ", interval_ms: 50"),
            "t.yaml:1:132: global_gates.model.m.saturation.interval_ms: must be between 100 and "
            "3600000, got 50");
  EXPECT_EQ(model(ok + ", interval_ms: 500, timeout_ms: 600"),
            "t.yaml:1:149: global_gates.model.m.saturation.timeout_ms: must be <= interval_ms "
            "(500)");
  EXPECT_EQ(model(ok + ", failures: 0"),
            "t.yaml:1:129: global_gates.model.m.saturation.failures: must be between 1 and 1000, "
            "got 0");
  EXPECT_EQ(model(ok + ", every: 1"),
            "t.yaml:1:119: global_gates.model.m.saturation.every: unknown key 'every' (allowed: "
            "url, metric, aggregate, target, min_share, max_share, increase, decrease, "
            "interval_ms, timeout_ms, failures)");
  // A floor that would refuse every request of a model gate; a token-rate gate has none.
  EXPECT_EQ(model(ok + ", min_share: 0.01"),
            "t.yaml:1:130: global_gates.model.m.saturation.min_share: min_share x capacity is "
            "0.2: below 1, the floor would refuse every request");
  EXPECT_EQ(error_of("global_gates: { model: { m: { algorithm: sliding_window, limit: 5, "
                     "window_s: 1, saturation: { " +
                     ok + " } } } }"),
            "t.yaml:1:93: global_gates.model.m.saturation.min_share: min_share x limit is 0: "
            "below 1, the floor would refuse every request");
  load_ok("global_gates: { model_tokens: { m: { capacity: 5, refill_per_s: 1, saturation: { " + ok +
          ", min_share: 0.01 } } } }");
}

TEST(Saturation, OnlyOnGlobalModelGates) {
  const std::string sat = "saturation: { url: 'http://h/', metric: m, target: 1 }";
  EXPECT_EQ(
      error_of("global_gates: { tool: { t: { capacity: 5, refill_per_s: 1, " + sat + " } } }"),
      "t.yaml:1:60: global_gates.tool.t.saturation: unknown key 'saturation' (allowed: "
      "capacity, refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 5, refill_per_s: 1, " + sat + " } }"),
            "t.yaml:1:56: global_gates.total.saturation: unknown key 'saturation' (allowed: "
            "capacity, refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
  EXPECT_EQ(error_of("plans: { p: { gates: { tenant: { capacity: 5, refill_per_s: 1, " + sat +
                     " } } } }"),
            "t.yaml:1:64: plans.p.gates.tenant.saturation: unknown key 'saturation' (allowed: "
            "capacity, refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
}

// The ip gate (per plan) and the total gate (global) are buckets like the others, checked alike.
TEST(Errors, IpAndTotalGatesAreCheckedLikeEveryBucket) {
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { capacity: 0, refill_per_s: 1 } } } }"),
            "t.yaml:1:40: plans.p.gates.ip.capacity: must be >= 1, got 0 (a request costs 1 "
            "token)");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { capacity: 5, refill_per_s: -1 } } } }"),
            "t.yaml:1:57: plans.p.gates.ip.refill_per_s: must be > 0, got -1");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { capacity: 5 } } } }"),
            "t.yaml:1:28: plans.p.gates.ip.refill_per_s: required field is missing");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: 5 } } }"),
            "t.yaml:1:28: plans.p.gates.ip: expected a mapping, got '5'");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 0.5, refill_per_s: 1 } }"),
            "t.yaml:1:36: global_gates.total.capacity: must be >= 1, got 0.5 (a request costs 1 "
            "token)");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 5, refill_per_s: 0 } }"),
            "t.yaml:1:53: global_gates.total.refill_per_s: must be > 0, got 0");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 5, refill_per_s: 1, per: ip } }"),
            "t.yaml:1:56: global_gates.total.per: unknown key 'per' (allowed: capacity, "
            "refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
  EXPECT_EQ(error_of("global_gates: { totals: {} }"),
            "t.yaml:1:17: global_gates.totals: unknown key 'totals' (allowed: tool, model, "
            "model_tokens, total, ip)");
  EXPECT_FALSE(load_ok("plans: { p: {} }").plans.at("p").ip);
  EXPECT_FALSE(load_ok("{}").global_gates.total);
}

// The global ip gate (per address across tenants) is a bucket like the total gate.
TEST(Errors, GlobalIpGateIsCheckedLikeEveryBucket) {
  EXPECT_EQ(error_of("global_gates: { ip: { capacity: 0, refill_per_s: 1 } }"),
            "t.yaml:1:33: global_gates.ip.capacity: must be >= 1, got 0 (a request costs 1 "
            "token)");
  EXPECT_EQ(error_of("global_gates: { ip: { capacity: 5, refill_per_s: 0 } }"),
            "t.yaml:1:50: global_gates.ip.refill_per_s: must be > 0, got 0");
  EXPECT_EQ(error_of("global_gates: { ip: { capacity: 5 } }"),
            "t.yaml:1:21: global_gates.ip.refill_per_s: required field is missing");
  EXPECT_EQ(error_of("global_gates: { ip: 5 }"),
            "t.yaml:1:21: global_gates.ip: expected a mapping, got '5'");
  EXPECT_EQ(error_of("global_gates: { ip: { capacity: 5, refill_per_s: 1, per: tenant } }"),
            "t.yaml:1:53: global_gates.ip.per: unknown key 'per' (allowed: capacity, "
            "refill_per_s, warmup_s, mode, algorithm, limit, window_s)");
  const Config c = load_ok("global_gates: { ip: { capacity: 5, refill_per_s: 2 } }");
  EXPECT_EQ(c.global_gates.ip, (Bucket{5, 2}));
  EXPECT_FALSE(load_ok("{}").global_gates.ip);
}

// The token-rate gates are buckets like the others, checked alike, under their fixed names.
TEST(Errors, TokenRateGatesAreCheckedLikeEveryBucket) {
  EXPECT_EQ(
      error_of("plans: { p: { gates: { tenant_tokens: { capacity: 0, refill_per_s: 1 } } } }"),
      "t.yaml:1:51: plans.p.gates.tenant_tokens.capacity: must be >= 1, got 0 (a request "
      "costs 1 token)");
  EXPECT_EQ(error_of("plans: { p: { gates: { user_tokens: { capacity: 5, refill_per_s: -1 } } } }"),
            "t.yaml:1:66: plans.p.gates.user_tokens.refill_per_s: must be > 0, got -1");
  EXPECT_EQ(error_of("plans: { p: { gates: { api_key_tokens: { capacity: 5 } } } }"),
            "t.yaml:1:40: plans.p.gates.api_key_tokens.refill_per_s: required field is missing");
  EXPECT_EQ(error_of("global_gates: { model_tokens: { gpt: { capacity: 5, refill_per_s: 0 } } }"),
            "t.yaml:1:67: global_gates.model_tokens.gpt.refill_per_s: must be > 0, got 0");
  EXPECT_EQ(
      error_of("global_gates: { model_tokens: { \"a b\": { capacity: 5, refill_per_s: 1 } } }"),
      "t.yaml:1:33: global_gates.model_tokens.a b: 'a b' is not a valid id (1 to 64 of A-Z "
      "a-z 0-9 . _ -)");
  Config c = load_ok(R"(
plans:
  p:
    gates:
      tenant_tokens: { capacity: 60000, refill_per_s: 1000 }
      user_tokens: { capacity: 6000, refill_per_s: 100 }
      api_key_tokens: { capacity: 3000, refill_per_s: 50 }
global_gates:
  model_tokens: { gpt: { capacity: 900000, refill_per_s: 15000 } }
)");
  const Plan& p = c.plans.at("p");
  EXPECT_EQ(p.tenant_tokens, (Bucket{60000, 1000}));
  EXPECT_EQ(p.user_tokens, (Bucket{6000, 100}));
  EXPECT_EQ(p.api_key_tokens, (Bucket{3000, 50}));
  EXPECT_EQ(c.global_gates.model_tokens.at("gpt"), (Bucket{900000, 15000}));
  EXPECT_FALSE(p.tenant);
}

// A sliding window on a request gate: algorithm, limit and window_s, each checked with its
// position; the other algorithm's fields are refused, and so is a window on a token-rate gate.
TEST(Errors, SlidingWindow) {
  Config c = load_ok(R"(
plans:
  p:
    gates:
      tenant: { algorithm: sliding_window, limit: 100, window_s: 60 }
      user: { algorithm: sliding_window, limit: 1, window_s: 0.001, mode: shadow }
      api_key: { algorithm: token_bucket, capacity: 5, refill_per_s: 1 }
global_gates:
  tool: { code_exec: { algorithm: sliding_window, limit: 100000, window_s: 2678400 } }
  model: { m: { algorithm: sliding_window, limit: 3, window_s: 1.5 } }
  total: { algorithm: sliding_window, limit: 50, window_s: 1 }
)");
  const Plan& p = c.plans.at("p");
  Bucket w{0, 0, GateMode::kEnforce, Algorithm::kSlidingWindow, 100, 60};
  EXPECT_EQ(p.tenant, w);
  EXPECT_EQ(p.user, (Bucket{0, 0, GateMode::kShadow, Algorithm::kSlidingWindow, 1, 0.001}));
  EXPECT_EQ(p.api_key, (Bucket{5, 1}));
  EXPECT_EQ(c.global_gates.tool.at("code_exec"),
            (Bucket{0, 0, GateMode::kEnforce, Algorithm::kSlidingWindow, 100000, 2678400}));
  EXPECT_EQ(c.global_gates.model.at("m").limit, 3);
  EXPECT_EQ(c.global_gates.total->window_s, 1);

  EXPECT_EQ(error_of("plans: { p: { gates: { tenant: { algorithm: leaky, limit: 1 } } } }"),
            "t.yaml:1:45: plans.p.gates.tenant.algorithm: unknown algorithm 'leaky'; expected "
            "token_bucket or sliding_window");
  EXPECT_EQ(
      error_of("plans: { p: { gates: { tenant: { algorithm: sliding_window, window_s: 1 } } } }"),
      "t.yaml:1:32: plans.p.gates.tenant.limit: required field is missing");
  EXPECT_EQ(
      error_of("plans: { p: { gates: { tenant: { algorithm: sliding_window, limit: 1 } } } }"),
      "t.yaml:1:32: plans.p.gates.tenant.window_s: required field is missing");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { algorithm: sliding_window, limit: 0, "
                     "window_s: 1 } } } }"),
            "t.yaml:1:64: plans.p.gates.ip.limit: must be between 1 and 100000, got 0");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { algorithm: sliding_window, limit: 100001, "
                     "window_s: 1 } } } }"),
            "t.yaml:1:64: plans.p.gates.ip.limit: must be between 1 and 100000, got 100001");
  EXPECT_EQ(error_of("plans: { p: { gates: { ip: { algorithm: sliding_window, limit: 2.5, "
                     "window_s: 1 } } } }"),
            "t.yaml:1:64: plans.p.gates.ip.limit: expected an integer, got '2.5'");
  EXPECT_EQ(error_of("global_gates: { total: { algorithm: sliding_window, limit: 5, window_s: "
                     "0.0005 } }"),
            "t.yaml:1:73: global_gates.total.window_s: must be >= 0.001, got 0.0005");
  EXPECT_EQ(error_of("global_gates: { total: { algorithm: sliding_window, limit: 5, window_s: "
                     "2678401 } }"),
            "t.yaml:1:73: global_gates.total.window_s: must be <= 2678400 (31 days), got 2678401");
  // The other algorithm's fields.
  EXPECT_EQ(error_of("global_gates: { tool: { t: { algorithm: sliding_window, limit: 5, "
                     "window_s: 1, capacity: 5 } } }"),
            "t.yaml:1:80: global_gates.tool.t.capacity: not a field of algorithm sliding_window "
            "(it takes limit and window_s; no warm-up)");
  EXPECT_EQ(error_of("global_gates: { model: { m: { algorithm: sliding_window, limit: 5, "
                     "window_s: 1, refill_per_s: 1 } } }"),
            "t.yaml:1:81: global_gates.model.m.refill_per_s: not a field of algorithm "
            "sliding_window (it takes limit and window_s; no warm-up)");
  EXPECT_EQ(error_of("plans: { p: { gates: { tenant: { algorithm: sliding_window, limit: 5, "
                     "window_s: 1, warmup_s: 60 } } } }"),
            "t.yaml:1:84: plans.p.gates.tenant.warmup_s: not a field of algorithm "
            "sliding_window (it takes limit and window_s; no warm-up)");
  EXPECT_EQ(error_of("plans: { p: { gates: { user: { capacity: 5, refill_per_s: 1, limit: 5 } } "
                     "} }"),
            "t.yaml:1:62: plans.p.gates.user.limit: not a field of algorithm token_bucket (limit "
            "and window_s need algorithm: sliding_window)");
  EXPECT_EQ(error_of("plans: { p: { gates: { user: { algorithm: token_bucket, capacity: 5, "
                     "refill_per_s: 1, window_s: 5 } } } }"),
            "t.yaml:1:87: plans.p.gates.user.window_s: not a field of algorithm token_bucket "
            "(limit and window_s need algorithm: sliding_window)");
  // Token-rate gates meter tokens: a window is refused there, naming the field.
  for (const char* gate : {"tenant_tokens", "user_tokens", "api_key_tokens"}) {
    std::string yaml = std::string("plans: { p: { gates: { ") + gate +
                       ": { algorithm: sliding_window, limit: 5, window_s: 1 } } } }";
    const std::string col = std::to_string(23 + std::string(gate).size() + 16);
    EXPECT_EQ(error_of(yaml), "t.yaml:1:" + col + ": plans.p.gates." + gate +
                                  ".algorithm: sliding_window counts admissions (cost 1): a "
                                  "token-rate gate takes a token estimate, which only "
                                  "token_bucket meters");
  }
  EXPECT_EQ(error_of("global_gates: { model_tokens: { m: { algorithm: sliding_window, limit: 5, "
                     "window_s: 1 } } }"),
            "t.yaml:1:49: global_gates.model_tokens.m.algorithm: sliding_window counts "
            "admissions (cost 1): a token-rate gate takes a token estimate, which only "
            "token_bucket meters");
}

// On a Redis Cluster one gates.lua call cannot take the total bucket and a model's or tool's
// (other slots): that pairing is refused up front. Alone, or on a single node, either is fine.
// Each global gate is a script call in its own slot, so the total gate goes beside model and
// tool gates on a Redis Cluster as on one node.
TEST(Errors, TheTotalGateBesideModelOrToolGatesLoadsOnACluster) {
  const auto cfg = load_ok(
      "redis: { cluster: [\"10.0.0.1:7000\"] }\n"
      "global_gates: { total: { capacity: 5, refill_per_s: 1 },"
      " model: { m: { capacity: 5, refill_per_s: 1 } } }");
  EXPECT_TRUE(cfg.global_gates.total);
  EXPECT_EQ(cfg.global_gates.model.size(), 1u);
}

TEST(Errors, TenantNamingAMissingPlan) {
  EXPECT_EQ(error_of(Y(R"(
plans:
  pro: {}
  basic: {}
tenants:
  ws-a: { plan: gold }
)")),
            "t.yaml:5:17: tenants.ws-a.plan: no plan named 'gold' (defined: basic, pro)");
  EXPECT_EQ(error_of("tenants: { ws-a: { plan: pro } }"),
            "t.yaml:1:26: tenants.ws-a.plan: no plan named 'pro' (defined: none)");
  // A plan with mistakes inside still exists: its tenants are not reported too.
  EXPECT_EQ(error_of("plans: { pro: { quota: 5 } }\ntenants: { ws-a: { plan: pro } }"),
            "t.yaml:1:24: plans.pro.quota: expected a mapping, got '5'");
}

// control.auth and the digests of each tenant's API keys: 64 hex digits, kept in lower case,
// each mistake named at its item.
TEST(Tenants, KeyDigestsAndTheAuthMode) {
  const std::string a(64, 'a'), b = std::string(63, 'B') + "0";
  Config c = load_ok(
      "control: { auth: tenant_keys, metrics_token: m3tr1cs }\n"
      "plans: { pro: {} }\n"
      "tenants: { acme: { plan: pro, keys_sha256: [\"" +
      a + "\", \"" + b + "\"] } }");
  EXPECT_TRUE(c.control.tenant_keys);
  EXPECT_EQ(c.control.metrics_token, "m3tr1cs");
  EXPECT_EQ(c.tenants.at("acme").keys_sha256,
            (std::vector<std::string>{a, std::string(63, 'b') + "0"}));
  std::string y = to_yaml(c);
  EXPECT_NE(y.find("auth: tenant_keys"), std::string::npos) << y;
  EXPECT_EQ(load_ok(y), c);
  EXPECT_FALSE(load_ok("{}").control.tenant_keys);
  EXPECT_FALSE(load_ok("control: { auth: token }").control.tenant_keys);
  EXPECT_EQ(error_of("control: { auth: keys }"),
            "t.yaml:1:18: control.auth: must be token (the shared auth_token) or tenant_keys "
            "(each tenant's keys), got 'keys'");
  const std::string pre = "plans: { pro: {} }\ntenants: { acme: { plan: pro, keys_sha256: ";
  EXPECT_EQ(error_of(pre + "[\"abc\"] } }"),
            "t.yaml:2:45: tenants.acme.keys_sha256[0]: must be 64 hex digits (a SHA-256 "
            "digest), got 3 characters");
  EXPECT_EQ(error_of(pre + "[\"" + a + "\", \"" + std::string(63, 'a') + "g\"] } }"),
            "t.yaml:2:113: tenants.acme.keys_sha256[1]: must be 64 hex digits (a SHA-256 "
            "digest), found a character that is no hex digit");
  EXPECT_EQ(error_of(pre + "[\"" + a + "\", \"" + std::string(64, 'A') + "\"] } }"),
            "t.yaml:2:113: tenants.acme.keys_sha256[1]: the same digest twice");
  // Where a key's flows may come from: CIDRs, each mistake named at its item.
  Config f = load_ok(
      "plans: { pro: {} }\ntenants: { acme: { plan: pro, flows_from: "
      "[\"10.1.0.0/16\", \"2001:db8::/48\"] } }");
  EXPECT_EQ(f.tenants.at("acme").flows_from,
            (std::vector<std::string>{"10.1.0.0/16", "2001:db8::/48"}));
  ASSERT_EQ(f.tenants.at("acme").flows_from_nets.size(), 2u);
  EXPECT_EQ(load_ok(to_yaml(f)), f);
  EXPECT_EQ(error_of("plans: { pro: {} }\ntenants: { acme: { plan: pro, flows_from: "
                     "[\"10.1.0.0/16\", \"10.1.0.1/16\"] } }"),
            "t.yaml:2:59: tenants.acme.flows_from[1]: bad CIDR '10.1.0.1/16': host bits set in "
            "'10.1.0.1/16' (the network is 10.1.0.0/16)");
  EXPECT_EQ(error_of(pre + "abc } }"),
            "t.yaml:2:44: tenants.acme.keys_sha256: expected a list of SHA-256 digests, got 'abc'");
}

TEST(Tenants, TheDefaultPlanEntry) {
  Config c = load_ok(Y(R"(
plans: { free: {}, pro: {} }
tenants:
  "*": { plan: free }
  ws-a: { plan: pro }
)"));
  EXPECT_EQ(c.tenants.at("*"), (Tenant{"*", "free"}));
  EXPECT_EQ(c.tenants.at("ws-a"), (Tenant{"ws-a", "pro"}));
  // Written back quoted (a plain * starts an alias) and read back equal.
  std::string y = to_yaml(c);
  EXPECT_NE(y.find("\"*\": {plan: free}"), std::string::npos) << y;
  EXPECT_EQ(load_ok(y), c);
  // Its plan is checked as any tenant's; "*" is the only id that may be a wildcard.
  EXPECT_EQ(error_of("plans: { pro: {} }\ntenants: { \"*\": { plan: gold } }"),
            "t.yaml:2:25: tenants.*.plan: no plan named 'gold' (defined: pro)");
  EXPECT_EQ(error_of("plans: { p: {} }\ntenants: { \"ws-*\": { plan: p } }"),
            "t.yaml:2:12: tenants.ws-*: 'ws-*' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)");
  EXPECT_EQ(error_of("plans: { p: {} }\ntenants: { \"**\": { plan: p } }"),
            "t.yaml:2:12: tenants.**: '**' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)");
}

TEST(Errors, BadIds) {
  EXPECT_EQ(error_of("plans: { \"pro plan\": {} }"),
            "t.yaml:1:10: plans.pro plan: 'pro plan' is not a valid id (1 to 64 of A-Z a-z 0-9 . "
            "_ -)");
  EXPECT_EQ(error_of("plans: { p: {} }\ntenants: { \"ws:a\": { plan: p } }"),
            "t.yaml:2:12: tenants.ws:a: 'ws:a' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)");
  EXPECT_EQ(
      error_of("global_gates: { tool: { \"web search\": { capacity: 1, refill_per_s: 1 } } }"),
      "t.yaml:1:25: global_gates.tool.web search: 'web search' is not a valid id (1 to 64 "
      "of A-Z a-z 0-9 . _ -)");
  EXPECT_EQ(error_of("plans: { p: { class: \"g/old\" } }"),
            "t.yaml:1:22: plans.p.class: 'g/old' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ "
            "-)");
  std::string long_id(65, 'a');
  EXPECT_EQ(error_of("plans: { " + long_id + ": {} }"),
            "t.yaml:1:10: plans." + long_id + ": '" + long_id.substr(0, 60) +
                "...' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)");
}

TEST(Errors, DuplicateKeysAndKeyShapes) {
  EXPECT_EQ(error_of(Y(R"(
plans:
  pro: {}
  pro: {}
)")),
            "t.yaml:3:3: plans.pro: duplicate key (first at line 2)");
  EXPECT_EQ(error_of("redis: { url: \"redis://a:1\", url: \"redis://b:1\" }"),
            "t.yaml:1:30: redis.url: duplicate key (first at line 1)");
  EXPECT_EQ(error_of("plans: { [a]: {} }"),
            "t.yaml:1:10: plans: keys must be non-empty strings, got a list");
}

TEST(Errors, RedisUrl) {
  auto url = [](const std::string& u) { return error_of("redis: { url: \"" + u + "\" }"); };
  const std::string expect =
      "; expected redis://[[user][:password]@]host[:port][/db] or unix:///path";
  // Every reason the URL parser gives (common/redis_url_test.cc) reaches the file's position.
  EXPECT_EQ(url("http://h:1"),
            "t.yaml:1:15: redis.url: bad redis URL 'http://h:1': the scheme "
            "must be redis:// or unix://" +
                expect);
  EXPECT_EQ(
      url("redis://h:1/x"),
      "t.yaml:1:15: redis.url: bad redis URL 'redis://h:1/x': bad database number 'x'" + expect);
  EXPECT_EQ(url("redis://::1:6379"),
            "t.yaml:1:15: redis.url: bad redis URL 'redis://::1:6379': an IPv6 address must be "
            "in brackets, e.g. [::1]:6379" +
                expect);
  EXPECT_EQ(url("unix:///" + std::string(120, 's')),
            "t.yaml:1:15: redis.url: bad redis URL 'unix:///" + std::string(52, 's') +
                "...': the socket path is longer than 107 bytes" + expect);
  // The password never reaches the message.
  EXPECT_EQ(url("redis://user:s3cret@h:0"),
            "t.yaml:1:15: redis.url: bad redis URL 'redis://user:***@h:0': bad port '0' "
            "(1 to 65535)" +
                expect);
}

TEST(Redis, UrlIsParsedIntoItsParts) {
  auto redis = [](const std::string& u) { return load_ok("redis: { url: \"" + u + "\" }").redis; };
  Redis r = redis("redis://:s3cr@t@cache.example:6380/3");
  EXPECT_EQ(r.url, "redis://:s3cr@t@cache.example:6380/3");
  EXPECT_EQ(r.host, "cache.example");
  EXPECT_EQ(r.port, 6380);
  EXPECT_EQ(r.db, 3);
  EXPECT_EQ(r.password, "s3cr@t");
  EXPECT_EQ(r.unix_path, "");
  r = redis("redis://gateway:pw@10.0.0.5");
  EXPECT_EQ(r.host, "10.0.0.5");
  EXPECT_EQ(r.port, 6379);
  EXPECT_EQ(r.user, "gateway");
  EXPECT_EQ(r.password, "pw");
  r = redis("unix:///run/redis/redis.sock");
  EXPECT_EQ(r.unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(r.host, "");
  // Without a url the built-in one applies, already parsed.
  r = load_ok("{}").redis;
  EXPECT_EQ(r.url, "redis://127.0.0.1:6379/0");
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(r.port, 6379);
}

TEST(Redis, ClusterSeedsInsteadOfAUrl) {
  Redis r = load_ok(Y(R"(
redis:
  cluster: ["10.0.0.1:7000", "cache-2.example:7001", "[fd00::3]:7002"]
  timeout_ms: 80
)"))
                .redis;
  EXPECT_EQ(r.cluster,
            (std::vector<std::string>{"10.0.0.1:7000", "cache-2.example:7001", "[fd00::3]:7002"}));
  EXPECT_EQ(r.timeout_ms, 80);
  // Written out, the seeds come back and no url appears beside them.
  Config c = load_ok("redis: { cluster: [\"10.0.0.1:7000\"], pool_size: 2 }");
  const std::string yaml = to_yaml(c);
  EXPECT_EQ(yaml.find("url:"), std::string::npos) << yaml;
  EXPECT_EQ(load_ok(yaml), c) << yaml;
  EXPECT_TRUE(load_ok("{}").redis.cluster.empty());
}

// An ACL user on a cluster: named beside the seeds, its password from password_env (or a file).
TEST(Redis, AClusterUserWithItsPasswordElsewhere) {
  ::setenv("DG_TEST_CLUSTER_PW", "s3cret", 1);
  Config c = load_ok(Y(R"(
redis:
  cluster: ["10.0.0.1:7000"]
  user: gateway
  password_env: DG_TEST_CLUSTER_PW
)"));
  EXPECT_EQ(c.redis.user, "gateway");
  EXPECT_EQ(c.redis.password, "s3cret");
  const std::string yaml = to_yaml(c);
  EXPECT_NE(yaml.find("user: \"gateway\""), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("s3cret"), std::string::npos) << yaml;
  EXPECT_EQ(error_of("redis: { url: \"redis://h:1\", user: gateway }"),
            "t.yaml:1:36: redis.user: only with redis.cluster: a url names its own user "
            "(redis://user@host)");
  EXPECT_EQ(error_of("redis: { cluster: [\"10.0.0.1:7000\"], user: gateway }"),
            "t.yaml:1:44: redis.user: user 'gateway' has no password (add password_file or "
            "password_env)");
  EXPECT_EQ(error_of("redis: { cluster: [\"10.0.0.1:7000\"], user: \"a b\", "
                     "password_env: DG_TEST_CLUSTER_PW }"),
            "t.yaml:1:44: redis.user: must be a Redis ACL user name: not empty, no spaces or "
            "control characters");
  ::unsetenv("DG_TEST_CLUSTER_PW");
}

TEST(Redis, ClusterErrorsSayWhere) {
  EXPECT_EQ(error_of(Y(R"(
redis:
  url: "redis://10.0.0.1:6379/0"
  cluster: ["10.0.0.1:7000"]
)")),
            "t.yaml:3:12: redis.cluster: redis.cluster and redis.url exclude each other: the "
            "cluster's seeds name its nodes (give the password with password_file or "
            "password_env)");
  EXPECT_EQ(error_of("redis: { cluster: [\"10.0.0.1:7000\", \"10.0.0.2\"] }"),
            "t.yaml:1:37: redis.cluster[1]: bad seed '10.0.0.2': missing ':port'; expected "
            "host:port or [v6-address]:port");
  EXPECT_EQ(error_of("redis: { cluster: [] }"),
            "t.yaml:1:19: redis.cluster: must list at least one host:port seed");
  EXPECT_EQ(error_of("redis: { cluster: \"10.0.0.1:7000\" }"),
            "t.yaml:1:19: redis.cluster: expected a list of host:port seeds, got '10.0.0.1:7000'");
}

// Secrets can stay out of the YAML: the first line of a file (systemd's LoadCredential= puts
// one under /run/credentials/<unit>/). Messages never show the secret.
// The same from environment variables, named in the YAML so that the file can be committed:
// the secret never reaches a message or the round trip.
TEST(Redis, PasswordAndTokenFromTheEnvironment) {
  ::setenv("DG_TEST_REDIS_PW", "s3cret-env", 1);
  ::setenv("DG_TEST_TOKEN", "t0ken-env", 1);
  ::setenv("DG_TEST_EMPTY", "", 1);
  ::unsetenv("DG_TEST_UNSET");
  Config c = load_ok(
      "redis: { url: \"redis://gateway@10.0.0.5:6380/1\", password_env: DG_TEST_REDIS_PW }\n"
      "control: { auth_token_env: DG_TEST_TOKEN }\n");
  EXPECT_EQ(c.redis.password, "s3cret-env");
  EXPECT_EQ(c.redis.password_env, "DG_TEST_REDIS_PW");
  EXPECT_EQ(c.control.auth_token, "t0ken-env");
  EXPECT_EQ(c.redis.set_url("redis://gateway:other@10.0.0.6"),
            "a password in the url and a password_env: give one");
  std::string y = to_yaml(c);
  EXPECT_EQ(y.find("s3cret"), std::string::npos) << y;
  EXPECT_EQ(y.find("t0ken"), std::string::npos) << y;
  EXPECT_EQ(load_ok(y), c);

  EXPECT_EQ(error_of("redis: { password_env: DG_TEST_UNSET }"),
            "t.yaml:1:24: redis.password_env: environment variable DG_TEST_UNSET is not set");
  EXPECT_EQ(error_of("redis: { password_env: DG_TEST_EMPTY }"),
            "t.yaml:1:24: redis.password_env: environment variable DG_TEST_EMPTY is empty");
  EXPECT_EQ(error_of("redis: { password_env: \"1BAD-NAME\" }"),
            "t.yaml:1:24: redis.password_env: bad environment variable name '1BAD-NAME'; expected "
            "[A-Za-z_][A-Za-z0-9_]*");
  char pw_tmpl[] = "/tmp/dg-pw-XXXXXX";
  int fd = ::mkstemp(pw_tmpl);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "pw\n", 3), 3);
  ::close(fd);
  EXPECT_EQ(error_of("redis: { password_file: " + std::string(pw_tmpl) +
                     ", password_env: DG_TEST_REDIS_PW }"),
            "t.yaml:1:58: redis.password_env: password_file is set too; give the secret in one "
            "place");
  ::unlink(pw_tmpl);
  EXPECT_EQ(error_of("control: { auth_token: x, auth_token_env: DG_TEST_TOKEN }"),
            "t.yaml:1:43: control.auth_token_env: auth_token is set too; give the token in one "
            "place");
  ::unsetenv("DG_TEST_REDIS_PW");
  ::unsetenv("DG_TEST_TOKEN");
  ::unsetenv("DG_TEST_EMPTY");
}

// The admin token is read as the API token is, and stays out of the round trip the same way.
TEST(Control, AdminTokenInlineOrFromTheEnvironment) {
  EXPECT_EQ(load_ok("{}").control.admin_token, "");
  EXPECT_EQ(to_yaml(load_ok("{}")).find("admin_token"), std::string::npos);
  EXPECT_EQ(load_ok("control: { admin_token: adm }").control.admin_token, "adm");
  ::setenv("DG_TEST_ADMIN", "adm1n-env", 1);
  Config c = load_ok("control: { admin_token_env: DG_TEST_ADMIN }");
  EXPECT_EQ(c.control.admin_token, "adm1n-env");
  EXPECT_EQ(c.control.admin_token_env, "DG_TEST_ADMIN");
  std::string y = to_yaml(c);
  EXPECT_EQ(y.find("adm1n"), std::string::npos) << y;
  EXPECT_EQ(load_ok(y), c);
  EXPECT_EQ(error_of("control: { admin_token: x, admin_token_env: DG_TEST_ADMIN }"),
            "t.yaml:1:45: control.admin_token_env: admin_token is set too; give the token in one "
            "place");
  ::unsetenv("DG_TEST_ADMIN");
}

// `mode: shadow` per gate (tenant-scoped buckets, quota, concurrency, global gates) or per plan;
// enforce is the default; anything else is an error naming the field; it survives to_yaml.
TEST(Plans, GateModes) {
  Config c = load_ok(
      "plans:\n"
      "  trial:\n"
      "    gates:\n"
      "      tenant: { capacity: 3, refill_per_s: 1, mode: shadow }\n"
      "      user: { capacity: 3, refill_per_s: 1, mode: enforce }\n"
      "      ip: { capacity: 3, refill_per_s: 1 }\n"
      "    quota: { tokens_per_month: 10, mode: shadow }\n"
      "    concurrency: { max_streams: 2, mode: shadow }\n"
      "  dry: { mode: shadow, gates: { tenant: { capacity: 1, refill_per_s: 1 } } }\n"
      "global_gates:\n"
      "  model: { m: { capacity: 5, refill_per_s: 1, mode: shadow } }\n"
      "  tool: { x: { capacity: 5, refill_per_s: 1 } }\n");
  const Plan& trial = c.plans.at("trial");
  EXPECT_EQ(trial.mode, GateMode::kEnforce);
  EXPECT_EQ(trial.tenant->mode, GateMode::kShadow);
  EXPECT_EQ(trial.user->mode, GateMode::kEnforce);
  EXPECT_EQ(trial.ip->mode, GateMode::kEnforce);
  EXPECT_EQ(trial.quota->mode, GateMode::kShadow);
  EXPECT_EQ(trial.concurrency->mode, GateMode::kShadow);
  EXPECT_EQ(c.plans.at("dry").mode, GateMode::kShadow);
  EXPECT_EQ(c.plans.at("dry").tenant->mode, GateMode::kEnforce);
  EXPECT_EQ(c.global_gates.model.at("m").mode, GateMode::kShadow);
  EXPECT_EQ(c.global_gates.tool.at("x").mode, GateMode::kEnforce);
  LoadResult back = load_string(to_yaml(c), "back.yaml");
  ASSERT_TRUE(back.config) << (back.errors.empty() ? "" : back.errors[0].str());
  back.config->source = c.source;
  EXPECT_EQ(*back.config, c);

  EXPECT_EQ(error_of("plans: { p: { gates: { tenant: { capacity: 1, refill_per_s: 1, mode: dry "
                     "} } } }"),
            "t.yaml:1:70: plans.p.gates.tenant.mode: unknown mode 'dry'; expected enforce "
            "(refuse) or shadow (admit, and name the gate that would have refused)");
  EXPECT_EQ(error_of("plans: { p: { mode: Shadow } }"),
            "t.yaml:1:21: plans.p.mode: unknown mode 'Shadow'; expected enforce (refuse) or "
            "shadow (admit, and name the gate that would have refused)");
  EXPECT_EQ(error_of("plans: { p: { quota: { tokens_per_month: 1, mode: [shadow] } } }"),
            "t.yaml:1:51: plans.p.quota.mode: expected a string, got a list");
  EXPECT_EQ(error_of("global_gates: { total: { capacity: 1, refill_per_s: 1, mode: off } }"),
            "t.yaml:1:62: global_gates.total.mode: unknown mode 'off'; expected enforce "
            "(refuse) or shadow (admit, and name the gate that would have refused)");
}

// redis.on_failure and its local mode's share and journal; a plan may fail its own way.
TEST(Redis, OnFailurePolicy) {
  Config d = load_ok("{}");
  EXPECT_EQ(d.redis.on_failure, OnFailure::kClosed);
  EXPECT_EQ(d.redis.local_share, 1.0);
  EXPECT_EQ(d.redis.journal, "");
  EXPECT_EQ(load_ok("redis: { on_failure: open }").redis.on_failure, OnFailure::kOpen);
  Config l = load_ok(
      "redis: { on_failure: local, local_share: 0.25, journal: /var/lib/dg/journal }\n"
      "plans: { free: { on_failure: closed }, pro: {} }\n");
  EXPECT_EQ(l.redis.on_failure, OnFailure::kLocal);
  EXPECT_EQ(l.redis.local_share, 0.25);
  EXPECT_EQ(l.redis.journal, "/var/lib/dg/journal");
  EXPECT_EQ(l.plans.at("free").on_failure, OnFailure::kClosed);
  EXPECT_FALSE(l.plans.at("pro").on_failure);
  EXPECT_EQ(error_of("redis: { on_failure: lenient }"),
            "t.yaml:1:22: redis.on_failure: unknown mode 'lenient'; expected closed (503), open "
            "(admit, unchecked) or local (a share of each limit, reconciled into Redis later)");
  EXPECT_EQ(error_of("redis: { on_failure: [open] }"),
            "t.yaml:1:22: redis.on_failure: expected a string, got a list");
  EXPECT_EQ(error_of("redis: { local_share: 0 }"),
            "t.yaml:1:23: redis.local_share: must be > 0, got 0 (the share of each limit one "
            "daemon uses alone)");
  EXPECT_EQ(error_of("redis: { local_share: 1.5 }"),
            "t.yaml:1:23: redis.local_share: must be at most 1 (the whole limit), got 1.5");
  EXPECT_EQ(error_of("redis: { journal: \"\" }"),
            "t.yaml:1:19: redis.journal: must not be empty (leave journal out for none)");
  // Local decisions need the journal, whether the default or one plan asks for them.
  EXPECT_EQ(error_of("redis: { on_failure: local }"),
            "t.yaml:1:22: redis.on_failure: local needs redis.journal: the file that keeps the "
            "local decisions until they are reconciled into Redis");
  EXPECT_EQ(error_of("plans: { pro: { on_failure: local } }"),
            "t.yaml:1:29: plans.pro.on_failure: local needs redis.journal: the file that keeps "
            "the local decisions until they are reconciled into Redis");
  EXPECT_EQ(error_of("plans: { pro: { on_failure: shut } }"),
            "t.yaml:1:29: plans.pro.on_failure: unknown mode 'shut'; expected closed (503), open "
            "(admit, unchecked) or local (a share of each limit, reconciled into Redis later)");
}

// The journal's durability and bound.
TEST(Redis, JournalFsyncAndBound) {
  Config d = load_ok("{}");
  EXPECT_EQ(d.redis.journal_fsync, Redis::JournalSync::kInterval);
  EXPECT_EQ(d.redis.journal_fsync_ms, 100);
  EXPECT_EQ(d.redis.journal_max_mb, 256);
  EXPECT_EQ(d.redis.journal_full, OnFailure::kClosed);
  EXPECT_EQ(load_ok("redis: { journal_fsync: always }").redis.journal_fsync,
            Redis::JournalSync::kAlways);
  EXPECT_EQ(load_ok("redis: { journal_fsync: never }").redis.journal_fsync,
            Redis::JournalSync::kNever);
  Config i = load_ok("redis: { journal_fsync: 20, journal_max_mb: 16, journal_full: open }");
  EXPECT_EQ(i.redis.journal_fsync, Redis::JournalSync::kInterval);
  EXPECT_EQ(i.redis.journal_fsync_ms, 20);
  EXPECT_EQ(i.redis.journal_max_mb, 16);
  EXPECT_EQ(i.redis.journal_full, OnFailure::kOpen);
  EXPECT_EQ(load_ok(to_yaml(i)).redis, i.redis);
  EXPECT_EQ(error_of("redis: { journal_fsync: sometimes }"),
            "t.yaml:1:25: redis.journal_fsync: expected always (flush before answering), never "
            "(the kernel's own time) or a flush interval in ms (e.g. 100)");
  EXPECT_EQ(error_of("redis: { journal_fsync: 0 }"),
            "t.yaml:1:25: redis.journal_fsync: must be between 1 and 60000, got 0");
  EXPECT_EQ(error_of("redis: { journal_max_mb: 0 }"),
            "t.yaml:1:26: redis.journal_max_mb: must be between 1 and 1048576, got 0");
  Config b = load_ok("redis: { breaker: { failures: 5, open_ms: 250, probes: 1 } }");
  EXPECT_EQ(b.redis.breaker, (Redis::Breaker{5, 250, 1}));
  EXPECT_EQ(load_ok("{}").redis.breaker, (Redis::Breaker{3, 1000, 3}));
  EXPECT_EQ(error_of("redis: { breaker: { failures: 0 } }"),
            "t.yaml:1:31: redis.breaker.failures: must be between 1 and 1000, got 0");
  EXPECT_EQ(error_of("redis: { journal_full: local }"),
            "t.yaml:1:24: redis.journal_full: unknown mode 'local'; expected closed (503) or open "
            "(admit, unchecked) once the journal holds redis.journal_max_mb");
}

TEST(Control, DecisionLogIsOffByDefaultAndSampledInZeroToOne) {
  EXPECT_EQ(load_ok("{}").control.decision_log, DecisionLog{});
  EXPECT_EQ(to_yaml(load_ok("{}")).find("decision_log"), std::string::npos);
  EXPECT_EQ(load_ok("control: { decision_log: { path: /tmp/d.jsonl } }").control.decision_log,
            (DecisionLog{"/tmp/d.jsonl", 1.0}));
  EXPECT_EQ(error_of("control: { decision_log: { sample: 0.5 } }"),
            "t.yaml:1:26: control.decision_log.path: required field is missing");
  EXPECT_EQ(error_of("control: { decision_log: { path: \"\" } }"),
            "t.yaml:1:34: control.decision_log.path: must not be empty (leave decision_log out "
            "for none)");
  EXPECT_EQ(error_of("control: { decision_log: { path: /d, sample: 0 } }"),
            "t.yaml:1:46: control.decision_log.sample: must be > 0, got 0");
  EXPECT_EQ(
      error_of("control: { decision_log: { path: /d, sample: 1.5 } }"),
      "t.yaml:1:46: control.decision_log.sample: must be at most 1 (every decision), got 1.5");
}

TEST(Redis, PasswordAndTokenFromFiles) {
  char dir_tmpl[] = "/tmp/dg-secret-XXXXXX";
  std::string dir = mkdtemp(dir_tmpl);
  std::string pw = dir + "/redis-password", tok = dir + "/token", empty = dir + "/empty";
  std::ofstream(pw) << "s3cret\nignored second line\n";
  std::ofstream(tok) << "t0ken\r\n";
  std::ofstream(empty) << "\n";
  Config c = load_ok("redis: { url: \"redis://gateway@10.0.0.5:6380/1\", password_file: \"" + pw +
                     "\" }\ncontrol: { auth_token_file: \"" + tok + "\" }\n");
  EXPECT_EQ(c.redis.user, "gateway");
  EXPECT_EQ(c.redis.password, "s3cret");
  EXPECT_EQ(c.redis.port, 6380);
  EXPECT_EQ(c.control.auth_token, "t0ken");
  // A --redis override without a password keeps the file's; with one, it is refused.
  EXPECT_FALSE(c.redis.set_url("redis://gateway@10.0.0.6"));
  EXPECT_EQ(c.redis.password, "s3cret");
  EXPECT_EQ(c.redis.set_url("redis://gateway:other@10.0.0.6"),
            "a password in the url and a password_file: give one");
  // The round trip names the files, not the secrets.
  std::string y = to_yaml(c);
  EXPECT_EQ(y.find("s3cret"), std::string::npos) << y;
  EXPECT_EQ(y.find("t0ken"), std::string::npos) << y;
  EXPECT_EQ(load_ok(y), c);

  EXPECT_EQ(error_of("redis: { password_file: \"" + dir + "/missing\" }"),
            "t.yaml:1:25: redis.password_file: '" + dir +
                "/missing': cannot open: No such file or directory");
  EXPECT_EQ(error_of("redis: { password_file: \"" + empty + "\" }"),
            "t.yaml:1:25: redis.password_file: the first line of '" + empty + "' is empty");
  EXPECT_EQ(error_of("redis: { url: \"redis://:x@h\", password_file: \"" + pw + "\" }"),
            "t.yaml:1:15: redis.url: bad redis URL 'redis://:***@h': a password in the url and a "
            "password_file: give one; expected redis://[[user][:password]@]host[:port][/db] or "
            "unix:///path");
  EXPECT_EQ(error_of("redis: { url: \"redis://gateway@h\" }"),
            "t.yaml:1:15: redis.url: bad redis URL 'redis://***@h': user 'gateway' has no "
            "password (add one, or password_file, or password_env); expected "
            "redis://[[user][:password]@]host[:port][/db] or unix:///path");
  EXPECT_EQ(error_of("control: { auth_token: x, auth_token_file: \"" + tok + "\" }"),
            "t.yaml:1:44: control.auth_token_file: auth_token is set too; give the token in one "
            "place");
  std::filesystem::remove_all(dir);
}

// A secret file is read as the configuration file is: anything but a regular file of at most
// 64 KiB is refused unread, at its key, naming the file. Before, each was read through an
// ifstream: a FIFO without a writer blocked the load in open() for good, /dev/zero was read
// into memory until it ran out, and a large file was read whole as the secret.
TEST(Redis, ASecretFileIsARegularFileOfAtMost64KiBReadWithoutWaiting) {
  char tmpl[] = "/tmp/dg-secretfile-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string fifo = dir + "/token", big = dir + "/big", at_limit = dir + "/at-limit";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string a_fifo =
      "': is a FIFO, not a regular file; a secret is read from a regular file";
  EXPECT_EQ(error_of("redis: { password_file: \"" + fifo + "\" }"),
            "t.yaml:1:25: redis.password_file: '" + fifo + a_fifo);
  EXPECT_EQ(error_of("control: { auth_token_file: \"" + fifo + "\" }"),
            "t.yaml:1:29: control.auth_token_file: '" + fifo + a_fifo);
  EXPECT_EQ(error_of("control: { admin_token_file: \"" + fifo + "\" }"),
            "t.yaml:1:30: control.admin_token_file: '" + fifo + a_fifo);
  EXPECT_EQ(error_of("redis: { password_file: /dev/zero }"),
            "t.yaml:1:25: redis.password_file: '/dev/zero': is a character device, not a "
            "regular file; a secret is read from a regular file");
  EXPECT_EQ(
      error_of("control: { admin_token_file: \"" + dir + "\" }"),
      "t.yaml:1:30: control.admin_token_file: '" + dir + "': is a directory, not a secret file");
  // Refused by its size, unread: its first line, which could be the secret, is never shown.
  std::ofstream(big) << "s3cret\n" << std::string(64 * 1024, 'x');
  const std::string too_big = error_of("control: { auth_token_file: \"" + big + "\" }");
  EXPECT_EQ(too_big, "t.yaml:1:29: control.auth_token_file: '" + big +
                         "': the file has 65543 bytes; a secret is at most 64 KiB");
  EXPECT_EQ(too_big.find("s3cret"), std::string::npos);
  // At the limit it is read, and its first line is the secret.
  std::ofstream(at_limit) << "s3cret\r\n" << std::string(64 * 1024 - 8, 'x');
  EXPECT_EQ(load_ok("redis: { password_file: \"" + at_limit + "\" }").redis.password, "s3cret");
  std::filesystem::remove_all(dir);
}

// What a wrong path or a hostile file gets: an error at once, not minutes and gigabytes.
TEST(Errors, DirectoriesHugeFilesAndDeepNesting) {
  char tmpl[] = "/tmp/dg-cfgdir-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  LoadResult r = load_file(dir);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].str(), dir + ": is a directory, not a YAML file");
  std::string big = dir + "/big.yaml";
  {
    std::ofstream out(big);
    std::string line = "# " + std::string(1021, 'x') + "\n";
    for (int i = 0; i < 16 * 1024 + 1; ++i) out << line;
  }
  r = load_file(big);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].str(),
            big + ": the file has 16778240 bytes; a configuration is at most 16 MiB");
  std::filesystem::remove_all(dir);
  // The 65th nested collection is named where it starts, whatever yaml-cpp would say later.
  EXPECT_EQ(error_of("a: " + std::string(3000, '[') + std::string(3000, ']')),
            "t.yaml:1:67: nested deeper than 64 levels; a configuration is a few levels deep");
  EXPECT_EQ(error_of("plans:\n  p:\n" + std::string(100, '{')),
            "t.yaml:3:64: nested deeper than 64 levels; a configuration is a few levels deep");
}

TEST(Errors, ListenAddress) {
  auto listen = [](const std::string& l) { return error_of("control: { listen: \"" + l + "\" }"); };
  const std::string expect = "; expected host:port or [v6-address]:port";
  EXPECT_EQ(listen("127.0.0.1"),
            "t.yaml:1:20: control.listen: bad listen address '127.0.0.1': "
            "missing ':port'" +
                expect);
  EXPECT_EQ(listen(":8080"),
            "t.yaml:1:20: control.listen: bad listen address ':8080': missing host" + expect);
  EXPECT_EQ(listen("127.0.0.1:80800"),
            "t.yaml:1:20: control.listen: bad listen address "
            "'127.0.0.1:80800': bad port '80800' (0 to 65535)" +
                expect);
  EXPECT_EQ(listen("::1:8080"),
            "t.yaml:1:20: control.listen: bad listen address '::1:8080': an "
            "IPv6 address must be in brackets, e.g. [::1]:6379" +
                expect);
  EXPECT_EQ(listen("[::1]8080"),
            "t.yaml:1:20: control.listen: bad listen address '[::1]8080': "
            "unexpected '8080' after the host" +
                expect);
  EXPECT_EQ(listen("[::1"),
            "t.yaml:1:20: control.listen: bad listen address '[::1': missing "
            "']' after the IPv6 address" +
                expect);
  EXPECT_EQ(listen("[::1/64]:80"),
            "t.yaml:1:20: control.listen: bad listen address "
            "'[::1/64]:80': bad IPv6 address '::1/64'" +
                expect);
  EXPECT_EQ(listen("10.0.0.256:80"),
            "t.yaml:1:20: control.listen: bad listen address "
            "'10.0.0.256:80': bad IPv4 address '10.0.0.256'" +
                expect);
  EXPECT_EQ(load_ok("control: { listen: \"[::1]:9000\" }").control.listen, "[::1]:9000");
  EXPECT_EQ(load_ok("control: { listen: \"localhost:0\" }").control.listen, "localhost:0");
  EXPECT_EQ(load_ok("control: { listen: 0.0.0.0:80 }").control.listen, "0.0.0.0:80");
}

// TLS on either front: the certificate and its key together, a client CA only with them; paths
// only (the listener reads the files), given back by the round trip.
TEST(Errors, Tls) {
  Config d = load_ok("control: {}");
  EXPECT_FALSE(d.control.tls.on());
  EXPECT_FALSE(d.control.grpc_tls.on());
  Config t = load_ok(
      "control:\n  tls: { cert_file: /c.pem, key_file: /k.pem }\n"
      "  grpc_tls: { cert_file: /g.pem, key_file: /gk.pem, client_ca_file: /ca.pem }\n");
  EXPECT_EQ(t.control.tls, (Tls{"/c.pem", "/k.pem", ""}));
  EXPECT_EQ(t.control.grpc_tls, (Tls{"/g.pem", "/gk.pem", "/ca.pem"}));
  EXPECT_EQ(error_of("control:\n  tls: { cert_file: /c.pem }\n"),
            "t.yaml:2:10: control.tls.key_file: missing: a certificate needs its key_file");
  EXPECT_EQ(error_of("control:\n  grpc_tls: { key_file: /k.pem }\n"),
            "t.yaml:2:15: control.grpc_tls.cert_file: missing: a key_file needs its cert_file");
  EXPECT_EQ(error_of("control:\n  tls: { client_ca_file: /ca.pem }\n"),
            "t.yaml:2:10: control.tls.client_ca_file: needs cert_file and key_file (the server's "
            "own certificate)");
  EXPECT_EQ(error_of("control:\n  tls: { cert_file: \"\", key_file: /k.pem }\n"),
            "t.yaml:2:21: control.tls.cert_file: must not be empty (leave cert_file out for none)");
  EXPECT_EQ(error_of("control:\n  tls: { cert: /c.pem }\n"),
            "t.yaml:2:10: control.tls.cert: unknown key 'cert' (allowed: cert_file, key_file, "
            "client_ca_file)");
  const std::string yaml = to_yaml(t);
  EXPECT_NE(yaml.find("client_ca_file"), std::string::npos) << yaml;
  EXPECT_EQ(load_ok(yaml).control.grpc_tls, t.control.grpc_tls);
}

// OpenAI's rate-limit headers: on unless turned off, a boolean named by file, line and column.
TEST(Errors, OpenAiHeaders) {
  EXPECT_TRUE(load_ok("control: {}").control.openai_headers);
  EXPECT_TRUE(load_ok("control: { openai_headers: true }").control.openai_headers);
  EXPECT_FALSE(load_ok("control: { openai_headers: false }").control.openai_headers);
  EXPECT_EQ(error_of("control: {\n  openai_headers: no }"),
            "t.yaml:2:19: control.openai_headers: expected true or false, got 'no'");
  EXPECT_EQ(error_of("control: { openai_headers: \"false\" }"),
            "t.yaml:1:28: control.openai_headers: expected true or false, got 'false'");
}

// The gRPC front: off by default, a listen address like control.listen, and a domain map whose
// values are gates and which always names the tenant.
TEST(Errors, GrpcListenAndRlsDomains) {
  Config d = load_ok("control: {}");
  EXPECT_EQ(d.control.grpc_listen, "");
  EXPECT_EQ(d.control.rls_domains.at("dripgate").at("api_key"), "api_key");
  EXPECT_EQ(load_ok("control: { grpc_listen: \"\" }").control.grpc_listen, "");
  EXPECT_EQ(load_ok("control: { grpc_listen: \"[::1]:0\" }").control.grpc_listen, "[::1]:0");
  EXPECT_EQ(d.control.grpc_max_inflight, 2048);
  EXPECT_EQ(load_ok("control: { grpc_max_inflight: 1 }").control.grpc_max_inflight, 1);
  EXPECT_EQ(load_ok("control: { grpc_max_inflight: 1000000 }").control.grpc_max_inflight, 1000000);
  EXPECT_EQ(error_of("control: { grpc_max_inflight: 0 }"),
            "t.yaml:1:31: control.grpc_max_inflight: must be between 1 and 1000000, got 0");
  EXPECT_EQ(error_of("control: {\n  grpc_max_inflight: many }"),
            "t.yaml:2:22: control.grpc_max_inflight: expected an integer, got 'many'");
  EXPECT_EQ(error_of("control: { grpc_listen: \"127.0.0.1\" }"),
            "t.yaml:1:25: control.grpc_listen: bad listen address '127.0.0.1': missing ':port'; "
            "expected host:port or [v6-address]:port");
  EXPECT_EQ(error_of("control: { rls: { domains: { edge: { x-tenant: tenant, x-ip: client } } } }"),
            "t.yaml:1:62: control.rls.domains.edge.x-ip: unknown gate 'client' (allowed: tenant, "
            "user, api_key, ip, model, tool)");
  // The built-in domain takes the client address under both names it commonly has.
  EXPECT_EQ(d.control.rls_domains.at("dripgate").at("client_ip"), "ip");
  EXPECT_EQ(d.control.rls_domains.at("dripgate").at("remote_address"), "ip");
  EXPECT_EQ(load_ok("control: { rls: { domains: { edge: { x-t: tenant, x-forwarded-for: ip } } } }")
                .control.rls_domains.at("edge")
                .at("x-forwarded-for"),
            "ip");
  EXPECT_EQ(error_of("control: { rls: { domains: { edge: { x-model: model } } } }"),
            "t.yaml:1:30: control.rls.domains.edge: no descriptor key maps to the tenant gate");
  EXPECT_EQ(error_of("control: { rls: { domain: {} } }"),
            "t.yaml:1:19: control.rls.domain: unknown key 'domain' (allowed: domains)");
  // Configured domains replace the built-in one.
  Config c = load_ok("control: { rls: { domains: { edge: { x-tenant-id: tenant } } } }");
  EXPECT_EQ(c.control.rls_domains.size(), 1u);
  EXPECT_EQ(c.control.rls_domains.at("edge").at("x-tenant-id"), "tenant");
}

TEST(Errors, StringsMustBeUtf8) {
  EXPECT_EQ(error_of("control: { auth_token: \"tok\xff\" }"),
            "t.yaml:1:24: control.auth_token: not valid UTF-8");
  EXPECT_EQ(error_of("dataplane:\n  classes: { default: {} }\n  eal: [\"\xc0\xaf\"]\n"),
            "t.yaml:3:9: dataplane.eal[0]: not valid UTF-8");  // overlong '/'
  EXPECT_EQ(error_of("control: { auth_token: \"\xed\xa0\x80\" }"),
            "t.yaml:1:24: control.auth_token: not valid UTF-8");  // a surrogate
  EXPECT_EQ(load_ok("control: { auth_token: \"caf\xc3\xa9 \xf0\x9f\x94\x91\" }").control.auth_token,
            "caf\xc3\xa9 \xf0\x9f\x94\x91");
}

// The dataplane's metrics listener: off when absent or empty, a listen address like
// control.listen otherwise, restart-only (reload_test).
TEST(Errors, DataplaneMetricsListen) {
  EXPECT_EQ(load_ok(kDp).dataplane->metrics_listen, "");
  EXPECT_EQ(load_ok(kDp + "  metrics_listen: \"\"\n").dataplane->metrics_listen, "");
  EXPECT_EQ(load_ok(kDp + "  metrics_listen: \"127.0.0.1:9101\"\n").dataplane->metrics_listen,
            "127.0.0.1:9101");
  EXPECT_EQ(load_ok(kDp + "  metrics_listen: \"[::1]:0\"\n").dataplane->metrics_listen, "[::1]:0");
  EXPECT_EQ(error_of(kDp + "  metrics_listen: \"127.0.0.1\"\n"),
            "t.yaml:4:19: dataplane.metrics_listen: bad listen address '127.0.0.1': missing "
            "':port'; expected host:port or [v6-address]:port");
  EXPECT_EQ(error_of(kDp + "  metrics_listen: \"127.0.0.1:99999\"\n"),
            "t.yaml:4:19: dataplane.metrics_listen: bad listen address '127.0.0.1:99999': bad port "
            "'99999' (0 to 65535); expected host:port or [v6-address]:port");
  EXPECT_EQ(error_of(kDp + "  metrics_listen: [9101]\n"),
            "t.yaml:4:19: dataplane.metrics_listen: expected a string, got a list");
}

TEST(Errors, SocketPaths) {
  EXPECT_EQ(error_of("control: { dataplane_socket: \"\" }"),
            "t.yaml:1:30: control.dataplane_socket: must not be empty");
  EXPECT_EQ(error_of(kDp + "  control_socket: /" + std::string(107, 'x') + "\n"),
            "t.yaml:4:19: dataplane.control_socket: a unix socket path is at most 107 bytes, got "
            "108");
  EXPECT_EQ(error_of(kDp + "  control_socket_group: \"-x\"\n"),
            "t.yaml:4:25: dataplane.control_socket_group: must be a group name (letters, digits, "
            "'_', '-', '.'; at most 32) or a group number, got '-x'");
  EXPECT_EQ(error_of(kDp + "  control_socket_group: [a]\n"),
            "t.yaml:4:25: dataplane.control_socket_group: expected a string, got a list");
  EXPECT_EQ(load_ok(kDp + "  control_socket_group: dripgate\n").dataplane->control_socket_group,
            "dripgate");
  EXPECT_EQ(load_ok(kDp + "  control_socket_group: \"996\"\n").dataplane->control_socket_group,
            "996");
}

TEST(Errors, YamlSyntaxWithPosition) {
  // The position is where yaml-cpp notices the problem.
  EXPECT_EQ(error_of("redis: { url: \"x\"\ncontrol: {}\n"),
            "t.yaml:2:1: YAML syntax error: end of map flow not found");
  EXPECT_EQ(error_of("plans:\n  pro: {}\n bad: 1\n"),
            "t.yaml:3:2: YAML syntax error: end of map not found");
  EXPECT_EQ(error_of("redis: { url: \"abc"),
            "t.yaml:1:19: YAML syntax error: illegal EOF in scalar");
  EXPECT_EQ(error_of("redis: url: x\n"), "t.yaml:1:11: YAML syntax error: illegal map value");
  EXPECT_EQ(error_of("redis:\n  url: x\n    timeout_ms: 5\n"),
            "t.yaml:3:15: YAML syntax error: illegal map value");
  EXPECT_EQ(error_of("a: *nope\n"),
            "t.yaml:1:4: YAML syntax error: the referenced anchor is not defined");
  EXPECT_EQ(error_of("\t- x\n"), "t.yaml:1:2: YAML syntax error: illegal block entry");
  // yaml-cpp 0.7.0 loops forever (allocating) on these in LoadAll; found by loader_fuzz.
  EXPECT_EQ(error_of(","), "t.yaml:1:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(error_of(",\r"), "t.yaml:1:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(error_of(",\x0b"), "t.yaml:1:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(error_of("\n,\n    "), "t.yaml:2:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(error_of("{}\n---\n,\n"),
            "t.yaml:2:1: more than one YAML document; a config file "
            "holds exactly one");
}

// A path that is not a regular file is refused unread: /dev/zero would otherwise be read for
// gigabytes before the size check, a FIFO waited on forever. A FIFO's load runs on a thread
// with a guard: should it block, the test fails and a writer releases it, instead of the test
// hanging.
TEST(Errors, WhatIsNotARegularFileIsRefusedUnreadWithoutBlocking) {
  char tmpl[] = "/tmp/dg-cfgfifo-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string fifo = dir + "/control.yaml", zero = dir + "/zero.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::promise<LoadResult> done;
  std::future<LoadResult> loaded = done.get_future();
  std::thread loader([&] { done.set_value(load_file(fifo)); });
  if (loaded.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "loading a FIFO blocked";
    ::close(::open(fifo.c_str(), O_WRONLY));  // a writer that closes: the reader sees the end
  }
  loader.join();
  LoadResult r = loaded.get();
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].str(),
            fifo + ": is a FIFO, not a regular file; a configuration is read from a regular file");

  std::filesystem::create_symlink("/dev/zero", zero);
  for (const std::string& path : {std::string("/dev/zero"), zero}) {
    r = load_file(path);
    ASSERT_EQ(r.errors.size(), 1u) << path;
    EXPECT_EQ(r.errors[0].str(), path +
                                     ": is a character device, not a regular file; a "
                                     "configuration is read from a regular file");
  }
  std::string text;
  auto why = read_config_file(dir, text);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->str(), dir + ": is a directory, not a YAML file");
  // What stat says of a file's size is not what is read: /proc's files say 0.
  EXPECT_FALSE(read_config_file("/proc/self/status", text));
  EXPECT_NE(text.find("Name:"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Errors, DocumentShape) {
  EXPECT_EQ(error_of(""),
            "t.yaml:1:1: the configuration is empty; expected a mapping of redis, "
            "control, plans, tenants, global_gates, dataplane");
  EXPECT_EQ(error_of("# only a comment\n"),
            "t.yaml:1:1: the configuration is empty; expected a mapping of redis, control, "
            "plans, tenants, global_gates, dataplane");
  EXPECT_EQ(error_of("{}\n---\n{}\n"),
            "t.yaml:2:1: more than one YAML document; a config file holds exactly one");
  LoadResult r = load_file("/nonexistent/dripgate.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].str(),
            "/nonexistent/dripgate.yaml: cannot open: No such file or directory");
  EXPECT_FALSE(r.config);
}

TEST(Errors, EmptySectionsAreEmpty) {
  // A section with everything commented out is not an error.
  Config c = load_ok("redis:\ncontrol:\nplans:\ntenants:\nglobal_gates:\n");
  EXPECT_TRUE(c.plans.empty());
  EXPECT_EQ(c.control.listen, "127.0.0.1:8080");
  EXPECT_FALSE(c.dataplane);
}

// ---------------------------------------------------------------------------------------------
// dataplane

TEST(Dataplane, EalMustBeAListOfStrings) {
  EXPECT_EQ(error_of(kDp + "  eal: \"-l 0-1\"\n"),
            "t.yaml:4:8: dataplane.eal: expected a list of strings, got '-l 0-1'");
  EXPECT_EQ(errors_of(kDp + "  eal: [\"-l\", [\"0-1\"], {a: b}]\n"),
            (std::vector<std::string>{
                "t.yaml:4:15: dataplane.eal[1]: expected a string, got a list",
                "t.yaml:4:24: dataplane.eal[2]: expected a string, got a mapping",
            }));
  // Numbers are strings to EAL.
  EXPECT_EQ(load_ok(kDp + "  eal: [-m, 512]\n").dataplane->eal,
            (std::vector<std::string>{"-m", "512"}));
}

TEST(Dataplane, PortsAndLcores) {
  EXPECT_EQ(error_of(kDp + "  ports: { client: a, cluster: 1 }\n"),
            "t.yaml:4:20: dataplane.ports.client: expected an integer, got 'a'");
  EXPECT_EQ(error_of(kDp + "  ports: { client: 0, cluster: 65536 }\n"),
            "t.yaml:4:32: dataplane.ports.cluster: must be <= 65535, got 65536");
  EXPECT_EQ(error_of(kDp + "  ports: { client: 2, cluster: 2 }\n"),
            "t.yaml:4:32: dataplane.ports.cluster: must differ from ports.client (both are 2)");
  EXPECT_EQ(error_of(kDp + "  ports: { client: 1 }\n"),
            "t.yaml:4:10: dataplane.ports.cluster: must differ from ports.client (both are 1)");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: -1, drip: 1 }\n"),
            "t.yaml:4:17: dataplane.lcores.rx: must be between 0 and 1023, got -1");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: 1, drip: 1.5 }\n"),
            "t.yaml:4:26: dataplane.lcores.drip: expected an integer, got '1.5'");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: 1, tx: 1 }\n"),
            "t.yaml:4:20: dataplane.lcores.tx: unknown key 'tx' (allowed: rx, drip)");
  // RSS: several RX lcores, each its own, none the drip lcore; enough RX queues for them.
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: [1, 2, 1], drip: 3 }\n"),
            "t.yaml:4:24: dataplane.lcores.rx[2]: lcore 1 is listed twice");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: [1, 2], drip: 2 }\n"),
            "t.yaml:4:17: dataplane.lcores.rx: with several RX lcores the drip lcore (2) must be "
            "another one");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: [], drip: 2 }\n"),
            "t.yaml:4:17: dataplane.lcores.rx: expected 1 to 16 lcores, got 0");
  EXPECT_EQ(error_of(kDp + "  lcores: { rx: [1, x], drip: 2 }\n"),
            "t.yaml:4:21: dataplane.lcores.rx[1]: expected an integer, got 'x'");
  EXPECT_EQ(error_of(kDp + "  ports: { client: 0, cluster: 1, rx_queues: 1 }\n" +
                     "  lcores: { rx: [1, 2], drip: 3 }\n"),
            "t.yaml:4:46: dataplane.ports.rx_queues: must be at least the number of RX lcores "
            "(2): each polls its own queues");
  EXPECT_EQ(error_of(kDp + "  ports: { client: 0, cluster: 1, rx_queues: 0 }\n"),
            "t.yaml:4:46: dataplane.ports.rx_queues: must be between 1 and 1024, got 0");
  EXPECT_EQ(error_of(kDp + "  mbufs: 0\n"), "t.yaml:4:10: dataplane.mbufs: must be >= 1, got 0");
  EXPECT_EQ(error_of(kDp + "  mtu: 67\n"),
            "t.yaml:4:8: dataplane.mtu: must be between 68 and 9216, got 67");
  EXPECT_EQ(error_of(kDp + "  mtu: 9217\n"),
            "t.yaml:4:8: dataplane.mtu: must be between 68 and 9216, got 9217");
  EXPECT_EQ(error_of(kDp + "  mtu: jumbo\n"),
            "t.yaml:4:8: dataplane.mtu: expected an integer, got 'jumbo'");
  EXPECT_EQ(load_ok(kDp).dataplane->mtu, 1500u);
  EXPECT_EQ(load_ok(kDp + "  mtu: 68\n").dataplane->mtu, 68u);
  EXPECT_EQ(load_ok(kDp + "  mtu: 9216\n").dataplane->mtu, 9216u);
}

TEST(Dataplane, DripAndClassRates) {
  // 0 is unlimited in the dataplane, so it is accepted there (and only there).
  Config c = load_ok(Y(R"(
dataplane:
  drip: { rate_pps: 0, rate_bps: 0, batch: 1, max_catchup: 0 }
  classes:
    default: { weight: 1, rate_pps: 0, rate_bps: 0 }
)"));
  EXPECT_EQ(c.dataplane->drip.rate_pps, 0);
  EXPECT_EQ(c.dataplane->drip.max_catchup, 0u);
  EXPECT_EQ(c.dataplane->classes[0].rate_pps, 0);
  EXPECT_EQ(error_of(kDp + "  drip: { rate_pps: -1 }\n"),
            "t.yaml:4:21: dataplane.drip.rate_pps: must be >= 0, got -1 (0 means unlimited)");
  EXPECT_EQ(error_of(kDp + "  drip: { rate_bps: -1e9 }\n"),
            "t.yaml:4:21: dataplane.drip.rate_bps: must be >= 0, got -1e9 (0 means unlimited)");
  EXPECT_EQ(error_of(kDp + "  drip: { batch: 0 }\n"),
            "t.yaml:4:18: dataplane.drip.batch: must be >= 1, got 0");
  EXPECT_EQ(error_of(kDp + "  drip: { max_catchup: -1 }\n"),
            "t.yaml:4:24: dataplane.drip.max_catchup: must be >= 0, got -1");
}

TEST(Dataplane, Classes) {
  auto cls = [](const std::string& body) {
    return error_of("dataplane:\n  classes:\n    default: { " + body + " }\n");
  };
  EXPECT_EQ(cls("weight: 0"), "t.yaml:3:24: dataplane.classes.default.weight: must be >= 1, got 0");
  EXPECT_EQ(cls("queue_depth: 0"),
            "t.yaml:3:29: dataplane.classes.default.queue_depth: must be between 1 and 1073741824, "
            "got 0");
  EXPECT_EQ(cls("ttl_ms: 0"), "t.yaml:3:24: dataplane.classes.default.ttl_ms: must be >= 1, got 0");
  EXPECT_EQ(cls("rate_pps: -2"),
            "t.yaml:3:26: dataplane.classes.default.rate_pps: must be >= 0, got -2 (0 means "
            "unlimited)");
  EXPECT_EQ(cls("rate_bps: x"),
            "t.yaml:3:26: dataplane.classes.default.rate_bps: expected a number, got 'x'");
  EXPECT_EQ(cls("prio: 1"),
            "t.yaml:3:16: dataplane.classes.default.prio: unknown key 'prio' (allowed: weight, "
            "rate_pps, rate_bps, queue_depth, ttl_ms, priority, fairness, subqueues, "
            "tenant_depth, aqm)");
  EXPECT_EQ(cls("fairness: tenants"),
            "t.yaml:3:26: dataplane.classes.default.fairness: must be one of tenant, flow, none; "
            "got 'tenants'");
  EXPECT_EQ(cls("priority: 256"),
            "t.yaml:3:26: dataplane.classes.default.priority: must be between 0 and 255, got 256");
  EXPECT_EQ(cls("subqueues: 0"),
            "t.yaml:3:27: dataplane.classes.default.subqueues: must be between 1 and 65536, got 0");
  EXPECT_EQ(cls("aqm: { target_ms: 0 }"),
            "t.yaml:3:34: dataplane.classes.default.aqm.target_ms: must be >= 0.001, got 0");
  EXPECT_EQ(cls("aqm: { ecn: yes }"),
            "t.yaml:3:28: dataplane.classes.default.aqm.ecn: expected true or false, got 'yes'");
  EXPECT_EQ(cls("aqm: { target_ms: 50, interval_ms: 10 }"),
            "t.yaml:3:21: dataplane.classes.default.aqm.interval_ms: must be >= target_ms");
  EXPECT_EQ(cls("aqm: { tgt: 5 }"),
            "t.yaml:3:23: dataplane.classes.default.aqm.tgt: unknown key 'tgt' (allowed: "
            "target_ms, interval_ms, ecn)");
  {
    const Class c = load_ok(
                        "dataplane:\n  classes:\n    default: { priority: 2, fairness: flow, "
                        "subqueues: 16384, tenant_depth: 64, aqm: { target_ms: 2.5, ecn: "
                        "true } }\n")
                        .dataplane->classes[0];
    EXPECT_EQ(c.priority, 2u);
    EXPECT_EQ(c.fairness, Fairness::kFlow);
    EXPECT_EQ(c.subqueues, 16384u);
    EXPECT_EQ(c.tenant_depth, 64u);
    ASSERT_TRUE(c.aqm);
    EXPECT_EQ(*c.aqm, (Aqm{2.5, 100, true}));
    // The defaults: fair by tenant, no AQM.
    const Class d = load_ok("dataplane:\n  classes:\n    default: {}\n").dataplane->classes[0];
    EXPECT_EQ(d.fairness, Fairness::kTenant);
    EXPECT_EQ(d.priority, 0u);
    EXPECT_FALSE(d.aqm);
  }
  // A queue depth need not be a power of two.
  EXPECT_EQ(load_ok("dataplane:\n  classes:\n    default: { queue_depth: 1000 }\n")
                .dataplane->classes[0]
                .queue_depth,
            1000u);
  EXPECT_EQ(error_of("dataplane:\n  classes: {}\n"),
            "t.yaml:2:12: dataplane.classes: at least one class is required");
  EXPECT_EQ(error_of("dataplane:\n  mbufs: 5\n"),
            "t.yaml:2:3: dataplane.classes: required field is missing");
  EXPECT_EQ(error_of("dataplane:\n  classes:\n    \"a b\": {}\n"),
            "t.yaml:3:5: dataplane.classes.a b: 'a b' is not a valid id (1 to 64 of A-Z a-z 0-9 "
            ". _ -)");
}

TEST(Dataplane, ClassifyRules) {
  auto rule = [](const std::string& body) {
    return error_of(kDp + "  classify:\n    - { " + body + " }\n");
  };
  EXPECT_EQ(rule("src: \"10.1.0.0/33\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].src: bad CIDR '10.1.0.0/33': bad prefix length 33 "
            "(at most 32 for IPv4)");
  EXPECT_EQ(rule("src: \"10.1.0.0/x\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].src: bad CIDR '10.1.0.0/x': bad prefix length 'x'");
  EXPECT_EQ(rule("src: \"10.1.0/16\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].src: bad CIDR '10.1.0/16': bad IPv4 address "
            "'10.1.0'");
  EXPECT_EQ(rule("dst: \"10.1.2.3/16\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].dst: bad CIDR '10.1.2.3/16': host bits set in "
            "'10.1.2.3/16' (the network is 10.1.0.0/16)");
  EXPECT_EQ(rule("dst: \"2001:db8::/129\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].dst: bad CIDR '2001:db8::/129': bad prefix length "
            "129 (at most 128 for IPv6)");
  EXPECT_EQ(rule("src: \"2001:db8:::/64\", class: default"),
            "t.yaml:5:14: dataplane.classify[0].src: bad CIDR '2001:db8:::/64': bad IPv6 address "
            "'2001:db8:::'");
  EXPECT_EQ(rule("vlan: 4096, class: default"),
            "t.yaml:5:15: dataplane.classify[0].vlan: must be between 0 and 4095, got 4096");
  EXPECT_EQ(rule("dscp: 64, class: default"),
            "t.yaml:5:15: dataplane.classify[0].dscp: must be between 0 and 63, got 64");
  EXPECT_EQ(rule("dscp: -1, class: default"),
            "t.yaml:5:15: dataplane.classify[0].dscp: must be between 0 and 63, got -1");
  EXPECT_EQ(rule("vlan: 7"), "t.yaml:5:7: dataplane.classify[0].class: required field is missing");
  EXPECT_EQ(rule("vlan: 7, class: gold"),
            "t.yaml:5:25: dataplane.classify[0].class: no class named 'gold' in dataplane.classes "
            "(defined: default)");
  EXPECT_EQ(rule("port: 7, class: default"),
            "t.yaml:5:9: dataplane.classify[0].port: unknown key 'port' (allowed: src, dst, vlan, "
            "dscp, class)");
  EXPECT_EQ(error_of(kDp + "  classify: { src: \"10.0.0.0/8\" }\n"),
            "t.yaml:4:13: dataplane.classify: expected a list of rules, got a mapping");

  Config c = load_ok(kDp + Y(R"(
  classify:
    - { src: "10.1.0.0/16", dst: "2001:db8::/32", vlan: 0, dscp: 63, class: default }
    - { src: "192.168.1.7", class: default }
    - { class: default }
)"));
  const auto& rules = c.dataplane->classify;
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].src_net, (common::Cidr{false, {10, 1}, 16}));
  EXPECT_EQ(rules[0].dst_net, (common::Cidr{true, {0x20, 0x01, 0x0d, 0xb8}, 32}));
  EXPECT_EQ(rules[0].vlan, 0);
  EXPECT_EQ(rules[0].dscp, 63);
  EXPECT_EQ(rules[1].src_net, (common::Cidr{false, {192, 168, 1, 7}, 32}));
  EXPECT_FALSE(rules[2].src || rules[2].dst || rules[2].vlan || rules[2].dscp);
}

TEST(Dataplane, UnknownFlows) {
  EXPECT_EQ(error_of(kDp + "  unknown_flows: forward\n"),
            "t.yaml:4:18: dataplane.unknown_flows: must be one of default, drop, pass; got "
            "'forward'");
  EXPECT_EQ(error_of("dataplane:\n  classes: { gold: {} }\n  unknown_flows: default\n"),
            "t.yaml:3:18: dataplane.unknown_flows: is 'default' but there is no class named "
            "'default' (defined: gold); add one, or set unknown_flows to drop or pass");
  // Not written: `default` is the default, and the error points at the classes.
  EXPECT_EQ(error_of("dataplane:\n  classes: { gold: {} }\n"),
            "t.yaml:2:12: dataplane.classes: is 'default' but there is no class named 'default' "
            "(defined: gold); add one, or set unknown_flows to drop or pass");
  EXPECT_EQ(load_ok("dataplane:\n  classes: { gold: {} }\n  unknown_flows: drop\n")
                .dataplane->unknown_flows,
            UnknownFlows::kDrop);
  EXPECT_EQ(load_ok("dataplane:\n  classes: { gold: {} }\n  unknown_flows: pass\n")
                .dataplane->unknown_flows,
            UnknownFlows::kPass);
  EXPECT_EQ(error_of(kDp + "  flow_idle_timeout_s: 0\n"),
            "t.yaml:4:24: dataplane.flow_idle_timeout_s: must be >= 1, got 0");
  EXPECT_EQ(error_of(kDp + "  flow_table_size: 0\n"),
            "t.yaml:4:20: dataplane.flow_table_size: must be >= 1, got 0");
}

TEST(Dataplane, PlanClassMustBeADataplaneClass) {
  const std::string dp = "dataplane:\n  classes: { default: {}, gold: {} }\n";
  EXPECT_EQ(error_of(dp + "plans:\n  pro: { class: silver }\n"),
            "t.yaml:4:17: plans.pro.class: no class named 'silver' in dataplane.classes "
            "(defined: default, gold)");
  // Without `class:` a plan uses "default", which must then exist too.
  EXPECT_EQ(error_of("dataplane:\n  classes: { gold: {} }\n  unknown_flows: drop\n"
                     "plans:\n  pro: {}\n"),
            "t.yaml:5:3: plans.pro.class: the plan has no class, so it uses 'default', but there "
            "is no class named 'default' in dataplane.classes (defined: gold)");
  EXPECT_EQ(load_ok(dp + "plans:\n  pro: { class: gold }\n").plans.at("pro").cls, "gold");
  // Without a dataplane section any class name is accepted (the dataplane may run elsewhere).
  EXPECT_EQ(load_ok("plans:\n  pro: { class: silver }\n").plans.at("pro").cls, "silver");
}

// ---------------------------------------------------------------------------------------------
// many errors at once

TEST(Errors, AllErrorsOfAFileInDocumentOrder) {
  auto errs = errors_of(Y(R"(
redis: { url: "http://x", timeout_ms: 0 }
control: { listen: "nope", threads: 0, colour: blue }
plans:
  pro:
    class: gold
    gates:
      tenant: { capacity: 0, refill_per_s: 5 }
      user: { capacity: 6 }
    quota: { tokens_per_month: -5 }
tenants:
  ws-a: { plan: pro }
  ws-b: { plan: missing }
  "bad id": { plan: pro }
dataplane:
  eal: [1, [2]]
  classes:
    default: { weight: 0 }
  classify:
    - { src: "10.0.0.0/40", class: gold }
)"));
  std::vector<std::string> want = {
      "t.yaml:1:15: redis.url: bad redis URL 'http://x': the scheme must be redis:// or "
      "unix://; expected redis://[[user][:password]@]host[:port][/db] or unix:///path",
      "t.yaml:1:39: redis.timeout_ms: must be >= 1, got 0",
      "t.yaml:2:20: control.listen: bad listen address 'nope': missing ':port'; expected "
      "host:port or [v6-address]:port",
      "t.yaml:2:37: control.threads: must be between 1 and 1024, got 0",
      "t.yaml:2:40: control.colour: unknown key 'colour' (allowed: listen, threads, auth_token, "
      "auth_token_file, auth_token_env, admin_token, admin_token_file, admin_token_env, "
      "dataplane_socket, max_connections, request_timeout_s, decision_log, grpc_listen, "
      "grpc_max_inflight, rls, queue, tls, grpc_tls, status, auth, metrics_token, "
      "metrics_token_file, metrics_token_env, openai_headers)",
      "t.yaml:5:12: plans.pro.class: no class named 'gold' in dataplane.classes (defined: "
      "default)",
      "t.yaml:7:27: plans.pro.gates.tenant.capacity: must be >= 1, got 0 (a request costs 1 "
      "token)",
      "t.yaml:8:13: plans.pro.gates.user.refill_per_s: required field is missing",
      "t.yaml:9:32: plans.pro.quota.tokens_per_month: must be >= 1, got -5",
      "t.yaml:12:17: tenants.ws-b.plan: no plan named 'missing' (defined: pro)",
      "t.yaml:13:3: tenants.bad id: 'bad id' is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)",
      "t.yaml:15:12: dataplane.eal[1]: expected a string, got a list",
      "t.yaml:17:24: dataplane.classes.default.weight: must be >= 1, got 0",
      "t.yaml:19:14: dataplane.classify[0].src: bad CIDR '10.0.0.0/40': bad prefix length 40 "
      "(at most 32 for IPv4)",
      "t.yaml:19:36: dataplane.classify[0].class: no class named 'gold' in dataplane.classes "
      "(defined: default)",
  };
  EXPECT_EQ(errs, want);
}

// ---------------------------------------------------------------------------------------------
// round trip

TEST(RoundTrip, EveryFieldIsReadAndWrittenBack) {
  const std::string yaml = Y(R"(
redis:
  url: "redis://:pw@10.2.3.4:6390/5"
  timeout_ms: 75
  pool_size: 9
  on_failure: local
  local_share: 0.25
  journal: /tmp/dg.journal
control:
  listen: "[::1]:9090"
  threads: 6
  auth_token: "tok en"
  admin_token: "adm in"
  dataplane_socket: /tmp/dp.sock
  decision_log: { path: /tmp/decisions.jsonl, sample: 0.25 }
  grpc_listen: "127.0.0.1:8081"
  grpc_max_inflight: 512
  openai_headers: false
  rls: { domains: { edge: { x-tenant-id: tenant, x-model: model, tenant: tenant } } }
  queue: { max_waiters: 5000, max_waiters_per_tenant: 50 }
  status: { dataplane_metrics_url: "http://127.0.0.1:9101/metrics", iat_metrics_url: "http://h:9/m" }
plans:
  pro:
    class: gold
    queue: { max_wait_ms: 1500, priority: 3 }
    gates:
      tenant:  { capacity: 21, refill_per_s: 5.5 }
      user:    { capacity: 7, refill_per_s: 2.25 }
      api_key: { capacity: 11, refill_per_s: 0.125 }
      ip:      { capacity: 13, refill_per_s: 0.5, warmup_s: 30 }
      tenant_tokens: { capacity: 60000, refill_per_s: 1000, warmup_s: 120.5, mode: shadow }
    quota: { tokens_per_month: 123456789012, tokens_per_hour: 77, reservation_ttl_s: 601, max_open_reservations: 9 }
    concurrency: { max_streams: 51, lease_s: 121 }
    on_failure: open
  lite:
    class: default
    gates: { user: { algorithm: sliding_window, limit: 17, window_s: 2.5, mode: shadow } }
tenants:
  ws-1: { plan: pro }
  ws-2: { plan: lite }
global_gates:
  tool:
    web_search: { capacity: 3, refill_per_s: 0.75 }
    code_exec: { algorithm: sliding_window, limit: 30, window_s: 10 }
  model: { llama-70b: { capacity: 201, refill_per_s: 101 } }
  model_tokens: { llama-70b: { capacity: 90000, refill_per_s: 900, warmup_s: 600 } }
  total: { capacity: 5000, refill_per_s: 2500, warmup_s: 86400 }
dataplane:
  eal: ["-l", "2-3", "--vdev=net_ring0"]
  ports: { client: 3, cluster: 2, rx_queues: 4 }
  lcores: { rx: [2, 4], drip: 3 }
  mbufs: 4095
  mtu: 9000
  drip: { rate_pps: 12345.5, rate_bps: 1e9, batch: 4, max_catchup: 16 }
  classes:
    gold: { weight: 5, rate_pps: 100, rate_bps: 2000000, queue_depth: 77, ttl_ms: 250 }
    default: { weight: 2, rate_pps: 0, rate_bps: 0, queue_depth: 9, ttl_ms: 9999 }
  classify:
    - { src: "10.1.0.0/16", dst: "fd00::/8", vlan: 4095, dscp: 46, class: gold }
    - { dst: "192.0.2.1", class: default }
  unknown_flows: pass
  flow_idle_timeout_s: 42
  flow_table_size: 1024
  control_socket: /tmp/dg.sock
  control_socket_group: dripgate
  metrics_listen: "127.0.0.1:9101"
)");
  Config c = load_ok(yaml);
  EXPECT_EQ(c.redis.url, "redis://:pw@10.2.3.4:6390/5");
  EXPECT_EQ(c.redis.host, "10.2.3.4");
  EXPECT_EQ(c.redis.port, 6390);
  EXPECT_EQ(c.redis.db, 5);
  EXPECT_EQ(c.redis.password, "pw");
  EXPECT_EQ(c.redis.timeout_ms, 75);
  EXPECT_EQ(c.redis.pool_size, 9);
  EXPECT_EQ(c.redis.on_failure, OnFailure::kLocal);
  EXPECT_EQ(c.redis.local_share, 0.25);
  EXPECT_EQ(c.redis.journal, "/tmp/dg.journal");
  EXPECT_EQ(c.plans.at("pro").on_failure, OnFailure::kOpen);
  EXPECT_FALSE(c.plans.at("lite").on_failure);
  EXPECT_EQ(c.control.listen, "[::1]:9090");
  EXPECT_EQ(c.control.threads, 6);
  EXPECT_EQ(c.control.auth_token, "tok en");
  EXPECT_EQ(c.control.dataplane_socket, "/tmp/dp.sock");
  EXPECT_EQ(c.control.admin_token, "adm in");
  EXPECT_EQ(c.control.decision_log, (DecisionLog{"/tmp/decisions.jsonl", 0.25}));
  EXPECT_EQ(c.control.grpc_listen, "127.0.0.1:8081");
  EXPECT_EQ(c.control.grpc_max_inflight, 512);
  EXPECT_FALSE(c.control.openai_headers);
  EXPECT_EQ(c.control.queue, (Control::Queue{5000, 50}));
  EXPECT_EQ(c.plans.at("pro").queue, (PlanQueue{1500, 3}));
  using KeyMap = std::map<std::string, std::string>;
  EXPECT_EQ(c.control.rls_domains,
            (std::map<std::string, KeyMap>{
                {"edge",
                 KeyMap{{"x-tenant-id", "tenant"}, {"x-model", "model"}, {"tenant", "tenant"}}}}));
  const Plan& pro = c.plans.at("pro");
  EXPECT_EQ(pro.name, "pro");
  EXPECT_EQ(pro.cls, "gold");
  EXPECT_EQ(pro.tenant, (Bucket{21, 5.5}));
  EXPECT_EQ(pro.user, (Bucket{7, 2.25}));
  EXPECT_EQ(pro.api_key, (Bucket{11, 0.125}));
  EXPECT_EQ(pro.ip, (Bucket{13, 0.5, GateMode::kEnforce, Algorithm::kTokenBucket, 0, 0, 30}));
  EXPECT_EQ(pro.tenant_tokens,
            (Bucket{60000, 1000, GateMode::kShadow, Algorithm::kTokenBucket, 0, 0, 120.5}));
  EXPECT_EQ(pro.quota,
            (Quota{{{common::Period::kHour, 77}, {common::Period::kMonth, 123456789012}}, 601, 9}));
  EXPECT_EQ(pro.concurrency, (Concurrency{51, 121}));
  EXPECT_EQ(c.plans.at("lite").cls, "default");
  EXPECT_FALSE(c.plans.at("lite").tenant);
  EXPECT_EQ(c.plans.at("lite").user,
            (Bucket{0, 0, GateMode::kShadow, Algorithm::kSlidingWindow, 17, 2.5}));
  EXPECT_EQ(c.global_gates.tool.at("code_exec"),
            (Bucket{0, 0, GateMode::kEnforce, Algorithm::kSlidingWindow, 30, 10}));
  EXPECT_EQ(c.tenants.at("ws-1"), (Tenant{"ws-1", "pro"}));
  EXPECT_EQ(c.tenants.at("ws-2"), (Tenant{"ws-2", "lite"}));
  EXPECT_EQ(c.global_gates.tool.at("web_search"), (Bucket{3, 0.75}));
  EXPECT_EQ(c.global_gates.model.at("llama-70b"), (Bucket{201, 101}));
  EXPECT_EQ(c.global_gates.model_tokens.at("llama-70b"),
            (Bucket{90000, 900, GateMode::kEnforce, Algorithm::kTokenBucket, 0, 0, 600}));
  EXPECT_EQ(c.global_gates.total,
            (Bucket{5000, 2500, GateMode::kEnforce, Algorithm::kTokenBucket, 0, 0, 86400}));
  ASSERT_TRUE(c.dataplane);
  const Dataplane& dp = *c.dataplane;
  EXPECT_EQ(dp.eal, (std::vector<std::string>{"-l", "2-3", "--vdev=net_ring0"}));
  EXPECT_EQ(dp.client_port, 3);
  EXPECT_EQ(dp.cluster_port, 2);
  EXPECT_EQ(dp.rx_lcores, (std::vector<unsigned>{2, 4}));
  EXPECT_EQ(dp.rx_queues, 4);
  EXPECT_EQ(dp.drip_lcore, 3u);
  EXPECT_EQ(dp.mbufs, 4095u);
  EXPECT_EQ(dp.mtu, 9000u);
  EXPECT_EQ(dp.drip, (Drip{12345.5, 1e9, 4, 16}));
  ASSERT_EQ(dp.classes.size(), 2u);
  EXPECT_EQ(dp.classes[0], (test_class("gold", 5, 100, 2000000, 77, 250)));
  EXPECT_EQ(dp.classes[1], (test_class("default", 2, 0, 0, 9, 9999)));
  ASSERT_EQ(dp.classify.size(), 2u);
  EXPECT_EQ(dp.classify[0].src, "10.1.0.0/16");
  EXPECT_EQ(dp.classify[0].dst, "fd00::/8");
  EXPECT_EQ(dp.classify[0].dst_net, (common::Cidr{true, {0xfd}, 8}));
  EXPECT_EQ(dp.classify[0].vlan, 4095);
  EXPECT_EQ(dp.classify[0].dscp, 46);
  EXPECT_EQ(dp.classify[0].cls, "gold");
  EXPECT_FALSE(dp.classify[1].src);
  EXPECT_EQ(dp.classify[1].dst, "192.0.2.1");
  EXPECT_EQ(dp.classify[1].cls, "default");
  EXPECT_EQ(dp.unknown_flows, UnknownFlows::kPass);
  EXPECT_EQ(dp.flow_idle_timeout_s, 42u);
  EXPECT_EQ(dp.flow_table_size, 1024u);
  EXPECT_EQ(dp.control_socket, "/tmp/dg.sock");
  EXPECT_EQ(dp.control_socket_group, "dripgate");
  EXPECT_EQ(dp.metrics_listen, "127.0.0.1:9101");

  // Written out and read again, nothing changes.
  const std::string again = to_yaml(c);
  Config back = load_ok(again);
  EXPECT_EQ(back, c) << again;
  EXPECT_EQ(to_yaml(back), again);
}

TEST(RoundTrip, DefaultsAndTheExamplesSurviveToYaml) {
  for (const char* name : {"default.yaml", "walkthrough.yaml", "dataplane-veth.yaml"}) {
    LoadResult r = load_file(kExamples + "/" + name);
    ASSERT_TRUE(r.config) << name;
    LoadResult back = load_string(to_yaml(*r.config), r.config->source);
    ASSERT_TRUE(back.config) << name << "\n" << to_yaml(*r.config);
    EXPECT_EQ(*back.config, *r.config) << name;
  }
  Config empty = load_ok("{}");
  EXPECT_EQ(load_ok(to_yaml(empty)), empty);
}

// ---------------------------------------------------------------------------------------------
// hostile input: always a result, never a throw

TEST(Robustness, GarbageGivesErrorsNotExceptions) {
  const std::vector<std::string> inputs = {
      std::string("\0\xff\xfe", 3),
      std::string(5000, '['),
      std::string(5000, '{'),
      "a: &x [*x]\n",
      "? [a, b]\n: c\n",
      "!!binary AAAA\n",
      "%YAML 9.9\n---\n{}\n",
      "dataplane: { eal: &e [*e] }\n",
      "redis: !!map { url: 5 }\n",
      "plans: { p: { gates: { tenant: { capacity: 1e999, refill_per_s: 1 } } } }\n",
  };
  for (const auto& in : inputs) {
    LoadResult r;
    EXPECT_NO_THROW(r = load_string(in, "t.yaml")) << in.substr(0, 40);
    EXPECT_FALSE(r.config) << in.substr(0, 40);
    EXPECT_FALSE(r.errors.empty()) << in.substr(0, 40);
  }
}

// ---------------------------------------------------------------------------------------------
// the embedded default serves no tenant

// A daemon started without --config runs on the embedded default: it must put no tenant on a
// plan, neither by name nor through a default entry "*".
TEST(Examples, EmbeddedDefaultListsNoTenants) {
  LoadResult r = load_default();
  for (const auto& e : r.errors) ADD_FAILURE() << e.str();
  ASSERT_TRUE(r.config);
  EXPECT_TRUE(r.config->tenants.empty());
  EXPECT_FALSE(r.config->plans.empty());  // the plans stay, as documentation
}

}  // namespace
}  // namespace dripgate::config
