// Requests that wait for a gate instead of a 429 (Gateway::admit with a plan's queue), against a
// real redis-server on a real libevent loop: admitted when the gate refills, 429 at the deadline,
// served by band and then round robin across tenants, leaving at once when abandoned, bounded,
// and costing Redis a call only when a token can exist for the first waiter. The queue's order
// alone, on an injected clock, is wait_queue_test's.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/gateway/gateway.h"
#include "tests/event_loop.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using namespace std::chrono_literals;

class GatewayWaitTest : public ::testing::Test {
 protected:
  GatewayWaitTest() {
    cfg_.redis.host = "127.0.0.1";
    cfg_.redis.port = redis_.port();
    cfg_.redis.timeout_ms = 2000;
    cfg_.control.dataplane_socket = "/nonexistent/dripgate-gateway-wait-test.sock";
    // A tenant bucket of 1 refilled 20 times a second: one admission per 50 ms.
    plan("gold", config::Bucket{1, 20}, config::PlanQueue{2000, 0});
    plan("free", config::Bucket{1, 20}, config::PlanQueue{2000, 1});
    plan("nowait", config::Bucket{1, 20}, std::nullopt);
  }
  void plan(const std::string& name, std::optional<config::Bucket> tenant,
            std::optional<config::PlanQueue> queue) {
    config::Plan p;
    p.name = name;
    p.tenant = tenant;
    p.queue = queue;
    cfg_.plans[name] = p;
  }
  void tenant(const std::string& name, const std::string& plan) {
    cfg_.tenants[name] = config::Tenant{name, plan};
  }
  Gateway& gateway() {
    if (!gateway_) {
      store_.emplace(cfg_);
      gateway_.emplace(*store_, loop_.base(), flows_, metrics_, 100, decisions_.get());
      EXPECT_TRUE(loop_.wait_until([&] { return gateway_->redis_up(); }, 3000ms));
    }
    return *gateway_;
  }
  // A second worker (or daemon: it shares nothing with the first but Redis and the store): its
  // own engine, Redis connections, queue and holder id.
  Gateway& other() {
    if (!other_) {
      gateway();
      other_.emplace(*store_, loop_.base(), flows_, metrics_, 100);
      EXPECT_TRUE(loop_.wait_until([&] { return other_->redis_up(); }, 3000ms));
    }
    return *other_;
  }

