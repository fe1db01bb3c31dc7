// Envoy's rate-limit service end to end: a gRPC client built from the same .proto (and one that
// builds its bytes by hand from Envoy's field numbers) against the service on a real socket,
// deciding against a real redis-server.
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control/admission/brake.h"
#include "control/admission/keys.h"
#include "control/admission/tenant_keys.h"
#include "control/gateway/decision_log.h"
#include "control/metrics/metrics.h"
#include "control/outage/fallback.h"
#include "control/rls/rls_service.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using namespace std::chrono_literals;
const std::string kShouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
using Entries = std::vector<std::pair<std::string, std::string>>;
using Response = pb::RateLimitResponse;

config::Plan plan(std::optional<config::Bucket> tenant, std::optional<config::Quota> quota = {}) {
  config::Plan p;
  p.cls = "gold";
  p.tenant = tenant;
  p.quota = quota;
  return p;
}

void add_tenant(config::Config& c, const std::string& tenant, config::Plan p) {
  p.name = "plan-" + tenant;
  c.plans[p.name] = p;
  c.tenants[tenant] = config::Tenant{tenant, p.name};
}

// A call's outcome: the gRPC status and, when it is OK, the response.
struct Answer {
  grpc::Status status;
  Response resp;
  std::string header(const std::string& key) const {
    for (const auto& h : resp.response_headers_to_add())
      if (h.key() == key) return h.value();
    return "(none)";
  }
};

// A call with hand-made request bytes, to `method` ("/package.Service/Method"); the answer's
// bytes in `out`.
grpc::Status raw_call(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request, std::string* out = nullptr) {
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), answer;
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &in, &answer,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  std::vector<grpc::Slice> slices;
  if (out && status.ok() && answer.Dump(&slices).ok())
    for (const auto& sl : slices) out->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return status;
}

class RlsTest : public ::testing::Test {
 protected:
  RlsTest() {
    EXPECT_FALSE(cfg_.redis.set_url(redis_.url()));
    cfg_.redis.timeout_ms = 500;
    cfg_.control.dataplane_socket = "/nonexistent/dripgate-rls-test.sock";
    cfg_.control.rls_domains["edge"] = {{"x-tenant-id", "tenant"}, {"x-model", "model"}};
    add_tenant(cfg_, "t-warm", plan(config::Bucket{1e6, 1e6}));
  }
  ~RlsTest() override {
    if (server_) server_->stop();
  }

  void start() {
    store_ = std::make_unique<ConfigStore>(cfg_);  // cfg_ as the test has set it up
    server_ = std::make_unique<RlsServer>(*store_, metrics_, 2, fallback_.get(), decisions_.get());
    std::string err;
    ASSERT_TRUE(server_->start("127.0.0.1:0", err)) << err;
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = pb::RateLimitService::NewStub(channel_);
    // Both loops' Redis connections are up once consecutive calls (which the server deals to
    // its loops in turn) have passed on each.
    for (int ok = 0, tries = 0; ok < 4 && tries < 200; ++tries) {
      bool passed = call("dripgate", {{{"tenant", "t-warm"}}}, 0, cfg_.control.auth_token)
                        .resp.overall_code() == Response::OK;
      ok = passed ? ok + 1 : 0;
      if (!passed) std::this_thread::sleep_for(50ms);
    }
  }

  Answer call(const std::string& domain, const std::vector<Entries>& descriptors,
              uint32_t hits_addend = 0, const std::string& bearer = "") {
    pb::RateLimitRequest req;
    req.set_domain(domain);
    req.set_hits_addend(hits_addend);
    for (const auto& d : descriptors) {
      auto* desc = req.add_descriptors();
      for (const auto& [k, v] : d) {
        auto* e = desc->add_entries();
        e->set_key(k);
        e->set_value(v);
      }
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!bearer.empty()) ctx.AddMetadata("authorization", "Bearer " + bearer);
    Answer a;
    a.status = stub_->ShouldRateLimit(&ctx, req, &a.resp);
    return a;
  }

  testing::RedisServer redis_;
  config::Config cfg_;
  Metrics metrics_;
  std::unique_ptr<ConfigStore> store_;
  std::unique_ptr<Fallback> fallback_;          // declared before the server: outlives it
  std::unique_ptr<DecisionLogFile> decisions_;  // the same
  std::unique_ptr<RlsServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::RateLimitService::Stub> stub_;
};

