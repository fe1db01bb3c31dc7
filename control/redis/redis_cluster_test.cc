// The cluster client against a real 3-master Redis Cluster with a replica each
// (tests/redis_cluster.h), started once for this file: routing, MOVED after a migration, ASK
// during one, a failover under load and NOSCRIPT on a node whose script cache was flushed. The
// tests share the cluster and look its state up each time (a test may have moved slots or
// promoted replicas before).
#include "control/redis/redis_cluster.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <event2/event.h>

#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"
#include "control/admission/keys.h"
#include "control/redis/slot.h"
#include "lua/lua_scripts.h"
#include "tests/event_loop.h"
#include "tests/redis_cluster.h"
#include "tests/redis_result.h"

namespace dripgate::control {
namespace {

using std::chrono::milliseconds;
using Loop = dripgate::testing::EventLoop;
using Nodes = dripgate::testing::RedisCluster;

struct Observer : RedisObserver {
  std::map<std::string, int> errors;
  std::vector<bool> ups;
  void round_trip(double) override {}
  void error(const std::string& kind) override { ++errors[kind]; }
  void up(bool is_up) override { ups.push_back(is_up); }
};

using Result = dripgate::testing::RedisResult;

RedisCluster::Callback into(Result& out) {
  return out.into();
}

// INCRBY KEYS[1] ARGV[1]: a script of the test's own, so that the engine's scripts may change.
constexpr std::string_view kIncrText = "return redis.call('INCRBY', KEYS[1], ARGV[1])";

// evalsha on node i, from INFO commandstats: the calls that ran, and those the cluster refused
// before running them (a redirect, TRYAGAIN).
struct EvalshaCounts {
  long long calls = 0, rejected = 0;
};

// A request split over two masters, for the undo tests: a tenant whose slot is on master A and a
// model gate on master C, both buckets without refill (Redis's level tells what was taken), and
// B, the third master. The first request was admitted, so both buckets exist.
struct SplitAdmission {
  std::unique_ptr<ConfigStore> store;
  std::unique_ptr<Engine> engine;
  std::string tenant, model;
  int slot = -1;  // the tenant's
  size_t a = 0, b = 0, c = 0;
  double model_cap = 0;
  static constexpr double kCap = 1e9;

  AdmitRequest request() const {
    AdmitRequest req;
    req.tenant = tenant;
    req.model = model;
    return req;
  }
};

// While it lives, a node that sleeps or stops for seconds is not taken for failed: no failover
// under a test's feet (the nodes' own timeout is 1 s).
class LongNodeTimeout {
 public:
  explicit LongNodeTimeout(Nodes& nodes) : nodes_(nodes) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_.node(i).running()) continue;
      const std::string was = nodes_.call(i, {"CONFIG", "GET", "cluster-node-timeout"});
      was_.emplace_back(i, was.substr(was.find('\n') + 1));
      nodes_.call(i, {"CONFIG", "SET", "cluster-node-timeout", "60000"});
    }
  }
  ~LongNodeTimeout() {
    for (const auto& [i, was] : was_)
      nodes_.call(i, {"CONFIG", "SET", "cluster-node-timeout", was});
  }
  LongNodeTimeout(const LongNodeTimeout&) = delete;
  LongNodeTimeout& operator=(const LongNodeTimeout&) = delete;

 private:
  Nodes& nodes_;
  std::vector<std::pair<size_t, std::string>> was_;
};