  // Admissions whose answers are collected in the order they come.
  struct Answer {
    std::string name;
    AdmitResult r;
  };
  uint64_t start(const std::string& name, AdmitRequest req) { return start(gateway(), name, req); }
  uint64_t start(Gateway& on, const std::string& name, AdmitRequest req) {
    return on.admit(std::move(req), [this, name](AdmitDecision d) {
      answers_.push_back({name, std::move(d.result)});
    });
  }
  uint64_t start(const std::string& name, const std::string& tenant,
                 std::optional<int64_t> max_wait_ms = std::nullopt, std::string model = {}) {
    AdmitRequest req;
    req.tenant = tenant;
    req.model = std::move(model);
    req.max_wait_ms = max_wait_ms;
    return start(name, std::move(req));
  }
  static AdmitRequest estimate(const std::string& tenant, int64_t tokens) {
    AdmitRequest req;
    req.tenant = tenant;
    req.tokens = tokens;
    return req;
  }
  bool answered(size_t n, std::chrono::milliseconds limit = 5000ms) {
    return loop_.wait_until([&] { return answers_.size() >= n; }, limit);
  }
  const Answer* answer_of(const std::string& name) const {
    for (const Answer& a : answers_)
      if (a.name == name) return &a;
    return nullptr;
  }
  std::vector<std::string> order() const {
    std::vector<std::string> out;
    for (const Answer& a : answers_) out.push_back(a.name);
    return out;
  }
  // The scripts Redis ran so far (INFO commandstats: EVALSHA and EVAL), whoever sent them.
  uint64_t redis_calls() const {
    redisContext* c = redisConnect("127.0.0.1", redis_.port());
    auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
    uint64_t calls = 0;
    for (const char* cmd : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="})
      if (r && r->type == REDIS_REPLY_STRING)
        if (const char* at = std::strstr(r->str, cmd))
          calls += std::strtoull(at + std::strlen(cmd), nullptr, 10);
    if (r) freeReplyObject(r);
    redisFree(c);
    return calls;
  }
  uint64_t waits(const char* band, const char* result) const {
    return metrics_.wait_results().value({band, result});
  }

  testing::RedisServer redis_;
  config::Config cfg_;
  testing::EventLoop loop_;
  AdmittedFlows flows_;
  Metrics metrics_;
  std::unique_ptr<DecisionLogFile> decisions_;
  std::optional<ConfigStore> store_;
  std::optional<Gateway> gateway_, other_;
  std::vector<Answer> answers_;
};

TEST_F(GatewayWaitTest, ARefusedRequestWaitsAndIsAdmittedWhenItsGateRefills) {
  tenant("t", "gold");
  char tmpl[] = "/tmp/dripgate-gateway-wait-test-XXXXXX";
  const std::string log = std::string(mkdtemp(tmpl)) + "/decisions.jsonl";
  cfg_.control.decision_log = config::DecisionLog{log, 1.0};
  std::string error;
  decisions_ = DecisionLogFile::open(log, error);
  ASSERT_TRUE(decisions_) << error;
  start("first", "t");
  start("second", "t");
  ASSERT_TRUE(answered(2));
  EXPECT_EQ(order(), (std::vector<std::string>{"first", "second"}));
  const AdmitResult& first = answers_[0].r;
  const AdmitResult& second = answers_[1].r;
  EXPECT_EQ(first.outcome, Outcome::kAllowed);
  EXPECT_EQ(first.waited_ms, 0);  // could wait, did not
  ASSERT_EQ(second.outcome, Outcome::kAllowed) << second.reason;
  // The bucket holds a token again 50 ms after the first took it; the loop's 5 ms slices and a
  // loaded machine add to that, never take from it.
  EXPECT_GE(second.waited_ms, 30);
  EXPECT_LT(second.waited_ms, 1500);
  EXPECT_EQ(waits("0", "admitted"), 2u);
  EXPECT_EQ(metrics_.wait_seconds().count(), 1u);
  EXPECT_EQ(gateway().waiters(), 0u);
  // The decision log says how long each waited, once per request (not per call to Redis).
  gateway_.reset();  // flushes the log
  std::ifstream in(log);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["waited_ms"], 0);
  EXPECT_EQ(lines[1]["waited_ms"], second.waited_ms);
  EXPECT_EQ(lines[1]["result"], "allowed");
  std::filesystem::remove_all(std::filesystem::path(log).parent_path());
}

TEST_F(GatewayWaitTest, WithoutABudgetARefusalIsAnsweredAtOnce) {
  tenant("t", "gold");
  tenant("n", "nowait");
  start("t1", "t");
  start("t2", "t", 0);  // the request asks not to wait
  start("n1", "n");
  start("n2", "n", 1000);  // its plan has no queue: capped at 0
  ASSERT_TRUE(answered(4));
  EXPECT_EQ(answer_of("t2")->r.outcome, Outcome::kRefused);
  EXPECT_EQ(answer_of("t2")->r.waited_ms, -1);  // could not wait: the answer does not say
  EXPECT_EQ(answer_of("n2")->r.outcome, Outcome::kRefused);
  EXPECT_EQ(answer_of("n2")->r.waited_ms, -1);
}