// The token-bucket table of the HTTP API, over gRPC: capacity 5 @ 1/s, six requests.
TEST_F(RlsTest, TokenBucketTable) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  start();
  const uint32_t left[] = {4, 3, 2, 1, 0, 0};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("request " + std::to_string(i + 1));
    Answer a = call("dripgate", {{{"tenant", "ws-acme"}}});
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_EQ(a.resp.statuses_size(), 1);
    const auto& s = a.resp.statuses(0);
    EXPECT_EQ(s.current_limit().name(), "tenant");
    EXPECT_EQ(s.current_limit().requests_per_unit(), 5u);
    EXPECT_EQ(s.current_limit().unit(), Response::RateLimit::MINUTE);  // a 5 s window
    EXPECT_EQ(s.limit_remaining(), left[i]);
    EXPECT_EQ(a.header("RateLimit-Policy"), "\"tenant\";q=5;w=5");
    // OpenAI's headers ride along as response headers, as on the HTTP answer.
    EXPECT_EQ(a.header("x-ratelimit-limit-requests"), "5");
    EXPECT_EQ(a.header("x-ratelimit-remaining-requests"), std::to_string(left[i]));
    EXPECT_NE(a.header("x-ratelimit-reset-requests"), "(none)");
    EXPECT_EQ(a.header("x-ratelimit-limit-tokens"), "(none)");  // no token-rate gate
    if (i < 5) {
      EXPECT_EQ(a.resp.overall_code(), Response::OK);
      EXPECT_EQ(s.code(), Response::OK);
      EXPECT_EQ(a.header("Retry-After"), "(none)");
      ASSERT_EQ(a.resp.request_headers_to_add_size(), 2);
      EXPECT_EQ(a.resp.request_headers_to_add(0).key(), "dripgate-request-id");
      EXPECT_EQ(a.resp.request_headers_to_add(0).value().rfind("ws-acme.", 0), 0u);
      EXPECT_EQ(a.resp.request_headers_to_add(1).value(), "gold");
    } else {
      EXPECT_EQ(a.resp.overall_code(), Response::OVER_LIMIT);
      EXPECT_EQ(s.code(), Response::OVER_LIMIT);
      // Until a token is back: about a second at 1/s.
      EXPECT_EQ(s.duration_until_reset().seconds(), 1);
      EXPECT_EQ(a.header("Retry-After"), "1");
      EXPECT_EQ(a.header("RateLimit").rfind("\"tenant\";r=0;t=", 0), 0u) << a.header("RateLimit");
      EXPECT_EQ(a.resp.request_headers_to_add_size(), 0);
    }
  }
  EXPECT_EQ(metrics_.admissions().value({"ws-acme", "", "allowed", "grpc"}), 5u);
  EXPECT_EQ(metrics_.admissions().value({"ws-acme", "tenant", "refused", "grpc"}), 1u);
  EXPECT_EQ(metrics_.admissions().value({"ws-acme", "", "allowed", "http"}), 0u);
}

// control.openai_headers: false leaves OpenAI's headers out of the gRPC answer too.
TEST_F(RlsTest, OpenAiHeadersOff) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  cfg_.control.openai_headers = false;
  start();
  Answer a = call("dripgate", {{{"tenant", "ws-acme"}}});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.header("RateLimit-Policy"), "\"tenant\";q=5;w=5");
  for (const auto& h : a.resp.response_headers_to_add())
    EXPECT_EQ(h.key().rfind("x-ratelimit-", 0), std::string::npos) << h.key();
}

// A plan's queue over gRPC: a call waits for its gate until shortly before its deadline (Envoy's
// ratelimit filter `timeout`), and a cancelled call leaves the queue at once.
TEST_F(RlsTest, ACallWaitsWithinItsDeadlineAndACancelledOneLeaves) {
  config::Plan p = plan(config::Bucket{1, 2});  // a token every 500 ms
  p.queue = config::PlanQueue{5000, 0};
  add_tenant(cfg_, "ws-wait", p);
  start();
  pb::RateLimitRequest req;
  req.set_domain("dripgate");
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("tenant");
  e->set_value("ws-wait");
  auto call_within = [&](std::chrono::milliseconds deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    Answer a;
    a.status = stub_->ShouldRateLimit(&ctx, req, &a.resp);
    return a;
  };
  ASSERT_EQ(call_within(3s).resp.overall_code(), Response::OK);
  // 300 ms left: no token within it, so the answer comes at once, before Envoy's timeout.
  Answer shortly = call_within(300ms);
  ASSERT_TRUE(shortly.status.ok()) << shortly.status.error_message();
  EXPECT_EQ(shortly.resp.overall_code(), Response::OVER_LIMIT);
  // 3 s left: it waits for the token.
  const auto t0 = std::chrono::steady_clock::now();
  Answer waited = call_within(3s);
  ASSERT_TRUE(waited.status.ok()) << waited.status.error_message();
  EXPECT_EQ(waited.resp.overall_code(), Response::OK);
  EXPECT_GT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_GT(std::stoi(waited.header("Dripgate-Waited-Ms")), 100);
  EXPECT_EQ(shortly.header("Dripgate-Waited-Ms"), "0");
  // Cancelled while it waits: it leaves at once, charged nothing.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  Response resp;
  std::promise<grpc::Status> done;
  stub_->async()->ShouldRateLimit(&ctx, &req, &resp, [&](grpc::Status s) { done.set_value(s); });
  auto until = [](auto cond) {
    for (int i = 0; i < 200 && !cond(); ++i) std::this_thread::sleep_for(10ms);
    return cond();
  };
  ASSERT_TRUE(until([&] { return metrics_.waiting(0, "tenant") == 1; }));
  ctx.TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(until([&] { return metrics_.waiting(0, "tenant") == 0; }));
  EXPECT_TRUE(until([&] { return metrics_.wait_results().value({"0", "abandoned"}) == 1; }));
}

