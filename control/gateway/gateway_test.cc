// The gateway against a real redis-server and a unix-socket peer standing in for the
// dataplane's control socket (it records every line and answers {"ok":true}), on a real
// libevent loop: what follows an admission or a release, below the HTTP layer.
#include "control/gateway/gateway.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "control/admission/brake.h"
#include "tests/event_loop.h"
#include "tests/line_peer.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class GatewayTest : public ::testing::Test {
 protected:
  GatewayTest() {
    char tmpl[] = "/tmp/dripgate-gateway-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    cfg_.redis.host = "127.0.0.1";
    cfg_.redis.port = redis_.port();
    cfg_.redis.timeout_ms = 2000;
    cfg_.control.dataplane_socket = dir_ + "/dp.sock";
    peer_.emplace(cfg_.control.dataplane_socket);
    config::Plan leased;  // flows live as long as the lease
    leased.name = "leased";
    leased.cls = "gold";
    leased.tenant = config::Bucket{1, 0.001};
    leased.concurrency = config::Concurrency{10, 7};
    config::Plan open;  // no lease: flows get the default tag ttl
    open.name = "open";
    open.cls = "silver";
    config::Plan weighed;  // output and reasoning weigh 4, cached input 0.1
    weighed.name = "weighed";
    weighed.quota = config::Quota::monthly(1'000'000);
    weighed.tenant_tokens = config::Bucket{10'000, 0.001};
    weighed.weights = config::TokenWeights{1'000'000, 4'000'000, 100'000, 4'000'000};
    cfg_.plans = {{"leased", leased}, {"open", open}, {"weighed", weighed}};
    cfg_.tenants = {{"t-leased", {"t-leased", "leased"}},
                    {"t-open", {"t-open", "open"}},
                    {"t-weighed", {"t-weighed", "weighed"}}};
  }
  ~GatewayTest() override {
    gateway_.reset();
    peer_.reset();
    std::filesystem::remove_all(dir_);
  }
  Gateway& gateway() {
    if (!gateway_) {
      store_.emplace(cfg_);
      gateway_.emplace(*store_, loop_.base(), flows_, metrics_, 2000, decisions_.get());
      EXPECT_TRUE(loop_.wait_until([&] { return gateway_->redis_up(); }, 3000ms));
    }
    return *gateway_;
  }
  template <class R, class Req, class Returns>
  R run(Returns (Gateway::*call)(Req, std::function<void(R)>), Req req) {
    auto out = loop_.await<R>([&](auto done) { (gateway().*call)(std::move(req), done); }, 5000ms);
    EXPECT_TRUE(out) << "no answer within 5 s";
    return out.value_or(R{});
  }
  AdmitDecision admit(const std::string& tenant, std::optional<Flow> flow) {
    AdmitRequest r;
    r.tenant = tenant;
    r.flow = std::move(flow);
    return run(&Gateway::admit, std::move(r));
  }
  ReleaseDecision release(const std::string& tenant, const std::string& rid) {
    return run(&Gateway::release, ReleaseRequest{tenant, rid});
  }
  static Flow flow(uint16_t sport) { return Flow{"10.0.0.1", "10.0.0.2", sport, 443, 6}; }

  testing::RedisServer redis_;
  std::string dir_;
  config::Config cfg_;
  std::optional<testing::LinePeer> peer_;
  testing::EventLoop loop_;
  AdmittedFlows flows_;
  Metrics metrics_;
  // Lines of the decision log, once the gateway wrote them.
  std::vector<json> decision_lines() {
    std::ifstream in(cfg_.control.decision_log.path);
    std::vector<json> out;
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  // Turns the decision log on (before the first gateway() call).
  void log_decisions(double sample) {
    cfg_.control.decision_log = config::DecisionLog{dir_ + "/decisions.jsonl", sample};
    std::string error;
    decisions_ = DecisionLogFile::open(cfg_.control.decision_log.path, error);
    ASSERT_TRUE(decisions_) << error;
  }

  std::unique_ptr<DecisionLogFile> decisions_;
  std::optional<ConfigStore> store_;
  std::optional<Gateway> gateway_;
};

TEST_F(GatewayTest, DecisionLogWritesOneLinePerDecisionOffTheRequestPath) {
  log_decisions(1.0);
  AdmitRequest r;
  r.tenant = "t-leased";
  r.user = "u1";
  r.model = "m1";
  r.api_key = "secret-key";
  ASSERT_EQ(run(&Gateway::admit, r).result.outcome, Outcome::kAllowed);
  ASSERT_EQ(run(&Gateway::admit, r).result.outcome, Outcome::kRefused);  // the bucket of 1
  ASSERT_EQ(admit("nobody", std::nullopt).result.outcome, Outcome::kBadRequest);
  // Written by the worker's timer, without the gateway going away.
  ASSERT_TRUE(loop_.wait_until([&] { return decision_lines().size() == 3; }, 5000ms));
  std::vector<json> lines = decision_lines();
  EXPECT_EQ(lines[0]["front"], "http");  // the Gateway's default front
  EXPECT_EQ(lines[0]["tenant"], "t-leased");
  EXPECT_EQ(lines[0]["user"], "u1");
  EXPECT_EQ(lines[0]["model"], "m1");
  EXPECT_EQ(lines[0]["result"], "allowed");
  EXPECT_EQ(lines[0]["gates"], json::array({"tenant", "concurrency"})) << lines[0];
  EXPECT_NEAR(lines[0]["remaining"]["tenant"].get<double>(), 0, 0.1);
  EXPECT_FALSE(lines[0].contains("gate"));
  EXPECT_EQ(lines[1]["result"], "refused");
  EXPECT_EQ(lines[1]["gate"], "tenant");
  EXPECT_EQ(lines[1]["reason"], "rate");
  EXPECT_EQ(lines[2]["tenant"], "nobody");
  EXPECT_EQ(lines[2]["result"], "bad_request");
  EXPECT_EQ(lines[2]["gates"], json::array());
  // "2026-12-01T06:13:27.123Z"
  std::string time = lines[0]["time"];
  EXPECT_EQ(time.size(), 24u) << time;
  EXPECT_EQ(time.back(), 'Z');
  // API keys are never written.
  std::ifstream in(cfg_.control.decision_log.path);
  std::string all(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(all.find("secret-key"), std::string::npos);
}

// An admission a shadow gate would have refused is logged as admitted, naming that gate and its
// wait; one decided under the service-wide brake carries the factor.
TEST_F(GatewayTest, DecisionLogNamesTheShadowRefusalAndTheBrake) {
  log_decisions(1.0);
  config::Plan trial;
  trial.name = "trial";
  trial.cls = "bronze";
  trial.tenant = config::Bucket{1, 0.5, config::GateMode::kShadow};
  cfg_.plans["trial"] = trial;
  cfg_.tenants["t-trial"] = {"t-trial", "trial"};
  config::Plan wide;  // room enough at half its rates
  wide.name = "wide";
  wide.tenant = config::Bucket{10, 10};
  cfg_.plans["wide"] = wide;
  cfg_.tenants["t-wide"] = {"t-wide", "wide"};
  ASSERT_EQ(admit("t-trial", std::nullopt).result.shadow_refused, "");
  AdmitResult shadowed = admit("t-trial", std::nullopt).result;
  ASSERT_EQ(shadowed.outcome, Outcome::kAllowed);
  ASSERT_EQ(shadowed.shadow_refused, "tenant");
  // Shadow gates are not braked: a plan of shadow gates only is decided at its own rates.
  store_->publish_brake(std::make_shared<Brake>(Brake{0.5, {}, 60}));
  ASSERT_EQ(admit("t-trial", std::nullopt).result.brake, 1);
  ASSERT_EQ(admit("t-open", std::nullopt).result.brake, 1);  // no bucket to brake
  AdmitResult braked = admit("t-wide", std::nullopt).result;
  ASSERT_EQ(braked.outcome, Outcome::kAllowed);
  ASSERT_EQ(braked.brake, 0.5);
  gateway_.reset();  // writes what is buffered
  std::vector<json> lines = decision_lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_FALSE(lines[0].contains("shadow_refused")) << lines[0];
  EXPECT_EQ(lines[1]["result"], "allowed");
  EXPECT_EQ(lines[1]["shadow_refused"], "tenant") << lines[1];
  // One token at 0.5/s: about two seconds away.
  EXPECT_EQ(lines[1]["shadow_retry_after_ms"], shadowed.shadow_retry_ms);
  EXPECT_GT(lines[1]["shadow_retry_after_ms"].get<int64_t>(), 1000);
  EXPECT_LE(lines[1]["shadow_retry_after_ms"].get<int64_t>(), 2000);
  EXPECT_FALSE(lines[1].contains("gate"));
  for (int i : {0, 1, 2, 3}) EXPECT_FALSE(lines[i].contains("brake")) << lines[i];
  EXPECT_EQ(lines[4]["tenant"], "t-wide");
  EXPECT_EQ(lines[4]["result"], "allowed");
  EXPECT_EQ(lines[4]["brake"], 0.5) << lines[4];
  EXPECT_FALSE(lines[4].contains("shadow_refused"));
}

TEST_F(GatewayTest, DecisionLogSamples) {
  log_decisions(0.25);
  constexpr int kDecisions = 400;
  for (int i = 0; i < kDecisions; ++i)
    ASSERT_EQ(admit("nobody", std::nullopt).result.outcome, Outcome::kBadRequest);
  gateway_.reset();  // writes what is buffered
  size_t n = decision_lines().size();
  // Binomial(400, 0.25): mean 100, sd 8.7; these bounds are 5 sd away.
  EXPECT_GT(n, 56u);
  EXPECT_LT(n, 144u);
}

TEST_F(GatewayTest, TagLivesAsLongAsThePlansLeaseOrTheDefault) {
  AdmitDecision a = admit("t-leased", flow(1000));
  ASSERT_EQ(a.result.outcome, Outcome::kAllowed) << a.result.error;
  EXPECT_EQ(a.flow_tag, "ok");
  AdmitDecision b = admit("t-open", flow(1001));
  ASSERT_EQ(b.result.outcome, Outcome::kAllowed) << b.result.error;
  EXPECT_EQ(b.flow_tag, "ok");
  auto lines = peer_->lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["class"], "gold");
  EXPECT_EQ(lines[0]["ttl_s"], 7);
  EXPECT_EQ(lines[1]["class"], "silver");
  EXPECT_EQ(lines[1]["ttl_s"], Gateway::kDefaultTagTtlS);
  EXPECT_EQ(flows_.size(), 2u);
}

TEST_F(GatewayTest, OnlyAnAdmittedFlowIsRememberedAndOnlyItsReleaseUntags) {
  AdmitDecision no_flow = admit("t-leased", std::nullopt);
  ASSERT_EQ(no_flow.result.outcome, Outcome::kAllowed);
  EXPECT_EQ(no_flow.flow_tag, "");
  AdmitDecision refused = admit("t-leased", flow(2000));  // the bucket of 1 is empty
  ASSERT_EQ(refused.result.outcome, Outcome::kRefused);
  EXPECT_EQ(refused.flow_tag, "");
  EXPECT_EQ(flows_.size(), 0u);
  AdmitDecision tagged = admit("t-open", flow(2001));
  ASSERT_EQ(tagged.result.outcome, Outcome::kAllowed);
  const std::string& rid = tagged.result.request_id;

  // A release the engine rejects keeps the flow; a release without a flow untags nothing.
  ReleaseDecision bad = release("nobody", rid);
  EXPECT_EQ(bad.result.outcome, Outcome::kBadRequest);
  EXPECT_EQ(bad.flow_tag, "");
  ReleaseDecision other = release("", no_flow.result.request_id);
  EXPECT_EQ(other.result.outcome, Outcome::kAllowed);
  EXPECT_TRUE(other.result.released);
  EXPECT_EQ(other.flow_tag, "");
  EXPECT_EQ(flows_.size(), 1u);
  EXPECT_EQ(peer_->lines().size(), 1u);

  // The tagged request's release untags its flow even though its plan took no lease.
  ReleaseDecision r = release("", rid);
  EXPECT_EQ(r.result.outcome, Outcome::kAllowed);
  EXPECT_FALSE(r.result.released);
  EXPECT_EQ(r.flow_tag, "ok");
  auto lines = peer_->lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["op"], "untag");
  EXPECT_EQ(lines[1]["flow"]["sport"], 2001);
  EXPECT_EQ(flows_.size(), 0u);
  EXPECT_EQ(release("", rid).flow_tag, "");  // once
}

TEST_F(GatewayTest, AdmissionsAreCountedWithConfiguredTenantsOnly) {
  admit("t-leased", std::nullopt);
  admit("t-leased", std::nullopt);
  admit("nobody", std::nullopt);
  const CounterFamily& c = metrics_.admissions();
  EXPECT_EQ(c.value({"t-leased", "", "allowed", "http"}), 1u);
  EXPECT_EQ(c.value({"t-leased", "tenant", "refused", "http"}), 1u);
  EXPECT_EQ(c.value({"", "", "bad_request", "http"}), 1u);
  EXPECT_EQ(c.value({"nobody", "", "bad_request", "http"}), 0u);
}

TEST_F(GatewayTest, SettlePassesThrough) {
  AdmitDecision a = admit("t-open", std::nullopt);
  ASSERT_EQ(a.result.outcome, Outcome::kAllowed);
  SettleResult s = run(&Gateway::settle, SettleRequest{"", a.result.request_id, 12});
  EXPECT_EQ(s.outcome, Outcome::kAllowed) << s.error;
  EXPECT_TRUE(s.settled);
  EXPECT_EQ(s.charged, 12);
  EXPECT_EQ(s.remaining, -1);  // no quota
}

// A settle's and a charge's count by type reach the quota and the token-rate gate weighed by
// the plan, exactly; a plain count stays as it is; a count that cannot be weighed charges
// nothing.
TEST_F(GatewayTest, TypedTokensAreWeighedByThePlan) {
  AdmitRequest req;
  req.tenant = "t-weighed";
  req.tokens = 100;
  AdmitDecision a = run(&Gateway::admit, req);
  ASSERT_EQ(a.result.outcome, Outcome::kAllowed) << a.result.error;
  const std::string& rid = a.result.request_id;
  // 100 + 4·20 + 0.1·1000 + 4·7 = 308 (reserved 100 before: the quota holds 308 after).
  ChargeRequest c{"", rid, 0, {}, {}, {}, TokenCounts{10, 1, 1, 0}};  // 10 + 4 + 0.1 → 15
  ChargeDecision charged = run(&Gateway::charge, c);
  ASSERT_EQ(charged.result.outcome, Outcome::kAllowed) << charged.result.error;
  EXPECT_EQ(charged.result.charged, 115);
  ASSERT_EQ(charged.result.remaining.size(), 2u);
  EXPECT_EQ(charged.result.remaining[0].gate, "quota");
  EXPECT_EQ(charged.result.remaining[0].value, 1'000'000 - 115);
  EXPECT_EQ(charged.result.remaining[1].gate, "tenant_tokens");
  EXPECT_NEAR(charged.result.remaining[1].value, 10'000 - 115, 1);
  SettleRequest s{"", rid, 0, {}, {}, {}, TokenCounts{100, 20, 1000, 7}};
  SettleResult settled = run(&Gateway::settle, s);
  ASSERT_EQ(settled.outcome, Outcome::kAllowed) << settled.error;
  EXPECT_EQ(settled.charged, 308);
  EXPECT_EQ(settled.remaining, 1'000'000 - 308);

  // A plain count on the same plan is the total, unweighed.
  AdmitDecision b = run(&Gateway::admit, req);
  ASSERT_EQ(b.result.outcome, Outcome::kAllowed) << b.result.error;
  SettleResult plain = run(&Gateway::settle, SettleRequest{"", b.result.request_id, 50});
  EXPECT_EQ(plain.charged, 50);
  EXPECT_EQ(plain.remaining, 1'000'000 - 308 - 50);

  // Too large once weighed, or an unknown tenant: a 400 naming the field, nothing charged.
  AdmitDecision d = run(&Gateway::admit, req);
  ASSERT_EQ(d.result.outcome, Outcome::kAllowed) << d.result.error;
  const int64_t big = int64_t{1} << 50;
  SettleResult huge =
      run(&Gateway::settle,
          SettleRequest{"", d.result.request_id, 0, {}, {}, {}, TokenCounts{0, big, 0, 0}});
  EXPECT_EQ(huge.outcome, Outcome::kBadRequest);
  EXPECT_EQ(huge.error, "tokens: the weighted count exceeds 1000000000000000 tokens");
  ChargeDecision nobody =
      run(&Gateway::charge, ChargeRequest{"nobody", "r1", 0, {}, {}, {}, TokenCounts{1, 0, 0, 0}});
  EXPECT_EQ(nobody.result.outcome, Outcome::kBadRequest);
  EXPECT_EQ(nobody.result.error.substr(0, 8), "tenant: ");
  SettleResult last = run(&Gateway::settle, SettleRequest{"", d.result.request_id, 100});
  EXPECT_EQ(last.remaining, 1'000'000 - 308 - 50 - 100);  // the refused settles took nothing
}

// An admission's estimate by type is reserved weighed by the plan, as a settle's count is; one
// that cannot be weighed (too large, an unknown tenant) is a 400 naming the field, nothing taken.
TEST_F(GatewayTest, TypedEstimateIsWeighedByThePlan) {
  AdmitRequest req;
  req.tenant = "t-weighed";
  req.typed = TokenCounts{100, 20, 1000, 7};  // 100 + 80 + 100 + 28 = 308
  AdmitDecision a = run(&Gateway::admit, req);
  ASSERT_EQ(a.result.outcome, Outcome::kAllowed) << a.result.error;
  const Remaining* quota = nullptr;
  for (const Remaining& r : a.result.remaining)
    if (r.gate == "quota") quota = &r;
  ASSERT_NE(quota, nullptr);
  EXPECT_EQ(quota->value, 1'000'000 - 308);
  SettleResult s = run(&Gateway::settle, SettleRequest{"", a.result.request_id, 8});
  EXPECT_EQ(s.remaining, 1'000'000 - 8);  // 308 reserved, 8 used
  AdmitRequest huge = req;
  huge.typed = TokenCounts{0, int64_t{1} << 50, 0, 0};
  AdmitDecision h = run(&Gateway::admit, huge);
  EXPECT_EQ(h.result.outcome, Outcome::kBadRequest);
  EXPECT_EQ(h.result.error, "tokens: the weighted count exceeds 1000000000000000 tokens");
  AdmitRequest nobody = req;
  nobody.tenant = "nobody";
  AdmitDecision n = run(&Gateway::admit, nobody);
  EXPECT_EQ(n.result.outcome, Outcome::kBadRequest);
  EXPECT_EQ(n.result.error.substr(0, 8), "tenant: ");
  EXPECT_EQ(run(&Gateway::settle, SettleRequest{"", a.result.request_id, 8}).remaining,
            1'000'000 - 8);  // nothing more was taken
}

}  // namespace
}  // namespace dripgate::control