// SIGSTOP on a node while it lives.
struct Stopped {
  explicit Stopped(dripgate::testing::RedisServer& s) : server(s) { server.pause(); }
  ~Stopped() { server.resume(); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;
  dripgate::testing::RedisServer& server;
};

class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    nodes_ = new Nodes(3, 1);
    incr_sha_ = nodes_->call(0, {"SCRIPT", "LOAD", std::string(kIncrText)});
    incr_ = lua::Script{"incr", incr_sha_, kIncrText};
  }
  static void TearDownTestSuite() {
    delete nodes_;
    nodes_ = nullptr;
  }

  // A client seeded with one node, up (a map read, every master connected).
  std::unique_ptr<RedisCluster> client(int timeout_ms = 1000, std::vector<std::string> seeds = {},
                                       int max_redirects = 5) {
    RedisClusterOptions o;
    o.seeds = seeds.empty() ? std::vector<std::string>{nodes_->seeds()[0]} : seeds;
    o.max_redirects = max_redirects;
    o.node.timeout_ms = timeout_ms;
    o.node.pool_size = 2;
    auto c = std::make_unique<RedisCluster>(loop_.base(), o,
                                            std::vector<const lua::Script*>{&incr_}, &obs_);
    EXPECT_TRUE(loop_.wait_until([&] { return c->up(); }, milliseconds(5000)));
    return c;
  }

  Result call(RedisCluster& c, std::vector<std::string_view> argv) {
    Result r;
    c.command(argv, into(r));
    EXPECT_TRUE(loop_.wait_until([&] { return r.done; }, milliseconds(5000)));
    return r;
  }

  Result incr(RedisCluster& c, std::string_view key, std::string_view by = "1") {
    Result r;
    std::string_view keys[] = {key};
    std::string_view args[] = {by};
    c.evalsha(incr_, keys, args, into(r));
    EXPECT_TRUE(loop_.wait_until([&] { return r.done; }, milliseconds(5000)));
    return r;
  }

  std::string addr(size_t node) { return "127.0.0.1:" + std::to_string(nodes_->node(node).port()); }

  // A master other than `not_this`.
  size_t other_master(size_t not_this) {
    for (size_t m : nodes_->masters())
      if (m != not_this) return m;
    ADD_FAILURE() << "no other master";
    return not_this;
  }

  // The tenant `name` (its slot on some master A), a model gate of model_cap on another
  // master C, and the first request admitted. Its engine answers into obs_, cleared after that.
  SplitAdmission split(const std::string& name, int timeout_ms, double model_cap) {
    SplitAdmission s;
    s.tenant = name;
    s.model_cap = model_cap;
    s.slot = hash_slot("t:" + name);
    s.a = nodes_->owner(s.slot);
    for (int i = 0; s.model.empty(); ++i) {
      std::string m = name + "-m" + std::to_string(i);
      if (nodes_->owner(hash_slot("g:model:" + m)) != s.a) s.model = m;
    }
    s.c = nodes_->owner(hash_slot("g:model:" + s.model));
    s.b = s.a;
    for (size_t m : nodes_->masters())
      if (m != s.a && m != s.c) s.b = m;
    EXPECT_NE(s.b, s.a) << "no third master";
    config::Config cfg;
    cfg.redis.cluster = {nodes_->seeds()[0]};
    cfg.redis.timeout_ms = timeout_ms;
    config::Plan plan;
    plan.name = "p";
    plan.tenant = config::Bucket{SplitAdmission::kCap, 0};
    cfg.plans["p"] = plan;
    cfg.tenants[name] = config::Tenant{name, "p"};
    cfg.global_gates.model[s.model] = config::Bucket{model_cap, 0};
    s.store = std::make_unique<ConfigStore>(cfg);
    s.engine = std::make_unique<Engine>(*s.store, loop_.base(), &obs_);
    EXPECT_TRUE(loop_.wait_until([&] { return s.engine->redis_up(); }, milliseconds(5000)));
    auto first = loop_.await<AdmitResult>(
        [&](std::function<void(AdmitResult)> done) { s.engine->admit(s.request(), done); },
        milliseconds(5000));
    EXPECT_TRUE(first && first->outcome == Outcome::kAllowed) << (first ? first->error : "");
    obs_.errors.clear();
    return s;
  }

  EvalshaCounts evalsha_counts(size_t node) {
    const std::string stats = nodes_->call(node, {"INFO", "commandstats"});
    EvalshaCounts n;
    const size_t at = stats.find("cmdstat_evalsha:");
    if (at == std::string::npos) return n;
    auto field = [&](std::string_view name) {
      const size_t f = stats.find(name, at);
      return f == std::string::npos ? 0LL : std::atoll(stats.c_str() + f + name.size());
    };
    n.calls = field(":calls=");
    n.rejected = field(",rejected_calls=");
    return n;
  }

  // Both buckets of `s` hold what its `admitted` requests took (the first one and any answered
  // 200 since) and nothing more, once the undos ran (they reach Redis on their own time: polled
  // for up to 10 s).
  void expect_charged_once(const SplitAdmission& s, double admitted = 1) {
    auto taken = [&](const std::string& key, int slot, double cap) {
      const std::string tk = nodes_->call(nodes_->owner(slot), {"HGET", key, "tk"});
      return tk.empty() ? 0.0 : cap - std::stod(tk);
    };
    double tenant = -1, model = -1;
    loop_.wait_until(
        [&] {
          tenant = taken(keys::bucket(s.tenant, "tenant"), s.slot, SplitAdmission::kCap);
          model = taken(keys::global_bucket("model", s.model), hash_slot("g:model:" + s.model),
                        s.model_cap);
          return tenant == admitted && model == admitted;
        },
        milliseconds(10000));
    EXPECT_EQ(tenant, admitted) << "a request not admitted is charged to the tenant";
    EXPECT_EQ(model, admitted) << "a request not admitted is charged to the model gate";
  }

  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(line);
    return out;
  }

  static Nodes* nodes_;
  static std::string incr_sha_;
  static lua::Script incr_;
  Loop loop_;
  Observer obs_;
};

Nodes* RedisClusterTest::nodes_ = nullptr;
std::string RedisClusterTest::incr_sha_;
lua::Script RedisClusterTest::incr_;

TEST_F(RedisClusterTest, SlotsAgreeWithRedis) {
  for (std::string key : {"foo", "dg:{t:acme}:bucket", "a{}b", "{user1000}.following", "x{y"})
    EXPECT_EQ(hash_slot(key), nodes_->keyslot(key)) << key;
}

TEST_F(RedisClusterTest, EachCallGoesToTheMasterOfItsSlot) {
  auto c = client();
  std::set<size_t> owners;
  for (int i = 0; i < 40; ++i) {
    std::string key = "route:" + std::to_string(i);
    std::string value = std::to_string(i * 7);
    EXPECT_EQ(call(*c, {"SET", key, value}).str, "OK") << key;
    int slot = hash_slot(key);
    size_t owner = nodes_->owner(slot);
    owners.insert(owner);
    EXPECT_EQ(c->owner_of(slot), addr(owner));
    // On its master, and nowhere else.
    EXPECT_EQ(nodes_->call(owner, {"GET", key}), value) << key;
    for (size_t m : nodes_->masters()) {
      if (m == owner) continue;
      EXPECT_EQ(nodes_->count_keys(m, slot), 0) << key;
    }
    // A script call with a hash-tagged key: its slot is the tag's.
    std::string tagged = "route:{t" + std::to_string(i) + "}:n";
    EXPECT_EQ(incr(*c, tagged, "5").integer, 5) << incr(*c, tagged, "0").str;
    EXPECT_EQ(nodes_->call(nodes_->owner(hash_slot("t" + std::to_string(i))), {"GET", tagged}),
              "5");
  }
  EXPECT_EQ(owners.size(), 3u) << "the keys should cover every master";
  // Routed from the map: no redirect once it was read.
  EXPECT_EQ(c->stats().moved, 0u);
  EXPECT_EQ(c->stats().asked, 0u);
  EXPECT_EQ(obs_.ups, std::vector<bool>({false, true}));
}

TEST_F(RedisClusterTest, MovedAfterAMigrationIsFollowedAndFixesTheMap) {
  auto c = client();
  const std::string key = "moved:{m1}";
  const int slot = hash_slot(key);
  ASSERT_EQ(call(*c, {"SET", key, "v1"}).str, "OK");
  const size_t from = nodes_->owner(slot);
  const size_t to = other_master(from);
  nodes_->migrate_slot(slot, to);
  EXPECT_EQ(c->owner_of(slot), addr(from)) << "the client has not heard yet";

  const uint64_t refreshes = c->stats().refreshes;
  Result r = call(*c, {"GET", key});
  EXPECT_EQ(r.str, "v1") << r.error;
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_EQ(c->owner_of(slot), addr(to));
  // The next call goes straight to the new owner; the refresh the MOVED asked for comes too.
  EXPECT_EQ(incr(*c, "moved:{m1}:n").integer, 1);
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_TRUE(
      loop_.wait_until([&] { return c->stats().refreshes > refreshes; }, milliseconds(3000)));
  EXPECT_EQ(c->owner_of(slot), addr(to));
  EXPECT_EQ(nodes_->call(to, {"GET", "moved:{m1}:n"}), "1");
  EXPECT_GE(obs_.errors["moved"], 1);
}