// Shadow mode as Envoy's own rate-limit service has it: a shadow gate that would refuse leaves
// the descriptor's status and the overall code OK (the request goes upstream with its id), and
// the response names the gate in Dripgate-Shadow-Refused; an enforcing gate refuses as ever.
// Both are counted as over HTTP.
TEST_F(RlsTest, ShadowGateAnswersOkNamingItEnforcedOneIsOverLimit) {
  add_tenant(cfg_, "ws-shadow", plan(config::Bucket{2, 0.001, config::GateMode::kShadow}));
  add_tenant(cfg_, "ws-enforce", plan(config::Bucket{2, 0.001}));
  start();
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    Answer a = call("dripgate", {{{"tenant", "ws-shadow"}}});
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.resp.overall_code(), Response::OK);
    ASSERT_EQ(a.resp.statuses_size(), 1);
    EXPECT_EQ(a.resp.statuses(0).code(), Response::OK);
    EXPECT_EQ(a.resp.statuses(0).current_limit().name(), "tenant");
    EXPECT_EQ(a.header("Dripgate-Shadow-Refused"), i <= 2 ? "(none)" : "tenant");
    EXPECT_EQ(a.header("Retry-After"), "(none)");
    EXPECT_EQ(a.resp.request_headers_to_add_size(), 2);
  }
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE("enforced request " + std::to_string(i));
    Answer a = call("dripgate", {{{"tenant", "ws-enforce"}}});
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    const auto want = i <= 2 ? Response::OK : Response::OVER_LIMIT;
    EXPECT_EQ(a.resp.overall_code(), want);
    ASSERT_EQ(a.resp.statuses_size(), 1);
    EXPECT_EQ(a.resp.statuses(0).code(), want);
    EXPECT_EQ(a.header("Dripgate-Shadow-Refused"), "(none)");
  }
  EXPECT_EQ(metrics_.admissions().value({"ws-shadow", "", "allowed", "grpc"}), 2u);
  EXPECT_EQ(metrics_.admissions().value({"ws-shadow", "tenant", "shadow_refused", "grpc"}), 1u);
  EXPECT_EQ(metrics_.admissions().value({"ws-enforce", "tenant", "refused", "grpc"}), 1u);
}

// The gRPC front writes the decision log as the HTTP one does, each line naming its front; a
// shadow refusal is logged as admitted, naming the gate.
TEST_F(RlsTest, DecisionsAreLoggedNamingTheFront) {
  char tmpl[] = "/tmp/dripgate-rls-log-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  cfg_.control.decision_log = config::DecisionLog{dir + "/decisions.jsonl", 1.0};
  std::string error;
  decisions_ = DecisionLogFile::open(cfg_.control.decision_log.path, error);
  ASSERT_TRUE(decisions_) << error;
  add_tenant(cfg_, "ws-shadow", plan(config::Bucket{1, 0.001, config::GateMode::kShadow}));
  add_tenant(cfg_, "ws-enforce", plan(config::Bucket{1, 0.001}));
  start();
  for (const char* tenant : {"ws-shadow", "ws-shadow", "ws-enforce", "ws-enforce"})
    ASSERT_TRUE(call("dripgate", {{{"tenant", tenant}}}).status.ok());
  server_->stop();  // the loops' writers write what they buffered
  server_.reset();
  std::map<std::string, std::vector<nlohmann::json>> by_tenant;
  std::ifstream in(cfg_.control.decision_log.path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["front"], "grpc") << line;
    by_tenant[j["tenant"].get<std::string>()].push_back(j);
  }
  ASSERT_EQ(by_tenant["ws-shadow"].size(), 2u);
  EXPECT_EQ(by_tenant["ws-shadow"][1]["result"], "allowed");
  EXPECT_EQ(by_tenant["ws-shadow"][1]["shadow_refused"], "tenant") << by_tenant["ws-shadow"][1];
  ASSERT_EQ(by_tenant["ws-enforce"].size(), 2u);
  EXPECT_EQ(by_tenant["ws-enforce"][0]["result"], "allowed");
  EXPECT_EQ(by_tenant["ws-enforce"][1]["result"], "refused");
  EXPECT_EQ(by_tenant["ws-enforce"][1]["gate"], "tenant");
  std::filesystem::remove_all(dir);
}

// The service-wide brake shows on the gRPC answer as on the HTTP one.
TEST_F(RlsTest, BrakeFactorIsAResponseHeader) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{1e6, 1e6}));
  start();
  EXPECT_EQ(call("dripgate", {{{"tenant", "ws-acme"}}}).header("Dripgate-Brake"), "(none)");
  store_->publish_brake(std::make_shared<Brake>(Brake{0.5, {}, 60}));
  Answer a = call("dripgate", {{{"tenant", "ws-acme"}}});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.resp.overall_code(), Response::OK);
  EXPECT_EQ(a.header("Dripgate-Brake"), "0.5");
}