TEST_F(GatewayWaitTest, AWaiterTheGateCannotServeBeforeItsDeadlineIsAnswered429) {
  // One admission per 500 ms; each waits at most 700 ms: the second is admitted after 500 ms,
  // the third would need 1000 ms and is answered 429 at its deadline with how long it waited.
  plan("slow", config::Bucket{1, 2}, config::PlanQueue{700, 0});
  tenant("s", "slow");
  start("a", "s");
  start("b", "s");
  start("c", "s");
  ASSERT_TRUE(answered(3));
  EXPECT_EQ(order(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(answer_of("b")->r.outcome, Outcome::kAllowed);
  const AdmitResult& c = answer_of("c")->r;
  EXPECT_EQ(c.outcome, Outcome::kRefused);
  EXPECT_EQ(c.reason, "rate");
  EXPECT_EQ(c.gate, "tenant");
  EXPECT_GE(c.waited_ms, 650);
  EXPECT_LT(c.waited_ms, 3000);
  EXPECT_GT(c.retry_after_ms, 0);
  EXPECT_EQ(waits("0", "timed_out"), 1u);
  // A request whose gate holds no token for it within its whole wait is answered at once.
  plan("glacial", config::Bucket{1, 0.1}, config::PlanQueue{700, 0});
  tenant("g", "glacial");
  gateway_.reset();
  answers_.clear();
  start("g1", "g");
  start("g2", "g");
  ASSERT_TRUE(answered(2));
  EXPECT_EQ(answer_of("g2")->r.outcome, Outcome::kRefused);
  EXPECT_EQ(answer_of("g2")->r.waited_ms, 0);
}

TEST_F(GatewayWaitTest, AHigherBandIsServedFirstAndTenantsTakeTurns) {
  // One model gate shared by every tenant, 5 admissions a second (a loaded machine's delays stay
  // well within a refill); tenants' own buckets never refuse.
  cfg_.global_gates.model["m"] = config::Bucket{1, 5};
  for (const char* p : {"gold", "free"}) cfg_.plans[p].tenant = config::Bucket{1000, 1000};
  tenant("busy", "free");
  tenant("quiet", "free");
  tenant("vip", "gold");
  start("busy0", "busy", std::nullopt, "m");  // takes the token
  for (int i = 1; i <= 4; ++i) start("busy" + std::to_string(i), "busy", std::nullopt, "m");
  ASSERT_TRUE(loop_.wait_until([&] { return gateway().waiters() == 4; }, 3000ms));
  start("quiet1", "quiet", std::nullopt, "m");
  start("vip1", "vip", std::nullopt, "m");
  ASSERT_TRUE(answered(7));
  for (const Answer& a : answers_) EXPECT_EQ(a.r.outcome, Outcome::kAllowed) << a.name;
  // vip (band 0) before every band-1 waiter that was still waiting; quiet's one waiter gets the
  // turn after busy's first rather than after all four.
  EXPECT_EQ(order(), (std::vector<std::string>{"busy0", "vip1", "busy1", "quiet1", "busy2", "busy3",
                                               "busy4"}));
}

// Two gateways (two workers, or two daemons: they share only Redis) wait on one model gate. The
// order holds across them (lua/lib_waiters.lua): a band-0 waiter on one is served before the
// other's band-1 waiters, which queued earlier and whose timer is due as early; within a band the
// workers take turns, one waiter each. Each gateway alone would serve its own first waiter at
// every refill, so whichever asked first would win.
TEST_F(GatewayWaitTest, AcrossWorkersAHigherBandIsServedFirstAndWorkersTakeTurns) {
  cfg_.global_gates.model["m"] = config::Bucket{2, 5};  // a token every 200 ms
  for (const char* p : {"gold", "free"}) cfg_.plans[p].tenant = config::Bucket{1000, 1000};
  tenant("f", "free");
  tenant("v", "gold");
  auto req = [](const std::string& tenant) {
    AdmitRequest r;
    r.tenant = tenant;
    r.model = "m";
    return r;
  };
  Gateway& a = gateway();
  Gateway& b = other();
  const uint64_t before = redis_calls();
  for (int i = 0; i < 4; ++i) start(a, "a" + std::to_string(i), req("f"));  // a0, a1 pass
  ASSERT_TRUE(loop_.wait_until([&] { return a.waiters() == 2; }, 3000ms));
  start(b, "b1", req("f"));
  start(b, "b2", req("f"));
  ASSERT_TRUE(loop_.wait_until([&] { return b.waiters() == 2; }, 3000ms));
  start(b, "v1", req("v"));
  ASSERT_TRUE(answered(7));
  for (const Answer& x : answers_) EXPECT_EQ(x.r.outcome, Outcome::kAllowed) << x.name;
  std::vector<std::string> waited = order();
  waited.erase(waited.begin(), waited.begin() + 2);  // a0 and a1, in either order
  EXPECT_EQ(waited, (std::vector<std::string>{"v1", "a2", "b1", "a3", "b2"}));
  // No polling: the first attempts (admit.lua and gates.lua; a refusal adds the refund), then an
  // admitting attempt per waiter and a2's refused one (v1 went before it), with room for one
  // more refused attempt on a loaded machine; not a call per worker per refill.
  const uint64_t calls = redis_calls() - before;
  EXPECT_LE(calls, 2u * 2 + 5u * 3 + 5u * 2 + 2u * 3) << "calls: " << calls;
}

// A band-0 request on one worker that needs five tokens of a model_tokens gate goes before the
// band-1 waiters of another worker that need one each, although theirs could pass one by one as
// the gate refills (a token every 100 ms): they leave the gate the five it needs first. Without
// the order across workers, each of theirs would pass as soon as one token is there and the big
// one would pass last.
TEST_F(GatewayWaitTest, AcrossWorkersWaitersLeaveAHigherBandTheTokensItNeeds) {
  cfg_.global_gates.model_tokens["m"] = config::Bucket{5, 10};
  for (const char* p : {"gold", "free"}) cfg_.plans[p].tenant = config::Bucket{1000, 1000};
  tenant("f", "free");
  tenant("v", "gold");
  auto req = [](const std::string& tenant, int64_t tokens) {
    AdmitRequest r = estimate(tenant, tokens);
    r.model = "m";
    return r;
  };
  Gateway& a = gateway();
  Gateway& b = other();
  start(a, "a0", req("f", 5));  // takes all five
  ASSERT_TRUE(answered(1));
  for (int i = 1; i <= 4; ++i) start(a, "a" + std::to_string(i), req("f", 1));
  ASSERT_TRUE(loop_.wait_until([&] { return a.waiters() == 4; }, 3000ms));
  start(b, "v1", req("v", 5));
  ASSERT_TRUE(answered(6));
  for (const Answer& x : answers_) EXPECT_EQ(x.r.outcome, Outcome::kAllowed) << x.name;
  EXPECT_EQ(order(), (std::vector<std::string>{"a0", "v1", "a1", "a2", "a3", "a4"}));
}

// A worker's first waiter that its gate cannot serve before its deadline (a band-0 waiter on
// another worker needs the next token) is answered 429 at once, and its tenant keeps the turn:
// the tenant's next waiter goes before the other tenant's, since the tenant was not served. The
// worker keeps its place among the workers too: its entry on the gate counts past that waiter's
// deadline, as its next waiters take it over.
TEST_F(GatewayWaitTest, AFirstWaiterTheGateCannotServeInTimeKeepsItsTenantsTurnAndItsPlace) {
  cfg_.global_gates.model["m"] = config::Bucket{1, 2};  // a token every 500 ms
  for (const char* p : {"gold", "free"}) cfg_.plans[p].tenant = config::Bucket{1000, 1000};
  for (const char* t : {"x", "y", "z"}) tenant(t, "free");
  tenant("v", "gold");
  auto req = [](const std::string& tenant, int64_t max_wait_ms) {
    AdmitRequest r;
    r.tenant = tenant;
    r.model = "m";
    r.max_wait_ms = max_wait_ms;
    return r;
  };
  Gateway& a = gateway();
  Gateway& b = other();
  start(a, "z0", req("z", 3000));  // takes the token
  ASSERT_TRUE(answered(1));
  start(a, "x1", req("x", 700));  // first; its token comes at 500 ms
  ASSERT_TRUE(loop_.wait_until([&] { return a.waiters() == 1; }, 3000ms));
  start(a, "y1", req("y", 3000));
  start(a, "x2", req("x", 3000));
  start(b, "v1", req("v", 3000));  // band 0: the next token is v1's (it books it)
  ASSERT_TRUE(loop_.wait_until([&] { return a.waiters() == 3; }, 3000ms));
  ASSERT_TRUE(loop_.wait_until([&] { return answer_of("x1") != nullptr; }, 3000ms));
  // x1's worker keeps its entry for its next waiters, for about twice the wait its gate named
  // (the next two tokens: 1 s) and 250 ms, not for the 200 ms x1 had left.
  redisContext* c = redisConnect("127.0.0.1", redis_.port());
  auto* t = static_cast<redisReply*>(redisCommand(c, "TIME"));
  const int64_t now_ms =
      std::stoll(t->element[0]->str) * 1000 + std::stoll(t->element[1]->str) / 1000;
  freeReplyObject(t);
  auto* q = static_cast<redisReply*>(redisCommand(c, "HGETALL dg:{g:model:m}:wq"));
  int64_t until_ms = 0;
  for (size_t i = 0; q && i + 1 < q->elements; i += 2) {
    int band = -1;
    long long since = 0, until = 0;
    char cost[32];
    if (std::sscanf(q->element[i + 1]->str, "%d %lld %31s %lld", &band, &since, cost, &until) ==
            4 &&
        band == 1)
      until_ms = until;
  }
  if (q) freeReplyObject(q);
  redisFree(c);
  EXPECT_GT(until_ms - now_ms, 700) << "the worker's entry lapses with x1's deadline";
  ASSERT_TRUE(answered(5));
  EXPECT_EQ(answer_of("x1")->r.outcome, Outcome::kRefused);
  EXPECT_LT(answer_of("x1")->r.waited_ms, 650);  // at once, not at its deadline
  // x1's answer comes before or after v1's admission, whichever of their calls came first.
  std::vector<std::string> served = order();
  std::erase(served, "x1");
  EXPECT_EQ(served, (std::vector<std::string>{"z0", "v1", "x2", "y1"}));
  for (const char* n : {"v1", "x2", "y1"})
    EXPECT_EQ(answer_of(n)->r.outcome, Outcome::kAllowed) << n;
}

// Another worker's first waiter on model gate m, of `band`, counting for a minute (put in the
// gate's registry as that worker would, lua/lib_waiters.lua).
void other_waiter(int port, int band) {
  const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch() + 60s)
                         .count();
  const std::string v = std::to_string(band) + " 1 1 " + std::to_string(until);
  redisContext* c = redisConnect("127.0.0.1", port);
  freeReplyObject(redisCommand(c, "HSET dg:{g:model:m}:wq Z %s", v.c_str()));
  redisFree(c);
}

// A worker's first waiter on a global gate asks the gate before its tenant's slot: refused there
// (a band-0 waiter of another worker, here an entry put in the gate's registry, needs the token),
// that is one gates.lua call, not admit.lua, gates.lua and a refund.
TEST_F(GatewayWaitTest, AFirstWaiterOnAGlobalGateAsksItBeforeItsTenantsSlot) {
  cfg_.global_gates.model["m"] = config::Bucket{1, 2};  // a token every 500 ms
  cfg_.plans["free"].tenant = config::Bucket{1000, 1000};
  tenant("f", "free");
  other_waiter(redis_.port(), 0);  // band 0: no free request may take the token before it
  Gateway& a = gateway();
  AdmitRequest free_req;
  free_req.tenant = "f";
  free_req.model = "m";
  start(a, "f1", free_req);  // refused: Z is ahead
  ASSERT_TRUE(loop_.wait_until([&] { return a.waiters() == 1; }, 3000ms));
  const uint64_t before = redis_calls();
  // Its first try as the gate's first waiter here: refused again, by one script.
  ASSERT_TRUE(loop_.wait_until([&] { return redis_calls() > before; }, 3000ms));
  redisContext* c = redisConnect("127.0.0.1", redis_.port());
  freeReplyObject(redisCommand(c, "HDEL dg:{g:model:m}:wq Z"));
  redisFree(c);
  ASSERT_TRUE(answered(1));
  EXPECT_EQ(answer_of("f1")->r.outcome, Outcome::kAllowed);
  // The refused try (one), the admitting one (two), and room for one more refused try if the
  // entry went after the next try had begun. Asking the tenant's slot with the gate, each refused
  // try alone would be three.
  const uint64_t calls = redis_calls() - before;
  EXPECT_LE(calls, 1u + 2u + 1u) << "calls: " << calls;
  EXPECT_GE(calls, 1u + 2u) << "calls: " << calls;
}

// A request of a higher band than the waiters of its gate in this worker asks the gate first (the
// gate is busy): refused (its token comes after its wait, so it cannot book it), it costs one
// gates.lua call, not admit.lua's, gates.lua's and a refund's three.
TEST_F(GatewayWaitTest, AHigherBandThanTheWaitersHereAsksTheGateFirst) {
  cfg_.global_gates.model["m"] = config::Bucket{1, 1};
  for (const char* p : {"gold", "free"}) cfg_.plans[p].tenant = config::Bucket{1000, 1000};
  tenant("f", "free");
  tenant("v", "gold");
  start("f0", "f", std::nullopt, "m");  // takes the token
  start("f1", "f", std::nullopt, "m");
  ASSERT_TRUE(loop_.wait_until([&] { return gateway().waiters() == 1; }, 3000ms));
  const uint64_t before = redis_calls();
  // Its token comes after its wait, so it cannot book it: refused, and answered at once.
  start("v1", "v", 500, "m");
  ASSERT_TRUE(answered(2));
  EXPECT_EQ(answer_of("v1")->r.outcome, Outcome::kRefused);
  EXPECT_EQ(redis_calls() - before, 1u);
  gateway().drain_waiters();
  ASSERT_TRUE(answered(3));
}

TEST_F(GatewayWaitTest, AnAbandonedWaiterLeavesAtOnceAndIsChargedNothing) {
  plan("slow", config::Bucket{1, 2}, config::PlanQueue{2000, 0});
  cfg_.plans["slow"].quota = config::Quota::monthly(1000);
  tenant("s", "slow");
  const AdmitRequest est = estimate("s", 100);
  start("a", est);
  const uint64_t b = start("b", est);
  start("c", est);
  ASSERT_TRUE(loop_.wait_until([&] { return gateway().waiters() == 2; }, 3000ms));
  ASSERT_NE(b, 0u);
  gateway().abandon(b);
  EXPECT_EQ(gateway().waiters(), 1u);  // at once, not at its deadline
  ASSERT_TRUE(answered(3));
  EXPECT_EQ(order(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(answer_of("b")->r.outcome, Outcome::kUnavailable);
  EXPECT_EQ(answer_of("c")->r.outcome, Outcome::kAllowed);
  // c took b's place: admitted one refill (500 ms) after a, not two.
  EXPECT_LT(answer_of("c")->r.waited_ms, 900);
  EXPECT_EQ(waits("0", "abandoned"), 1u);
  // Only a and c reserved their estimate.
  const Remaining* quota = nullptr;
  for (const Remaining& q : answer_of("c")->r.remaining)
    if (q.gate == "quota") quota = &q;
  ASSERT_NE(quota, nullptr);
  EXPECT_EQ(quota->value, 800);
  gateway().abandon(b);  // answered already: nothing happens
}

// A request that may wait, that no waiter of any worker is ahead of, on a gate others wait on,
// books the gate's next token (lua/gates.lua) instead of being refused: one attempt, its two
// scripts, where a refusal would have cost three (admit.lua, gates.lua and a refund) and the
// admitting attempt two more. It is answered when the token exists, not before, and says how
// long it waited.
TEST_F(GatewayWaitTest, ARequestNobodyIsAheadOfBooksTheNextTokenAndIsAnsweredWhenItExists) {
  cfg_.global_gates.model["m"] = config::Bucket{1, 4};  // a token every 250 ms
  cfg_.plans["gold"].tenant = config::Bucket{1000, 1000};
  tenant("v", "gold");
  AdmitRequest gold_req;
  gold_req.tenant = "v";
  gold_req.model = "m";
  start("v0", gold_req);  // takes the token
  ASSERT_TRUE(answered(1));
  const auto v0_at = std::chrono::steady_clock::now();
  other_waiter(redis_.port(), 1);  // band 1: behind v1, but the gate is contended
  const uint64_t before = redis_calls();
  start("v1", gold_req);
  ASSERT_TRUE(answered(2));
  EXPECT_GE(std::chrono::steady_clock::now() - v0_at, 240ms);  // not before its token
  const Answer* v1 = answer_of("v1");
  EXPECT_EQ(v1->r.outcome, Outcome::kAllowed);
  EXPECT_GT(v1->r.booked_us, 0);
  EXPECT_GE(v1->r.waited_ms, 100);
  EXPECT_EQ(redis_calls() - before, 2u);
  EXPECT_EQ(metrics_.token_to_admission().count(), 1u);
}

// A request holding a booked token whose client goes away is charged nothing (its estimate goes
// back to the quota), is not counted as a Redis failure, and its token goes back to the gate when
// it exists, for the next waiter.
TEST_F(GatewayWaitTest, AnAbandonedBookingIsChargedNothingAndGivesItsTokenBack) {
  plan("slow", config::Bucket{1000, 1000}, config::PlanQueue{5000, 0});
  cfg_.plans["slow"].quota = config::Quota::monthly(1000);
  cfg_.global_gates.model["m"] = config::Bucket{1, 2};  // a token every 500 ms
  tenant("s", "slow");
  AdmitRequest est = estimate("s", 100);
  est.model = "m";
  start("a", est);  // takes the token
  ASSERT_TRUE(answered(1));
  other_waiter(redis_.port(), 1);
  const uint64_t before = redis_calls();
  const uint64_t b = start("b", est);  // books the next, at 500 ms
  ASSERT_NE(b, 0u);
  ASSERT_TRUE(loop_.wait_until([&] { return redis_calls() - before >= 2; }, 3000ms));
  gateway().abandon(b);
  ASSERT_TRUE(answered(2));
  EXPECT_EQ(answer_of("b")->r.outcome, Outcome::kUnavailable);
  EXPECT_EQ(answer_of("b")->r.error, kAbandonedError);
  EXPECT_EQ(waits("0", "abandoned"), 1u);
  EXPECT_EQ(gateway().outage_since_ms(), 0);
  // The token is back: the next request takes it at once, and only a and it reserved their
  // estimate.
  start("c", est);
  ASSERT_TRUE(answered(3));
  const Answer* c = answer_of("c");
  EXPECT_EQ(c->r.outcome, Outcome::kAllowed);
  EXPECT_EQ(c->r.booked_us, 0);
  EXPECT_LT(c->r.waited_ms, 200);
  const Remaining* quota = nullptr;
  for (const Remaining& q : c->r.remaining)
    if (q.gate == "quota") quota = &q;
  ASSERT_NE(quota, nullptr);
  EXPECT_EQ(quota->value, 800);
}

TEST_F(GatewayWaitTest, BeyondTheBoundsARequestIsAnsweredQueueFullAtOnce) {
  cfg_.control.queue.max_waiters_per_tenant = 2;
  cfg_.control.queue.max_waiters = 3;
  plan("slow", config::Bucket{1, 2}, config::PlanQueue{2000, 0});
  tenant("a", "slow");
  tenant("b", "slow");
  start("a0", "a");
  start("a1", "a");
  start("a2", "a");
  start("a3", "a");  // the tenant's third waiter
  ASSERT_TRUE(answered(2));
  EXPECT_EQ(answers_[1].name, "a3");
  EXPECT_EQ(answers_[1].r.outcome, Outcome::kRefused);
  EXPECT_EQ(answers_[1].r.reason, "queue_full");
  start("b0", "b");
  start("b1", "b");
  start("b2", "b");  // the daemon's fourth waiter
  ASSERT_TRUE(answered(4));
  EXPECT_EQ(answers_[3].name, "b2");
  EXPECT_EQ(answers_[3].r.reason, "queue_full");
  EXPECT_EQ(waits("0", "queue_full"), 2u);
  EXPECT_EQ(gateway().waiters(), 3u);
  gateway().drain_waiters();  // shutting down: each answered now
  ASSERT_TRUE(answered(7));
  EXPECT_EQ(gateway().waiters(), 0u);
}

TEST_F(GatewayWaitTest, QuotaRefusalsNeverWait) {
  plan("tiny", config::Bucket{100, 100}, config::PlanQueue{2000, 0});
  cfg_.plans["tiny"].quota = config::Quota::monthly(50);
  tenant("q", "tiny");
  start("q1", estimate("q", 100));
  ASSERT_TRUE(answered(1, 2000ms));
  EXPECT_EQ(answers_[0].r.outcome, Outcome::kRefused);
  EXPECT_EQ(answers_[0].r.reason, "quota");
  EXPECT_EQ(answers_[0].r.waited_ms, 0);
  EXPECT_EQ(waits("0", "refused"), 1u);
}

// A global ip refusal never waits, though its gate refills well within the wait: the bucket
// is one client's, so a queue of it would hold only that client's own requests.
TEST_F(GatewayWaitTest, GlobalIpRefusalsNeverWait) {
  plan("roomy", config::Bucket{100, 100}, config::PlanQueue{2000, 0});
  tenant("a", "roomy");
  tenant("b", "roomy");
  cfg_.global_gates.ip = config::Bucket{1, 20};  // a token again 50 ms after one is taken
  AdmitRequest req;
  req.client_ip = "203.0.113.9";
  req.tenant = "a";
  start("a", req);
  req.tenant = "b";
  start("b", req);
  ASSERT_TRUE(answered(2));
  const AdmitResult& first = answers_[0].r;
  const AdmitResult& second = answers_[1].r;
  EXPECT_EQ(first.outcome, Outcome::kAllowed);
  ASSERT_EQ(second.outcome, Outcome::kRefused) << second.reason;
  EXPECT_EQ(second.gate, "global_ip");
  EXPECT_EQ(second.reason, "rate");
  EXPECT_GT(second.retry_after_ms, 0);
  EXPECT_EQ(second.waited_ms, 0);  // could wait, did not
  EXPECT_EQ(gateway().waiters(), 0u);
  // Counted under the gate's name, never the address.
  const CounterFamily& c = metrics_.admissions();
  EXPECT_EQ(c.value({"a", "global_ip", "refused", "http"}) +
                c.value({"b", "global_ip", "refused", "http"}),
            1u);
}

// A waiter costs Redis nothing until a token can exist for it: ten requests on a gate of 20 a
// second are admitted over half a second with about one call each after the refusal that queued
// them, not one call per loop pass or per waiter per refill.
TEST_F(GatewayWaitTest, WaitersCostOneCallWhenATokenCanExistForThem) {
  tenant("t", "gold");
  const uint64_t before = redis_calls();
  for (int i = 0; i < 10; ++i) start("r" + std::to_string(i), "t");
  ASSERT_TRUE(answered(10));
  for (const Answer& a : answers_) EXPECT_EQ(a.r.outcome, Outcome::kAllowed) << a.name;
  const uint64_t calls = redis_calls() - before;
  // 10 first calls (9 refused), 9 admitting retries, and a few retries that a loaded machine's
  // late timers or the bucket's rounding made come a little early.
  EXPECT_GE(calls, 19u);
  EXPECT_LE(calls, 24u) << "calls: " << calls;
  // Each of the nine that waited was sent when its gate held its token, and timed from then.
  EXPECT_EQ(metrics_.token_to_admission().count(), 9u);
}

// 100,000 requests of 1,000 tenants wait in one gateway on one model gate: they cost Redis two
// calls (the first refusal; the others join the gate's waiters without asking), each takes what
// Gateway::kBytesPerWaiter says at most beside its client's connection, and a drain answers them
// all and gives the memory back.
TEST_F(GatewayWaitTest, AHundredThousandWaiters) {
  cfg_.global_gates.model["m"] = config::Bucket{1, 0.2};
  plan("any", config::Bucket{1e9, 1e9}, config::PlanQueue{60000, 2});
  tenant("*", "any");
  gateway();
  start("first", "t0", std::nullopt, "m");
  start("second", "t0", std::nullopt, "m");
  ASSERT_TRUE(loop_.wait_until([&] { return gateway().waiters() == 1; }, 3000ms));
  const uint64_t calls = redis_calls();
  answers_.reserve(100001);
  AdmitRequest req;
  req.model = "m";
  const size_t before = mallinfo2().uordblks;
  for (int i = 1; i < 100000; ++i) {
    req.tenant = "tenant-" + std::to_string(i % 1000);
    ASSERT_NE(gateway().admit(req,
                              [this](AdmitDecision d) {
                                answers_.push_back({"", std::move(d.result)});
                              }),
              0u);
  }
  const size_t used = mallinfo2().uordblks - before;
  EXPECT_EQ(gateway().waiters(), 100000u);
  EXPECT_EQ(metrics_.waiting(2, "model"), 100000);
  EXPECT_EQ(redis_calls(), calls);
  const size_t per_waiter = used / 99999;
  std::printf("memory per waiter: %zu B (100,000 waiters, 1,000 tenants, one gate)\n", per_waiter);
  EXPECT_LE(per_waiter, Gateway::kBytesPerWaiter);
  gateway().drain_waiters();
  EXPECT_EQ(gateway().waiters(), 0u);
  ASSERT_TRUE(answered(100001, 10000ms));
  for (size_t i = 1; i < answers_.size(); ++i)
    ASSERT_EQ(answers_[i].r.outcome, Outcome::kRefused) << i;
  EXPECT_EQ(metrics_.waiting(2, "model"), 0);
  EXPECT_EQ(waits("2", "timed_out"), 100000u);
}

}  // namespace
}  // namespace dripgate::control