TEST_F(RedisClusterTest, RedirectsAreBounded) {
  auto c = client(1000, {}, 0);
  const std::string key = "bounded:{b1}";
  ASSERT_EQ(call(*c, {"SET", key, "v"}).str, "OK");
  const int slot = hash_slot(key);
  nodes_->migrate_slot(slot, other_master(nodes_->owner(slot)));
  Result r = call(*c, {"GET", key});
  EXPECT_EQ(r.error, "redis: too many redirects");
  EXPECT_EQ(r.type, 0);
  EXPECT_EQ(obs_.errors["redirects"], 1);
  // The periodic refresh catches up all the same.
  EXPECT_TRUE(loop_.wait_until([&] { return c->owner_of(slot) == addr(nodes_->owner(slot)); },
                               milliseconds(3000)));
  EXPECT_EQ(call(*c, {"GET", key}).str, "v");
}

TEST_F(RedisClusterTest, AskDuringAMigrationGoesOnceToTheImportingNode) {
  auto c = client();
  const int slot = hash_slot("ask");
  ASSERT_EQ(call(*c, {"SET", "{ask}:a", "A"}).str, "OK");
  ASSERT_EQ(call(*c, {"SET", "{ask}:b", "B"}).str, "OK");
  const size_t from = nodes_->owner(slot);
  const size_t to = other_master(from);
  nodes_->begin_migration(slot, to);
  nodes_->move_key("{ask}:a");
  // A flushed script cache on the importing node: NOSCRIPT, SCRIPT LOAD, and the retry goes
  // behind a fresh ASKING.
  ASSERT_EQ(nodes_->call(to, {"SCRIPT", "FLUSH"}), "OK");

  EXPECT_EQ(call(*c, {"GET", "{ask}:a"}).str, "A");  // moved already: ASK
  EXPECT_EQ(c->stats().asked, 1u);
  EXPECT_EQ(call(*c, {"GET", "{ask}:b"}).str, "B");  // still on the source
  EXPECT_EQ(c->stats().asked, 1u);
  // A new key of the slot is created on the importing node (the source sends ASK for it).
  Result n = incr(*c, "{ask}:n", "3");
  EXPECT_EQ(n.integer, 3) << n.str << n.error;
  EXPECT_EQ(c->stats().asked, 2u);
  EXPECT_GE(obs_.errors["noscript"], 1);
  EXPECT_EQ(nodes_->count_keys(to, slot), 2);    // a and n
  EXPECT_EQ(nodes_->count_keys(from, slot), 1);  // b
  // An ASK changes no map entry.
  EXPECT_EQ(c->owner_of(slot), addr(from));
  EXPECT_EQ(c->stats().moved, 0u);

  nodes_->finish_migration(slot);
  EXPECT_EQ(call(*c, {"GET", "{ask}:b"}).str, "B");
  EXPECT_EQ(c->stats().moved, 1u);
  EXPECT_EQ(c->owner_of(slot), addr(to));
}

TEST_F(RedisClusterTest, NoscriptOnANodeThatNeverSawTheScript) {
  auto c = client();
  for (size_t m : nodes_->masters()) ASSERT_EQ(nodes_->call(m, {"SCRIPT", "FLUSH"}), "OK");
  std::set<size_t> owners;
  for (int i = 0; i < 12; ++i) {
    std::string key = "noscript:" + std::to_string(i);
    owners.insert(nodes_->owner(hash_slot(key)));
    Result r = incr(*c, key, "2");
    EXPECT_EQ(r.integer, 2) << r.str << r.error;
  }
  EXPECT_EQ(owners.size(), 3u);
  // One NOSCRIPT per connection that met the flushed cache, at most.
  EXPECT_GE(obs_.errors["noscript"], 3);
  EXPECT_LE(obs_.errors["noscript"], 3 * 2);
}

TEST_F(RedisClusterTest, ASeedThatIsDownIsSkipped) {
  auto c = client(
      1000, {"127.0.0.1:" + std::to_string(dripgate::testing::free_port()), nodes_->seeds()[1]});
  EXPECT_TRUE(c->up());
  EXPECT_EQ(incr(*c, "seed:{s}").integer, 1);
}

TEST_F(RedisClusterTest, TheConfigurationChoosesTheCluster) {
  config::Redis r;
  r.cluster = {nodes_->seeds()[2]};
  r.timeout_ms = 1000;
  std::unique_ptr<RedisCalls> calls =
      make_redis_calls(loop_.base(), r, std::vector<const lua::Script*>{&incr_}, &obs_);
  ASSERT_NE(dynamic_cast<RedisCluster*>(calls.get()), nullptr);
  ASSERT_TRUE(loop_.wait_until([&] { return calls->up(); }, milliseconds(5000)));
  EXPECT_EQ(calls->state(), "up");
  for (std::string key : {"config:a", "config:b", "config:c", "config:d"}) {
    Result res;
    std::string_view keys[] = {key};
    std::string_view args[] = {"4"};
    calls->evalsha(incr_, keys, args, into(res));
    ASSERT_TRUE(loop_.wait_until([&] { return res.done; }, milliseconds(5000)));
    EXPECT_EQ(res.integer, 4) << key << res.str << res.error;
  }
  // Without seeds: the single node of the url.
  EXPECT_EQ(dynamic_cast<RedisCluster*>(
                make_redis_calls(loop_.base(), config::Redis{}, {}, nullptr).get()),
            nullptr);
}