// Envoy's remote_address descriptor (or a client_ip one) is the admission's client_ip: the plan's
// ip gate limits that client, and its refusal is named like any gate's.
TEST_F(RlsTest, RemoteAddressFeedsTheIpGate) {
  config::Plan p = plan(config::Bucket{100, 0.001});
  p.ip = config::Bucket{1, 0.001};
  add_tenant(cfg_, "ws-acme", p);
  start();
  Answer a = call("dripgate", {{{"tenant", "ws-acme"}, {"remote_address", "192.0.2.9"}}});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.resp.overall_code(), Response::OK);
  EXPECT_EQ(a.header("RateLimit-Policy"), "\"tenant\";q=100;w=100000, \"ip\";q=1;w=1000");
  // The same client as IPv4-mapped IPv6, under the HTTP API's name: its bucket is empty.
  Answer r = call("dripgate", {{{"tenant", "ws-acme"}, {"client_ip", "::ffff:192.0.2.9"}}});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.resp.overall_code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.resp.statuses(0).code(), Response::OVER_LIMIT);
  EXPECT_EQ(r.resp.statuses(0).current_limit().name(), "ip");
  EXPECT_NE(r.header("Retry-After"), "(none)");
  // Another client is not held by it.
  Answer o = call("dripgate", {{{"tenant", "ws-acme"}, {"remote_address", "2001:db8::9"}}});
  EXPECT_EQ(o.resp.overall_code(), Response::OK);
  Answer bad = call("dripgate", {{{"tenant", "ws-acme"}, {"remote_address", "192.0.2.999"}}});
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.status.error_message(),
            "descriptors[0].entries[1].value: must be an IPv4 or IPv6 address");
  EXPECT_EQ(metrics_.admissions().value({"ws-acme", "ip", "refused", "grpc"}), 1u);
}

// The quota table: hits_addend is the token estimate reserved against 1000 tokens a month.
TEST_F(RlsTest, HitsAddendIsTheTokenEstimate) {
  add_tenant(cfg_, "ws-acme", plan(std::nullopt, config::Quota::monthly(1000, 600)));
  start();
  const uint32_t cost[] = {300, 300, 300, 300, 100, 1};
  const bool allowed[] = {true, true, true, false, true, false};
  const uint32_t left[] = {700, 400, 100, 100, 0, 0};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("request " + std::to_string(i + 1));
    Answer a = call("dripgate", {{{"tenant", "ws-acme"}}}, cost[i]);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.resp.overall_code(), allowed[i] ? Response::OK : Response::OVER_LIMIT);
    const auto& s = a.resp.statuses(0);
    EXPECT_EQ(s.current_limit().name(), "quota");
    EXPECT_EQ(s.current_limit().requests_per_unit(), 1000u);
    EXPECT_EQ(s.current_limit().unit(), Response::RateLimit::MONTH);
    EXPECT_EQ(s.limit_remaining(), left[i]);
    if (!allowed[i]) {
      // Until the month rolls over.
      EXPECT_GT(s.duration_until_reset().seconds(), 0);
      EXPECT_LE(s.duration_until_reset().seconds(), 31 * 86400);
    }
  }
}

// Three descriptors, one admission: the tool gate refuses the third call, its descriptor says
// OVER_LIMIT, and the tenant and user buckets are left exactly as the second call left them.
TEST_F(RlsTest, AllDescriptorsAreOneAllOrNothingAdmission) {
  config::Plan p = plan(config::Bucket{20, 5});
  p.user = config::Bucket{6, 2};
  add_tenant(cfg_, "ws-acme", p);
  cfg_.global_gates.tool["web_search"] = config::Bucket{2, 0.5};
  start();
  const std::vector<Entries> descriptors = {{{"tenant", "ws-acme"}},
                                            {{"tenant", "ws-acme"}, {"user", "alice"}},
                                            {{"tool", "web_search"}}};
  auto tk = [&] { return redis_.cli("HGET " + keys::bucket("ws-acme", "tenant") + " tk"); };
  std::string after_second;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("request " + std::to_string(i + 1));
    Answer a = call("dripgate", descriptors);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_EQ(a.resp.statuses_size(), 3);
    if (i < 2) {
      EXPECT_EQ(a.resp.overall_code(), Response::OK);
      after_second = tk();
      continue;
    }
    EXPECT_EQ(a.resp.overall_code(), Response::OVER_LIMIT);
    EXPECT_EQ(a.resp.statuses(0).code(), Response::OK);
    EXPECT_EQ(a.resp.statuses(1).code(), Response::OK);
    EXPECT_EQ(a.resp.statuses(2).code(), Response::OVER_LIMIT);
    EXPECT_EQ(a.resp.statuses(2).current_limit().name(), "tool");
    EXPECT_EQ(a.resp.statuses(2).limit_remaining(), 0u);
    EXPECT_EQ(a.resp.statuses(2).duration_until_reset().seconds(), 2);  // 1 token at 0.5/s
  }
  EXPECT_EQ(tk(), after_second);
}

TEST_F(RlsTest, ConfiguredDomainMapsItsOwnKeys) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  start();
  Answer a = call("edge", {{{"x-tenant-id", "ws-acme"}}});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.resp.overall_code(), Response::OK);
  EXPECT_EQ(a.resp.statuses(0).limit_remaining(), 4u);
}

// Unknown domains and keys are NOT_FOUND naming them, malformed calls INVALID_ARGUMENT naming
// the field; the service keeps serving.
TEST_F(RlsTest, UnknownAndMalformedCallsSaySo) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  start();
  struct Case {
    std::string domain;
    std::vector<Entries> descriptors;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"other",
       {{{"tenant", "ws-acme"}}},
       grpc::StatusCode::NOT_FOUND,
       "domain: unknown domain 'other'"},
      {"dripgate",
       {{{"tenant", "ws-acme"}, {"path", "/v1"}}},
       grpc::StatusCode::NOT_FOUND,
       "descriptors[0].entries[1].key: unknown descriptor key 'path' in domain 'dripgate' "
       "(known: api_key, client_ip, model, remote_address, tenant, tool, user)"},
      {"", {{{"tenant", "ws-acme"}}}, grpc::StatusCode::INVALID_ARGUMENT, "domain: required"},
      {"dripgate", {}, grpc::StatusCode::INVALID_ARGUMENT, "descriptors: required"},
      {"dripgate",
       {{{"tenant", "ws acme"}}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "descriptors[0].entries[0].value: must match [A-Za-z0-9._-]{1,64}"},
      {"dripgate",
       {{{"tenant", "nobody"}}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "tenant: unknown tenant 'nobody'"},
  };
  for (const Case& c : cases) {
    Answer a = call(c.domain, c.descriptors);
    EXPECT_EQ(a.status.error_code(), c.code) << c.message;
    EXPECT_EQ(a.status.error_message(), c.message);
  }
  EXPECT_EQ(metrics_.admissions().value({"", "", "bad_request", "grpc"}), 6u);
  EXPECT_EQ(call("dripgate", {{{"tenant", "ws-acme"}}}).resp.overall_code(), Response::OK);
}

// Envoy's failure_mode_deny decides what a failed call means; dripgate's only Redis failure
// mode is closed: no decision without Redis, UNAVAILABLE, and decisions again once it is back.
TEST_F(RlsTest, RedisDownIsUnavailableThenRecovers) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{1e6, 1e6}));
  start();
  ASSERT_EQ(call("dripgate", {{{"tenant", "ws-acme"}}}).resp.overall_code(), Response::OK);
  redis_.stop();
  Answer down = call("dripgate", {{{"tenant", "ws-acme"}}});
  EXPECT_EQ(down.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(down.status.error_message().empty());
  redis_.start();
  Answer up;
  for (int tries = 0; tries < 150; ++tries) {
    up = call("dripgate", {{{"tenant", "ws-acme"}}});
    if (up.status.ok()) break;
    EXPECT_EQ(up.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(up.status.ok()) << up.status.error_message();
}

// Per plan's on_failure: closed stays UNAVAILABLE, open answers OK saying so, local decides on
// its share (a bucket of 4 at local_share 0.5: two admissions, then OVER_LIMIT).
TEST_F(RlsTest, RedisDownAnswersByEachPlansFailureMode) {
  char tmpl[] = "/tmp/dripgate-rls-journal-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  cfg_.redis.local_share = 0.5;
  cfg_.redis.journal = dir + "/journal";
  std::string why;
  fallback_ = Fallback::open(cfg_.redis.journal, &why);
  ASSERT_TRUE(fallback_) << why;
  config::Plan open = plan(config::Bucket{1e6, 1e6});
  open.on_failure = config::OnFailure::kOpen;
  config::Plan local = plan(config::Bucket{4, 0.001});
  local.on_failure = config::OnFailure::kLocal;
  add_tenant(cfg_, "ws-closed", plan(config::Bucket{1e6, 1e6}));
  add_tenant(cfg_, "ws-open", open);
  add_tenant(cfg_, "ws-local", local);
  start();
  redis_.stop();
  EXPECT_EQ(call("dripgate", {{{"tenant", "ws-closed"}}}).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  Answer o = call("dripgate", {{{"tenant", "ws-open"}}});
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.resp.overall_code(), Response::OK);
  EXPECT_EQ(o.header("Dripgate-Degraded"), "open");
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("local " + std::to_string(i + 1));
    Answer l = call("dripgate", {{{"tenant", "ws-local"}}});
    ASSERT_TRUE(l.status.ok()) << l.status.error_message();
    EXPECT_EQ(l.resp.overall_code(), i < 2 ? Response::OK : Response::OVER_LIMIT);
    EXPECT_EQ(l.header("Dripgate-Degraded"), "local");
  }
  EXPECT_EQ(fallback_->pending(), 2u);  // the two local admissions, for Redis when it is back
  server_->stop();
  server_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(RlsTest, BearerTokenWhenConfigured) {
  cfg_.control.auth_token = "s3cret";
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  start();
  Answer none = call("dripgate", {{{"tenant", "ws-acme"}}});
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(none.status.error_message(), "missing bearer token (authorization: Bearer …)");
  Answer wrong = call("dripgate", {{{"tenant", "ws-acme"}}}, 0, "s3cre");
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong.status.error_message().find("s3cre"), std::string::npos);
  Answer right = call("dripgate", {{{"tenant", "ws-acme"}}}, 0, "s3cret");
  EXPECT_TRUE(right.status.ok()) << right.status.error_message();
  EXPECT_EQ(right.resp.overall_code(), Response::OK);
  EXPECT_EQ(metrics_.auth_refusals().value({"grpc", "api", "missing"}), 1u);
  EXPECT_EQ(metrics_.auth_refusals().value({"grpc", "api", "unknown_key"}), 1u);
}

// control.auth: tenant_keys over gRPC: metadata "authorization: Bearer <key>" must carry a key
// of the call's tenant (UNAUTHENTICATED as HTTP's 401, PERMISSION_DENIED as its 403), checked
// before the gateway: another tenant's key charges nothing. The shared token is the trusted
// proxy's (Envoy that authenticated the tenant).
TEST_F(RlsTest, TenantKeysActOnlyAsTheirOwnTenant) {
  cfg_.control.tenant_keys = true;
  cfg_.control.auth_token = "pr0xy";
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{2, 0.001}));
  add_tenant(cfg_, "ws-other", plan(config::Bucket{5, 1}));
  cfg_.tenants["ws-acme"].keys_sha256 = {digest_hex(sha256("acme-key"))};
  cfg_.tenants["ws-other"].keys_sha256 = {digest_hex(sha256("other-key"))};
  start();
  const Entries acme{{"tenant", "ws-acme"}};
  Answer none = call("dripgate", {acme});
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(none.status.error_message(),
            "missing API key (Authorization: Bearer <a key of tenant 'ws-acme'>)");
  Answer unknown = call("dripgate", {acme}, 0, "guess");
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(unknown.status.error_message(), "unknown API key");
  for (int i = 0; i < 3; ++i) {
    Answer foreign = call("dripgate", {acme}, 0, "other-key");
    EXPECT_EQ(foreign.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(foreign.status.error_message(),
              "the API key belongs to another tenant, not to 'ws-acme'");
  }
  EXPECT_EQ(redis_.cli("KEYS *ws-acme*"), "");  // nothing charged
  for (int i = 0; i < 3; ++i) {
    Answer own = call("dripgate", {acme}, 0, "acme-key");
    ASSERT_TRUE(own.status.ok()) << own.status.error_message();
    EXPECT_EQ(own.resp.overall_code(), i < 2 ? Response::OK : Response::OVER_LIMIT);
  }
  Answer proxied = call("dripgate", {{{"tenant", "ws-other"}}}, 0, "pr0xy");
  ASSERT_TRUE(proxied.status.ok()) << proxied.status.error_message();
  EXPECT_EQ(proxied.resp.overall_code(), Response::OK);
  // Each refusal counted by its reason; the calls that passed, nowhere.
  const CounterFamily& refused = metrics_.auth_refusals();
  EXPECT_EQ(refused.value({"grpc", "api", "missing"}), 1u);
  EXPECT_EQ(refused.value({"grpc", "api", "unknown_key"}), 1u);
  EXPECT_EQ(refused.value({"grpc", "api", "wrong_tenant"}), 3u);
  EXPECT_EQ(refused.value({"http", "api", "wrong_tenant"}), 0u);
}