// redis.user on a cluster: every connection, to every master the map names, authenticates as
// that ACL user (CLIENT LIST says so); a wrong password never comes up and counts as auth.
TEST_F(RedisClusterTest, AnAclUserAuthenticatesOnEveryNode) {
  for (size_t i = 0; i < nodes_->size(); ++i)
    ASSERT_EQ(nodes_->call(i, {"ACL", "SETUSER", "dg-gw", "on", ">s3cret", "~*", "+@all"}), "OK");
  config::Redis r;
  r.cluster = {nodes_->seeds()[0]};
  r.timeout_ms = 1000;
  r.user = "dg-gw";
  r.password = "s3cret";
  {
    std::unique_ptr<RedisCalls> calls =
        make_redis_calls(loop_.base(), r, std::vector<const lua::Script*>{&incr_}, &obs_);
    ASSERT_TRUE(loop_.wait_until([&] { return calls->up(); }, milliseconds(5000)));
    for (std::string key : {"acl:a", "acl:b", "acl:c", "acl:d"}) {
      Result res;
      std::string_view keys[] = {key};
      std::string_view args[] = {"2"};
      calls->evalsha(incr_, keys, args, into(res));
      ASSERT_TRUE(loop_.wait_until([&] { return res.done; }, milliseconds(5000)));
      EXPECT_EQ(res.integer, 2) << key << res.str << res.error;
    }
    for (size_t m : nodes_->masters()) {
      const std::string clients = nodes_->call(m, {"CLIENT", "LIST"});
      EXPECT_NE(clients.find("user=dg-gw"), std::string::npos) << "master " << m << ": " << clients;
    }
  }
  r.password = "wrong";
  obs_.errors.clear();
  std::unique_ptr<RedisCalls> refused =
      make_redis_calls(loop_.base(), r, std::vector<const lua::Script*>{&incr_}, &obs_);
  EXPECT_TRUE(loop_.wait_until([&] { return obs_.errors["auth"] > 0; }, milliseconds(5000)));
  EXPECT_FALSE(refused->up());
  refused.reset();
  for (size_t i = 0; i < nodes_->size(); ++i) nodes_->call(i, {"ACL", "DELUSER", "dg-gw"});
}

// The admission engine on the cluster (its RedisCalls chosen by redis.cluster): a tenant bucket
// of 3 admits 3 and refuses the 4th, with a model gate on another slot beside it.
TEST_F(RedisClusterTest, TheEngineAdmitsOnTheCluster) {
  config::Config cfg;
  cfg.redis.cluster = {nodes_->seeds()[1]};
  cfg.redis.timeout_ms = 1000;
  cfg.redis.pool_size = 2;
  config::Plan plan;
  plan.name = "p";
  plan.tenant = config::Bucket{3, 0.001};
  cfg.plans["p"] = plan;
  cfg.tenants["acme"] = config::Tenant{"acme", "p"};
  cfg.global_gates.model["m1"] = config::Bucket{100, 0.001};
  ConfigStore store(cfg);
  Engine engine(store, loop_.base());
  ASSERT_TRUE(loop_.wait_until([&] { return engine.redis_up(); }, milliseconds(5000)));
  ASSERT_NE(hash_slot("t:acme"), hash_slot("g:model:m1"));
  std::vector<Outcome> outcomes;
  for (int i = 0; i < 4; ++i) {
    AdmitRequest req;
    req.tenant = "acme";
    req.model = "m1";
    std::optional<AdmitResult> res;
    engine.admit(req, [&](AdmitResult r) { res = std::move(r); });
    ASSERT_TRUE(loop_.wait_until([&] { return res.has_value(); }, milliseconds(5000)));
    EXPECT_EQ(res->error, "") << i;
    outcomes.push_back(res->outcome);
  }
  EXPECT_EQ(outcomes, (std::vector<Outcome>{Outcome::kAllowed, Outcome::kAllowed, Outcome::kAllowed,
                                            Outcome::kRefused}));
}

// A request naming a model and a tool is one call per slot (the tenant's, the model's, the
// tool's), sent together: a refusal by the tool gives the tenant and model buckets their token
// back, so a later request finds them where the two admitted requests left them. (Names of its
// own: the cluster is shared by the tests.)
TEST_F(RedisClusterTest, OneCallPerSlotAndARefusalRefundsTheOthers) {
  config::Config cfg;
  cfg.redis.cluster = {nodes_->seeds()[0]};
  cfg.redis.timeout_ms = 1000;
  config::Plan plan;
  plan.name = "p";
  plan.tenant = config::Bucket{10, 0.001};
  cfg.plans["p"] = plan;
  cfg.tenants["per-slot"] = config::Tenant{"per-slot", "p"};
  cfg.global_gates.model["m-per-slot"] = config::Bucket{10, 0.001};
  cfg.global_gates.tool["x-per-slot"] = config::Bucket{2, 0.001};
  ConfigStore store(cfg);
  Engine engine(store, loop_.base());
  ASSERT_TRUE(loop_.wait_until([&] { return engine.redis_up(); }, milliseconds(5000)));
  const std::set<int> slots = {hash_slot("t:per-slot"), hash_slot("g:model:m-per-slot"),
                               hash_slot("g:tool:x-per-slot")};
  ASSERT_EQ(slots.size(), 3u);
  auto admit = [&](const std::string& tool) {
    AdmitRequest req;
    req.tenant = "per-slot";
    req.model = "m-per-slot";
    req.tool = tool;
    std::optional<AdmitResult> res;
    engine.admit(req, [&](AdmitResult r) { res = std::move(r); });
    EXPECT_TRUE(loop_.wait_until([&] { return res.has_value(); }, milliseconds(5000)));
    return res.value_or(AdmitResult{});
  };
  auto level = [](const AdmitResult& r, std::string_view gate) {
    for (const Remaining& rem : r.remaining)
      if (rem.gate == gate) return rem.value;
    return -1.0;
  };
  for (int i = 0; i < 2; ++i) {
    AdmitResult r = admit("x-per-slot");
    EXPECT_EQ(r.outcome, Outcome::kAllowed) << i << " " << r.error;
  }
  AdmitResult refused = admit("x-per-slot");
  EXPECT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "tool");
  EXPECT_NEAR(level(refused, "tenant"), 8, 0.1);
  EXPECT_NEAR(level(refused, "model"), 8, 0.1);
  // What Redis holds, not what the engine computed: the third admitted request finds 7 left.
  AdmitResult third = admit("");
  EXPECT_EQ(third.outcome, Outcome::kAllowed) << third.error;
  EXPECT_NEAR(level(third, "tenant"), 7, 0.1);
  EXPECT_NEAR(level(third, "model"), 7, 0.1);
}

// The total gate on the cluster: its own slot, shared by tenants in other slots; a refusal by it
// refunds the tenant's call (ip gate included) in the tenant's slot.
TEST_F(RedisClusterTest, TheTotalGateLimitsTenantsOnTheCluster) {
  config::Config cfg;
  cfg.redis.cluster = {nodes_->seeds()[0]};
  cfg.redis.timeout_ms = 1000;
  cfg.redis.pool_size = 2;
  config::Plan plan;
  plan.name = "p";
  plan.tenant = config::Bucket{100, 0.001};
  plan.ip = config::Bucket{100, 0.001};
  cfg.plans["p"] = plan;
  // Tenants of their own: the cluster is shared by the tests of this file.
  for (const char* t : {"acme-total", "bravo-total"}) cfg.tenants[t] = config::Tenant{t, "p"};
  cfg.global_gates.total = config::Bucket{2, 0.001};
  ConfigStore store(cfg);
  Engine engine(store, loop_.base());
  ASSERT_TRUE(loop_.wait_until([&] { return engine.redis_up(); }, milliseconds(5000)));
  ASSERT_NE(hash_slot("t:acme-total"), hash_slot("g:total"));
  ASSERT_NE(hash_slot("t:bravo-total"), hash_slot("g:total"));
  std::vector<std::string> gates;
  for (const char* t : {"acme-total", "bravo-total", "acme-total"}) {
    AdmitRequest req;
    req.tenant = t;
    req.client_ip = "2001:db8::7";
    std::optional<AdmitResult> res;
    engine.admit(req, [&](AdmitResult r) { res = std::move(r); });
    ASSERT_TRUE(loop_.wait_until([&] { return res.has_value(); }, milliseconds(5000)));
    EXPECT_EQ(res->error, "") << t;
    gates.push_back(res->outcome == Outcome::kRefused ? res->gate : "");
    if (res->outcome == Outcome::kRefused) {
      for (const Remaining& r : res->remaining) {
        if (r.gate == "tenant" || r.gate == "ip") {
          EXPECT_NEAR(r.value, 99, 0.01) << r.gate;
        }
      }
    }
  }
  EXPECT_EQ(gates, (std::vector<std::string>{"", "", "total"}));
}

// A request answered 503 or 429 is charged nothing, also when its undo meets a cluster refusal
// (MOVED, ASK, TRYAGAIN, or a call that ran out of redirects): those mean the undo did not run,
// and it is sent again until it does.
//
// Late: the tenant's call runs on A, the model gate's on C does not answer (stopped), so the
// request is answered 503 after the timeout, and its undo goes to A. Before that, A is sent
// one batch: DEBUG SLEEP, then MIGRATE of every key of the tenant's slot to B (IMPORTING on B
// and MIGRATING on A set just before). A runs the batch before the undo it receives while
// asleep; the undo times out meanwhile, its connection is dropped as stalled (its reply, the ASK
// of keys gone, never read: lost), and sent again it runs on B, so the tenant ends charged for
// the first request only.
TEST_F(RedisClusterTest, AnUndoAnsweredARedirectAfterItsTimeoutIsSentAgain) {
  constexpr int kTimeoutMs = 2000;
  // The batch reaches A within kTimeoutMs / 2 (checked), the undo is sent at about kTimeoutMs
  // and times out at about 2 * kTimeoutMs, which drops its connection; A wakes up at about
  // 3 * kTimeoutMs and runs what it had read.
  const std::string sleep_s = std::to_string(3 * kTimeoutMs / 1000);
  std::optional<AdmitResult> res;  // answered into until the engine in s is gone
  SplitAdmission s = split("late-redirect", kTimeoutMs, SplitAdmission::kCap);
  const std::string slot = std::to_string(s.slot);
  const EvalshaCounts on_a = evalsha_counts(s.a);
  std::vector<std::string> batch;
  std::atomic<bool> batch_done{false};
  std::chrono::steady_clock::time_point sent, written;
  std::jthread sleeper;
  {
    LongNodeTimeout long_timeout(*nodes_);
    {
      Stopped stopped(nodes_->node(s.c));
      sent = std::chrono::steady_clock::now();
      s.engine->admit(s.request(), [&](AdmitResult r) { res = std::move(r); });
      ASSERT_TRUE(loop_.wait_until([&] { return evalsha_counts(s.a).calls > on_a.calls; },
                                   milliseconds(kTimeoutMs / 4)))
          << "the tenant's call did not run on A";
      nodes_->begin_migration(s.slot, s.b);
      std::vector<std::string> migrate = {
          "MIGRATE", "127.0.0.1", std::to_string(nodes_->node(s.b).port()), "", "0",
          "5000",    "KEYS"};
      for (std::string& key : lines(nodes_->call(s.a, {"CLUSTER", "GETKEYSINSLOT", slot, "100"})))
        migrate.push_back(std::move(key));
      sleeper = std::jthread([&, migrate] {
        written = std::chrono::steady_clock::now();
        batch = nodes_->pipeline(s.a, {{"DEBUG", "SLEEP", sleep_s}, migrate});
        batch_done = true;
      });
      EXPECT_TRUE(loop_.wait_until([&] { return res.has_value(); }, milliseconds(3 * kTimeoutMs)));
    }
    EXPECT_TRUE(loop_.wait_until([&] { return batch_done.load(); }, milliseconds(6 * kTimeoutMs)));
    sleeper.join();
    EXPECT_EQ(batch, (std::vector<std::string>{"OK", "OK"}));
    // Written well before the undo was (the model gate's call timed out at kTimeoutMs).
    EXPECT_LT(written - sent, milliseconds(kTimeoutMs / 2));
    // A refused the undo it ran after the batch (its keys gone).
    EXPECT_TRUE(loop_.wait_until([&] { return evalsha_counts(s.a).rejected > on_a.rejected; },
                                 milliseconds(2 * kTimeoutMs)));
  }
  nodes_->finish_migration(s.slot);
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->outcome, Outcome::kUnavailable);
  EXPECT_NE(res->error.find("timeout"), std::string::npos) << res->error;
  expect_charged_once(s);
  EXPECT_GE(obs_.errors["lost"], 1) << "the undo's connection was not dropped as stalled";
  EXPECT_GE(obs_.errors["stall"], 1);
}