// ---- the wire, without our .proto: bytes built and read by Envoy's field numbers ----

std::string varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string len_field(int number, const std::string& bytes) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(bytes.size()) + bytes;
}
std::string varint_field(int number, uint64_t v) {
  return varint(static_cast<uint64_t>(number) << 3) + varint(v);
}

// A message's fields by number: varints as numbers, length-delimited ones as bytes.
struct Fields {
  std::multimap<int, uint64_t> ints;
  std::multimap<int, std::string> bytes;
  uint64_t i(int n) const { return ints.count(n) ? ints.find(n)->second : 0; }
  std::string b(int n) const { return bytes.count(n) ? bytes.find(n)->second : ""; }
};

Fields parse(const std::string& in) {
  Fields f;
  size_t at = 0;
  auto read_varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; at < in.size(); shift += 7) {
      auto c = static_cast<uint8_t>(in[at++]);
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) break;
    }
    return v;
  };
  while (at < in.size()) {
    uint64_t key = read_varint();
    int number = static_cast<int>(key >> 3);
    if ((key & 7) == 0) {
      f.ints.emplace(number, read_varint());
    } else if ((key & 7) == 2) {
      size_t n = read_varint();
      f.bytes.emplace(number, in.substr(at, n));
      at += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << (key & 7) << " for field " << number;
      break;
    }
  }
  return f;
}

TEST_F(RlsTest, WireBytesByEnvoysFieldNumbers) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}, config::Quota::monthly(1000, 600)));
  start();
  // RateLimitRequest{domain=1, descriptors=2 {entries=1 {key=1, value=2}}, hits_addend=3}.
  std::string entry = len_field(1, "tenant") + len_field(2, "ws-acme");
  std::string request =
      len_field(1, "dripgate") + len_field(2, len_field(1, entry)) + varint_field(3, 250);
  std::string bytes;
  grpc::Status status = raw_call(channel_, kShouldRateLimit, request, &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();

  // RateLimitResponse{overall_code=1, statuses=2, response_headers_to_add=3,
  // request_headers_to_add=4}; OK is 1.
  Fields resp = parse(bytes);
  EXPECT_EQ(resp.i(1), 1u);
  ASSERT_EQ(resp.bytes.count(2), 1u);
  // DescriptorStatus{code=1, current_limit=2 {requests_per_unit=1, unit=2, name=3},
  // limit_remaining=3, duration_until_reset=4 {seconds=1}}: the tenant bucket, 4 of 5 left.
  Fields status0 = parse(resp.b(2));
  EXPECT_EQ(status0.i(1), 1u);
  Fields limit = parse(status0.b(2));
  EXPECT_EQ(limit.b(3), "tenant");
  EXPECT_EQ(limit.i(1), 5u);
  EXPECT_EQ(limit.i(2), 2u);  // MINUTE
  EXPECT_EQ(status0.i(3), 4u);
  EXPECT_EQ(parse(status0.b(4)).i(1), 1u);
  // HeaderValue{key=1, value=2}: the HTTP API's headers, the quota showing the 250 tokens.
  std::map<std::string, std::string> headers;
  for (auto [it, end] = resp.bytes.equal_range(3); it != end; ++it) {
    Fields h = parse(it->second);
    headers[h.b(1)] = h.b(2);
  }
  EXPECT_EQ(
      headers["RateLimit-Policy"].rfind("\"tenant\";q=5;w=5, \"quota\";q=1000;qu=\"tokens\"", 0),
      0u)
      << headers["RateLimit-Policy"];
  EXPECT_NE(headers["RateLimit"].find("\"quota\";r=750;"), std::string::npos)
      << headers["RateLimit"];
  std::map<std::string, std::string> upstream;
  for (auto [it, end] = resp.bytes.equal_range(4); it != end; ++it) {
    Fields h = parse(it->second);
    upstream[h.b(1)] = h.b(2);
  }
  EXPECT_EQ(upstream["dripgate-class"], "gold");
  EXPECT_EQ(upstream["dripgate-request-id"].rfind("ws-acme.", 0), 0u);
}

// Bytes that are not a request, each way protobuf's parser refuses them, for every method the
// service has: INVALID_ARGUMENT saying what and where, never the bytes; the service goes on.
TEST_F(RlsTest, UndecodableRequestsAreInvalidArgumentSayingWhat) {
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{5, 1}));
  start();
  std::mt19937 gen(7);
  std::string noise(48, '\0');
  for (char& c : noise) c = static_cast<char>(gen());
  ASSERT_FALSE(pb::RateLimitRequest().ParseFromString(noise)) << "the noise must not parse";
  struct Case {
    const char* name;
    std::string bytes;
    std::string why;  // after "malformed <type>: "; empty: any
  };
  const std::vector<Case> cases = {
      // domain (1) says 100 bytes follow; 6 do.
      {"truncated length", "\x0a\x64s3cret",
       "domain: length 100 runs past the end (6 bytes left) at byte 1"},
      {"wire type 7", std::string("\x0f", 1) + "s3cret", "domain: invalid wire type 7 at byte 0"},
      {"random bytes", noise, ""},
      // hits_addend (3) as a varint of 11 bytes.
      {"varint overflow", "\x18" + std::string(10, '\xff') + "\x01",
       "hits_addend: varint longer than 10 bytes at byte 1"},
      // A start-group tag of field 5, a field inside, and no end-group tag.
      {"unterminated group", "\x2b\x30\x01", "field 5: group without its end-group tag at byte 0"},
      {"invalid UTF-8", len_field(2, len_field(1, len_field(1, "\xc3\x28s3cret"))),
       "descriptors[0].entries[0].key: invalid UTF-8 in a string field at byte 6"},
  };
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::RateLimitService::service_full_name());
  ASSERT_NE(service, nullptr);
  ASSERT_GE(service->method_count(), 1);
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* method = service->method(i);
    const std::string path = "/" + service->full_name() + "/" + method->name();
    const std::string prefix = "malformed " + method->input_type()->full_name() + ": ";
    for (const Case& c : cases) {
      SCOPED_TRACE(path + ": " + c.name);
      grpc::Status st = raw_call(channel_, path, c.bytes);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_EQ(st.error_message().rfind(prefix, 0), 0u) << st.error_message();
      if (!c.why.empty() && path == kShouldRateLimit) {
        EXPECT_EQ(st.error_message(), prefix + c.why);
      }
      EXPECT_EQ(st.error_message().find("s3cret"), std::string::npos);
    }
  }
  EXPECT_EQ(metrics_.admissions().value({"", "", "bad_request", "grpc"}),
            cases.size() * service->method_count());
  EXPECT_EQ(call("dripgate", {{{"tenant", "ws-acme"}}}).resp.overall_code(), Response::OK);
}

// control.grpc_max_inflight: with a Redis that answers nothing (SIGSTOP), the cap's calls stay
// in flight and the next is RESOURCE_EXHAUSTED at once, counted, and charged nothing: once Redis
// runs again, the held calls are admitted and the bucket shows theirs and no more.
TEST_F(RlsTest, CallsBeyondTheInflightCapAreResourceExhausted) {
  constexpr int kCap = 4;
  cfg_.control.grpc_max_inflight = kCap;
  cfg_.redis.timeout_ms = 60000;  // held calls wait for Redis, not for a timeout
  add_tenant(cfg_, "ws-acme", plan(config::Bucket{10, 0.001}));
  start();
  redis_.pause();
  std::vector<std::future<Answer>> held;
  for (int i = 0; i < kCap; ++i)
    held.push_back(std::async(std::launch::async, [this] {
      return call("dripgate", {{{"tenant", "ws-acme"}}});
    }));
  for (int i = 0; i < 2000 && metrics_.grpc_calls_in_flight() < kCap; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(metrics_.grpc_calls_in_flight(), kCap);
  Answer over = call("dripgate", {{{"tenant", "ws-acme"}}});
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(over.status.error_message(), "too many calls in flight (control.grpc_max_inflight: 4)");
  EXPECT_EQ(metrics_.grpc_calls_refused(), 1u);
  EXPECT_NE(metrics_.render().find("\ndripgate_grpc_calls_refused_total 1\n"), std::string::npos);
  redis_.resume();
  for (auto& f : held) {
    Answer a = f.get();
    EXPECT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.resp.overall_code(), Response::OK);
  }
  // A call leaves the count when the last of its tasks is gone, just after its answer.
  for (int i = 0; i < 2000 && metrics_.grpc_calls_in_flight() > 0; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(metrics_.grpc_calls_in_flight(), 0);
  Answer next = call("dripgate", {{{"tenant", "ws-acme"}}});
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.resp.statuses(0).limit_remaining(), 10u - kCap - 1);
}