// In time: the tenant's call runs on A while the model gate's call waits on C (stopped); then
// every key of the tenant's slot moves to B (the migration left open) and C answers: the model
// gate refuses (its one token was taken by the first request), and the tenant's undo goes to A.
// A answers ASK, B TRYAGAIN (the undo declares keys the admission never created, which B does
// not hold), sent again until the cluster client gives up (its TRYAGAIN window over, answered
// TRYAGAIN): the undo did not run, and is sent again after a back-off until the migration is
// over and it runs on B.
TEST_F(RedisClusterTest, AnUndoRefusedInTimeByTheClusterIsSentAgain) {
  constexpr int kTimeoutMs = 2000;
  std::optional<AdmitResult> res;  // answered into until the engine in s is gone
  SplitAdmission s = split("intime-redirect", kTimeoutMs, 1);
  const std::string slot = std::to_string(s.slot);
  const EvalshaCounts on_a = evalsha_counts(s.a);
  {
    LongNodeTimeout long_timeout(*nodes_);
    Stopped stopped(nodes_->node(s.c));
    s.engine->admit(s.request(), [&](AdmitResult r) { res = std::move(r); });
    ASSERT_TRUE(loop_.wait_until([&] { return evalsha_counts(s.a).calls > on_a.calls; },
                                 milliseconds(kTimeoutMs / 2)))
        << "the tenant's call did not run on A";
    nodes_->begin_migration(s.slot, s.b);
    for (const std::string& key :
         lines(nodes_->call(s.a, {"CLUSTER", "GETKEYSINSLOT", slot, "100"})))
      nodes_->move_key(key);
  }
  EXPECT_TRUE(loop_.wait_until([&] { return res.has_value(); }, milliseconds(2 * kTimeoutMs)));
  EXPECT_TRUE(loop_.wait_until([&] { return obs_.errors["undo_wait"] >= 2; }, milliseconds(10000)));
  nodes_->finish_migration(s.slot);
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->outcome, Outcome::kRefused) << res->error;
  EXPECT_EQ(res->gate, "model");
  EXPECT_GE(obs_.errors["ask"], 2);
  EXPECT_GE(obs_.errors["tryagain"], 2);
  EXPECT_GE(evalsha_counts(s.a).rejected, on_a.rejected + 1);
  expect_charged_once(s);
}

// A reshard of the tenant's slot from A to B, as `redis-cli --cluster reshard` does it (keys
// moved in batches, then the slot given to B), with admissions in flight all along. The slot holds
// keys no admission declares, which stay on A until the end: its keys are split between A and B
// throughout. Once the tenant's own keys moved, A answers an admission ASK (none of its keys left
// there) and B, asked with ASKING, TRYAGAIN (the admission declares keys it never created, which
// B does not hold): ASK and TRYAGAIN alternately, until the migration ends 200 ms later, well
// within the 2 s timeout. Every admission rides through: answered 200, charged once.
TEST_F(RedisClusterTest, AdmissionsRideThroughAMigrationOfTheirSlot) {
  constexpr int kTimeoutMs = 2000;
  constexpr int kAdmissions = 8;
  constexpr auto kBatchGap = milliseconds(100);
  SplitAdmission s = split("mid-migration", kTimeoutMs, SplitAdmission::kCap);
  const std::string slot = std::to_string(s.slot);
  const std::vector<std::string> tenant_keys =
      lines(nodes_->call(s.a, {"CLUSTER", "GETKEYSINSLOT", slot, "100"}));
  ASSERT_FALSE(tenant_keys.empty());
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(nodes_->call(s.a, {"SET", "{t:mid-migration}:other:" + std::to_string(i), "x"}),
              "OK");
  nodes_->begin_migration(s.slot, s.b);

  std::vector<std::pair<AdmitResult, milliseconds>> results;  // and when, since start
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kAdmissions; ++i)
    s.engine->admit(s.request(), [&](AdmitResult r) {
      results.emplace_back(std::move(r), std::chrono::duration_cast<milliseconds>(
                                             std::chrono::steady_clock::now() - start));
    });
  std::atomic<bool> finished{false};
  milliseconds open{};
  std::jthread reshard([&] {
    // The tenant's keys in two batches (the first leaves them split: A answers TRYAGAIN), the
    // other keys and the slot at the end.
    const size_t half = tenant_keys.size() / 2;
    for (size_t i = 0; i < half; ++i) nodes_->move_key(tenant_keys[i]);
    std::this_thread::sleep_for(kBatchGap);
    for (size_t i = half; i < tenant_keys.size(); ++i) nodes_->move_key(tenant_keys[i]);
    std::this_thread::sleep_for(kBatchGap);
    open = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    nodes_->finish_migration(s.slot);
    finished = true;
  });
  EXPECT_TRUE(loop_.wait_until([&] { return finished.load() && results.size() == kAdmissions; },
                               milliseconds(4 * kTimeoutMs)));
  reshard.join();
  ASSERT_EQ(nodes_->owner(s.slot), s.b);
  ASSERT_EQ(results.size(), size_t{kAdmissions});
  for (const auto& [r, at] : results)
    EXPECT_TRUE(r.outcome == Outcome::kAllowed)
        << "answered " << static_cast<int>(r.outcome) << " \"" << r.error << "\" at " << at.count()
        << " ms; the migration ended at " << open.count() << " ms";
  // They met the migration (ASK and TRYAGAIN while it was open) and waited for it, not for a
  // timeout.
  EXPECT_GE(obs_.errors["ask"], kAdmissions);
  EXPECT_GE(obs_.errors["tryagain"], kAdmissions);
  EXPECT_EQ(obs_.errors["redirects"], 0);
  EXPECT_LT(open, milliseconds(kTimeoutMs));
  expect_charged_once(s, 1 + kAdmissions);
  milliseconds last{};
  for (const auto& [r, at] : results) last = std::max(last, at);
  std::printf(
      "migration of the tenant's slot: %d admissions answered by %lld ms, the slot given "
      "away at %lld ms; %d ASK and %d TRYAGAIN met\n",
      kAdmissions, static_cast<long long>(last.count()), static_cast<long long>(open.count()),
      obs_.errors["ask"], obs_.errors["tryagain"]);
}

// A real redirect loop: the slot MIGRATING on A but not IMPORTING on B (a reshard misconfigured
// or cut short). A answers ASK for a key it does not hold, B (not the owner, not importing)
// MOVED back to A, and so on, no TRYAGAIN between: the call gives up after max_redirects.
TEST_F(RedisClusterTest, ARedirectLoopIsCutAfterMaxRedirects) {
  auto c = client();
  const std::string key = "loop:{l1}";
  const int slot = hash_slot(key);
  const size_t a = nodes_->owner(slot);
  const size_t b = other_master(a);
  ASSERT_EQ(
      nodes_->call(a, {"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", nodes_->id(b)}),
      "OK");
  const auto start = std::chrono::steady_clock::now();
  Result r = incr(*c, key);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(nodes_->call(a, {"CLUSTER", "SETSLOT", std::to_string(slot), "STABLE"}), "OK");
  EXPECT_EQ(r.error, kTooManyRedirects);
  EXPECT_EQ(r.type, 0);
  EXPECT_EQ(c->stats().asked + c->stats().moved, 5u);
  EXPECT_EQ(obs_.errors["redirects"], 1);
  EXPECT_EQ(obs_.errors["tryagain"], 0);
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_EQ(incr(*c, key).integer, 1);
}

// Keeps `in_flight` script calls (INCRBY key 1) going round `keys` and counts, per key, what
// succeeded and what failed. A failed call's slot is used again 5 ms later (a dead node
// refuses at once; no busy loop).
// It owns the client, destroyed first (the last member): the calls it still holds are answered
// into a live Load.
struct Load {
  Load(std::unique_ptr<RedisCluster> client, const lua::Script& s, event_base* b,
       std::vector<std::string> k)
      : script(s),
        base(b),
        keys(std::move(k)),
        ok(keys.size()),
        failed(keys.size()),
        c(std::move(client)) {}

  const lua::Script& script;
  event_base* base;
  std::vector<std::string> keys;
  std::vector<long long> ok, failed;
  std::vector<std::string> errors;
  int issued = 0, answered = 0;
  bool stop = false;
  std::unique_ptr<RedisCluster> c;

  void start(int in_flight) {
    for (int i = 0; i < in_flight; ++i) issue();
  }
  void issue() {
    if (stop) return;
    size_t k = static_cast<size_t>(issued++) % keys.size();
    std::string_view ks[] = {keys[k]};
    std::string_view args[] = {"1"};
    c->evalsha(script, ks, args, [this, k](const redisReply* r, std::string_view error) {
      ++answered;
      if (r && r->type == REDIS_REPLY_INTEGER) {
        ++ok[k];
        return issue();
      }
      ++failed[k];
      errors.push_back(r ? std::string(r->str, r->len) : std::string(error));
      timeval later{0, 5000};
      event_base_once(
          base, -1, EV_TIMEOUT, [](int, short, void* self) { static_cast<Load*>(self)->issue(); },
          this, &later);
    });
  }
  long long failures() const {
    long long n = 0;
    for (long long f : failed) n += f;
    return n;
  }
};

// Runs `change` on a thread of its own (it blocks) while the load goes on, then 200 more calls,
// then stops the load and waits for every answer.
template <class Change>
void under_load(Loop& loop, Load& load, Change change) {
  ASSERT_TRUE(loop.wait_until([&] { return load.answered >= 200; }, milliseconds(10000)));
  std::atomic<bool> changed{false};
  std::thread t([&] {
    change();
    changed = true;
  });
  const bool done = loop.wait_until([&] { return changed.load(); }, milliseconds(30000));
  t.join();
  ASSERT_TRUE(done);
  const int at_change = load.answered;
  ASSERT_TRUE(
      loop.wait_until([&] { return load.answered >= at_change + 200; }, milliseconds(10000)));
  load.stop = true;
  ASSERT_TRUE(loop.wait_until([&] { return load.answered == load.issued; }, milliseconds(5000)));
}