// The daemon: control.grpc_listen starts the service beside the HTTP API, both count in one
// /metrics, and SIGTERM stops both and exits 0.
TEST(RlsDaemon, GrpcListenServesBesideHttpAndStopsOnSigterm) {
  testing::RedisServer redis;
  char dir_tmpl[] = "/tmp/dripgate-rls-test-XXXXXX";
  std::string dir = mkdtemp(dir_tmpl);
  int http_port = testing::free_port(), grpc_port = testing::free_port();
  std::ofstream(dir + "/control.yaml")
      << "control: { grpc_listen: \"127.0.0.1:" << grpc_port
      << "\", dataplane_socket: /nonexistent/dg.sock }\n"
         "plans: { p: { class: gold, gates: { tenant: { capacity: 5, refill_per_s: 1 } } } }\n"
         "tenants: { ws-acme: { plan: p } }\n";
  pid_t pid = fork();
  if (pid == 0) {
    std::string listen = "127.0.0.1:" + std::to_string(http_port), cfg = dir + "/control.yaml";
    execl(DRIPGATE_CONTROL_BIN, DRIPGATE_CONTROL_BIN, "--config", cfg.c_str(), "--redis",
          redis.url().c_str(), "--listen", listen.c_str(), "--log-level", "warn", nullptr);
    _exit(127);
  }
  auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials()));
  pb::RateLimitRequest req;
  req.set_domain("dripgate");
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("tenant");
  e->set_value("ws-acme");
  Response resp;
  grpc::Status status;
  for (int tries = 0; tries < 100; ++tries) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ctx.set_wait_for_ready(true);  // until the daemon listens
    resp.Clear();
    status = stub->ShouldRateLimit(&ctx, req, &resp);
    if (status.ok()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.overall_code(), Response::OK);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 4u);
  std::string metrics = testing::http(http_port, "GET", "/metrics").body;
  EXPECT_NE(
      metrics.find("dripgate_admissions_total{tenant=\"ws-acme\",gate=\"\",result=\"allowed\","
                   "front=\"grpc\"} 1\n"),
      std::string::npos)
      << metrics;
  // A client that has gone (an Envoy reads the server's GOAWAY at once; an idle channel here
  // would only every few seconds, and the daemon waits for it up to its drain limit).
  stub.reset();
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::system(("rm -rf " + dir).c_str());
}

// Invalid UTF-8 in a string field, 2,000 times against the daemon: each call is
// INVALID_ARGUMENT naming the field, libprotobuf's message (one per call) is counted 2,000 times
// in /metrics, and its log holds the first and at most one more per 10 s of the run.
TEST(RlsDaemon, InvalidUtf8IsInvalidArgumentAndItsLogLinesAreBounded) {
  testing::RedisServer redis;
  const int grpc_port = testing::free_port();
  testing::ControlDaemon daemon(
      DRIPGATE_CONTROL_BIN,
      "control: { grpc_listen: \"127.0.0.1:" + std::to_string(grpc_port) +
          "\", dataplane_socket: /nonexistent/dg.sock }\n"
          "plans: { p: { class: gold, gates: { tenant: { capacity: 5, refill_per_s: 1 } } } }\n"
          "tenants: { ws-acme: { plan: p } }\n",
      {"--redis", redis.url(), "--log-level", "warn"});
  ASSERT_TRUE(daemon.ready()) << daemon.log();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + 10s));
  const std::string request = len_field(1, "dripgate\xff");
  constexpr int kCalls = 2000;
  int invalid = 0;
  const auto began = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    grpc::Status st = raw_call(channel, kShouldRateLimit, request);
    invalid += st.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
               st.error_message() ==
                   "malformed envoy.service.ratelimit.v3.RateLimitRequest: domain: invalid UTF-8 "
                   "in a string field at byte 2";
  }
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - began);
  EXPECT_EQ(invalid, kCalls);
  std::string metrics = testing::http(daemon.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("dripgate_protobuf_log_messages_total{level=\"error\"} " +
                         std::to_string(kCalls) + "\n"),
            std::string::npos)
      << metrics;
  std::istringstream log(daemon.log());
  int lines = 0;
  for (std::string line; std::getline(log, line);)
    lines += line.find("invalid UTF-8") != std::string::npos;
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, 2 + seconds.count() / 10) << daemon.log().substr(0, 4000);
}

}  // namespace
}  // namespace dripgate::control