std::vector<std::string> numbered(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// A manual failover of the master of some keys while 16 calls are in flight at all times. The
// old master holds its clients while the replica catches up and takes over, then answers MOVED,
// which is followed. The bound: a call waits out its timeout only when that pause outlasts it,
// so at most the 16 calls in flight then; their connection is then dropped as stalled, and until
// the router finds the new owner the calls for its slots fail fast (CLUSTERDOWN, not waiting).
// Counters stay exact: a success ran once; a failure may have run or not.
TEST_F(RedisClusterTest, AManualFailoverUnderLoadAnswersEveryCall) {
  Load load{client(500), incr_, loop_.base(), numbered("failover:", 8)};
  RedisCluster& c = *load.c;
  const size_t victim = nodes_->owner(hash_slot(load.keys[0]));
  load.start(16);
  size_t promoted = victim;
  under_load(loop_, load, [&] { promoted = nodes_->failover(victim); });

  long long timeouts = 0;
  for (const auto& e : load.errors) {
    const bool timeout = e.find("timeout") != std::string::npos;
    timeouts += timeout;
    EXPECT_TRUE(timeout || e.find("CLUSTERDOWN") != std::string::npos) << e;
  }
  EXPECT_LE(timeouts, 16);
  EXPECT_EQ(c.owner_of(hash_slot(load.keys[0])), addr(promoted));
  EXPECT_GE(c.stats().moved, 1u);
  for (size_t k = 0; k < load.keys.size(); ++k) {
    std::string v = call(c, {"GET", load.keys[k]}).str;
    long long value = v.empty() ? 0 : std::stoll(v);
    EXPECT_GE(value, load.ok[k]) << load.keys[k];
    EXPECT_LE(value, load.ok[k] + load.failed[k]) << load.keys[k];
  }
  std::printf("manual failover: %d calls, %lld failed, %llu MOVED followed\n", load.issued,
              load.failures(), static_cast<unsigned long long>(c.stats().moved));
}

// Admissions, not raw calls, under a slot migration of the tenant's slot and a manual failover
// of the model gate's master, 16 in flight at all times: every request is answered, failures
// are bounded (a request fails only when a change outlasts its 2 s timeout: at most the 16 in
// flight per change), and Redis ends holding exactly what the requests answered 200 took, no
// more (no over-admission) and no less: a failed request was undone (refund.lua, ungates.lua).
TEST_F(RedisClusterTest, AdmissionsAcrossAMigrationAndAFailoverChargeExactlyTheAdmitted) {
  constexpr double kCap = 1e9;  // no refill: tokens taken = kCap - tk
  config::Config cfg;
  cfg.redis.cluster = {nodes_->seeds()[0]};
  cfg.redis.timeout_ms = 2000;
  config::Plan plan;
  plan.name = "p";
  plan.tenant = config::Bucket{kCap, 0};
  cfg.plans["p"] = plan;
  cfg.tenants["moving"] = config::Tenant{"moving", "p"};
  cfg.global_gates.model["m-moving"] = config::Bucket{kCap, 0};
  ConfigStore store(cfg);
  auto engine = std::make_unique<Engine>(store, loop_.base());
  ASSERT_TRUE(loop_.wait_until([&] { return engine->redis_up(); }, milliseconds(5000)));
  const int tenant_slot = hash_slot("t:moving"), model_slot = hash_slot("g:model:m-moving");

  int issued = 0, answered = 0, admitted = 0;
  std::vector<std::string> errors;
  bool stop = false;
  std::function<void()> issue = [&] {
    if (stop) return;
    ++issued;
    AdmitRequest req;
    req.tenant = "moving";
    req.model = "m-moving";
    engine->admit(req, [&](AdmitResult r) {
      ++answered;
      if (r.outcome == Outcome::kAllowed)
        ++admitted;
      else
        errors.push_back(r.error.empty() ? r.gate : r.error);
      issue();
    });
  };
  auto run_through = [&](auto change) {
    const int before = answered;
    ASSERT_TRUE(loop_.wait_until([&] { return answered >= before + 200; }, milliseconds(10000)));
    std::atomic<bool> changed{false};
    std::thread t([&] {
      change();
      changed = true;
    });
    const bool done = loop_.wait_until([&] { return changed.load(); }, milliseconds(30000));
    t.join();
    ASSERT_TRUE(done);
  };
  for (int i = 0; i < 16; ++i) issue();
  const size_t from = nodes_->owner(tenant_slot);
  const size_t to = nodes_->masters()[0] == from ? nodes_->masters()[1] : nodes_->masters()[0];
  run_through([&] { nodes_->migrate_slot(tenant_slot, to); });
  run_through([&] { nodes_->failover(nodes_->owner(model_slot)); });
  const int at_end = answered;
  ASSERT_TRUE(loop_.wait_until([&] { return answered >= at_end + 200; }, milliseconds(10000)));
  stop = true;
  ASSERT_TRUE(loop_.wait_until([&] { return answered == issued; }, milliseconds(10000)));

  EXPECT_LE(errors.size(), 32u);
  for (const auto& e : errors) EXPECT_NE(e.find("timeout"), std::string::npos) << e;
  // The undos of failed requests reach Redis on their own time: wait for the levels to settle.
  auto check = client(1000);
  ASSERT_TRUE(loop_.wait_until([&] { return check->up(); }, milliseconds(5000)));
  auto taken = [&](const std::string& key) {
    std::string tk = call(*check, {"HGET", key, "tk"}).str;
    return tk.empty() ? 0.0 : kCap - std::stod(tk);
  };
  const std::string tenant_key = keys::bucket("moving", "tenant");
  const std::string model_key = keys::global_bucket("model", "m-moving");
  double tenant_taken = -1, model_taken = -1;
  for (int i = 0; i < 100; ++i) {
    tenant_taken = taken(tenant_key);
    model_taken = taken(model_key);
    if (tenant_taken == admitted && model_taken == admitted) break;
    loop_.wait_until([] { return false; }, milliseconds(100));
  }
  EXPECT_EQ(tenant_taken, admitted);
  EXPECT_EQ(model_taken, admitted);
  EXPECT_EQ(nodes_->owner(tenant_slot), to);
  std::printf("migration + failover: %d admissions, %d admitted, %zu failed\n", issued, admitted,
              errors.size());
  engine.reset();
}

// A master killed under load: the cluster notices (node timeout 1 s) and promotes its replica.
// The bound is a window, not a count: only calls for the dead master's slots fail (refused at
// once, or lost with its connection), and only until the client's map names the promoted
// replica (the node timeout, the election, and one refresh, asked for by the first failure);
// once it does, no call fails. (Replication is asynchronous: a write acknowledged just before
// the kill may be lost with the node, so no counter is checked here.)
TEST_F(RedisClusterTest, AKilledMasterIsReplacedAndOnlyItsSlotsFailMeanwhile) {
  Load load{client(300), incr_, loop_.base(), numbered("killed:", 12)};
  RedisCluster& c = *load.c;
  const size_t victim = nodes_->owner(hash_slot(load.keys[0]));
  load.start(16);
  size_t promoted = victim;
  under_load(loop_, load, [&] { promoted = nodes_->kill_master(victim); });
  EXPECT_EQ(c.owner_of(hash_slot(load.keys[0])), addr(promoted));

  for (size_t k = 0; k < load.keys.size(); ++k) {
    const int slot = hash_slot(load.keys[k]);
    if (nodes_->owner(slot) == promoted) continue;
    EXPECT_EQ(load.failed[k], 0) << load.keys[k];
  }
  EXPECT_GT(load.failures(), 0) << "the dead master's keys were refused for a while";
  std::map<std::string, int> why;
  for (const auto& e : load.errors) ++why[e];
  for (const auto& [e, n] : why) std::printf("  %d x %s\n", n, e.c_str());
  // With the map caught up, a second round fails nothing.
  const long long before = load.failures();
  load.stop = false;
  load.start(16);
  const int target = load.answered + 300;
  ASSERT_TRUE(loop_.wait_until([&] { return load.answered >= target; }, milliseconds(10000)));
  load.stop = true;
  ASSERT_TRUE(loop_.wait_until([&] { return load.answered == load.issued; }, milliseconds(5000)));
  EXPECT_EQ(load.failures(), before);
  std::printf("killed master: %d calls, %lld failed\n", load.issued, load.failures());

  nodes_->restart(victim);  // back as a replica, for whatever runs next
}

}  // namespace
}  // namespace dripgate::control
