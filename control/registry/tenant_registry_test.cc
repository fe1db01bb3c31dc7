// The tenant registry against real Redis (one node and a cluster): the admin calls, the
// daemon's copy kept current by RegistrySync, and the engine deciding on a registry tenant's
// plan.
#include "control/registry/tenant_registry.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"
#include "control/admission/keys.h"
#include "control/admission/script_calls.h"
#include "control/admission/tenant_keys.h"
#include "lua/lua_scripts.h"
#include "tests/event_loop.h"
#include "tests/redis_cluster.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

config::Plan plan(const std::string& name, const std::string& cls, double capacity) {
  config::Plan p;
  p.name = name;
  p.cls = cls;
  p.tenant = config::Bucket{capacity, 0.001};
  return p;
}

// Plans "free" (capacity 1) and "pro" (capacity 5); "acme" is on "free" in the file; "*" is on
// "free" when `with_default`.
config::Config make_config(int port, bool with_default = true) {
  config::Config c;
  c.redis.host = "127.0.0.1";
  c.redis.port = port;
  c.redis.timeout_ms = 2000;
  c.redis.pool_size = 1;
  c.plans["free"] = plan("free", "bronze", 1);
  c.plans["pro"] = plan("pro", "gold", 5);
  c.tenants["acme"] = config::Tenant{"acme", "free"};
  if (with_default) c.tenants["*"] = config::Tenant{"*", "free"};
  return c;
}

std::shared_ptr<const TenantDirectory> directory(
    std::initializer_list<std::pair<const std::string, TenantDirectory::Registered>> entries) {
  return std::make_shared<const TenantDirectory>(7, TenantDirectory::Plans(entries));
}

// A page's ids, concatenated.
std::string ids(const std::vector<TenantDirectory::Entry>& page) {
  std::string out;
  for (const auto& [id, plan] : page) out += std::string(id);
  return out;
}

std::string listed(const TenantDirectory& d) {
  std::string out;
  for (const auto& [id, plan] : d.page("", 1u << 20))
    out += (out.empty() ? "" : " ") + std::string(id) + "=" + std::string(plan);
  return out;
}

TEST(TenantDirectory, PagesInIdOrderFromTheCursor) {
  auto d = directory({{"c", "free"}, {"a", "pro"}, {"e", "free"}, {"b", "free"}});
  EXPECT_EQ(d->version(), 7u);
  EXPECT_EQ(ids(d->page("", 2)), "ab");
  EXPECT_EQ(ids(d->page("b", 2)), "ce");
  // A cursor that is no longer there (taken out meanwhile) still continues after it.
  EXPECT_EQ(ids(d->page("bb", 10)), "ce");
  EXPECT_EQ(ids(d->page("e", 10)), "");
  ASSERT_NE(d->plan_of("a"), nullptr);
  EXPECT_EQ(*d->plan_of("a"), "pro");
  EXPECT_EQ(d->plan_of("z"), nullptr);
}

// A change applied on top of a copy is what the whole copy with the change would be: lookups,
// size and pages, also once the recent changes are folded into a new base.
TEST(TenantDirectory, ChangesOnTopOfACopyReadAsAWholeCopy) {
  auto d = directory({{"b", "free"}, {"d", "pro"}, {"f", "free"}});
  using Changes = TenantDirectory::Changes;
  TenantDirectory next(*d, 9, Changes{{"a", "pro"}, {"d", ""}, {"f", "pro"}, {"a", "free"}});
  EXPECT_EQ(next.version(), 9u);
  EXPECT_EQ(next.size(), 3u);
  EXPECT_EQ(listed(next), "a=free b=free f=pro");
  EXPECT_EQ(next.plan_of("d"), nullptr);
  ASSERT_NE(next.plan_of("f"), nullptr);
  EXPECT_EQ(*next.plan_of("f"), "pro");
  EXPECT_EQ(ids(next.page("a", 1)), "b");
  EXPECT_EQ(ids(next.page("b", 5)), "f");
  EXPECT_EQ(ids(next.page("c", 5)), "f");
  // Taking out a tenant that is not there, and putting back one taken out.
  TenantDirectory again(next, 10, Changes{{"zz", ""}, {"d", "free"}});
  EXPECT_EQ(again.size(), 4u);
  EXPECT_EQ(listed(again), "a=free b=free d=free f=pro");
  EXPECT_EQ(listed(next), "a=free b=free f=pro");  // the older copy is unchanged

  // Enough changes to fold them into a new base: the same answers.
  Changes many;
  for (size_t i = 0; i < TenantDirectory::kMaxRecent; ++i)
    many.emplace_back("m" + std::to_string(1000 + i), "pro");
  many.emplace_back("b", "");
  TenantDirectory folded(again, 11, many);
  EXPECT_EQ(folded.size(), 3 + TenantDirectory::kMaxRecent);
  EXPECT_EQ(folded.plan_of("b"), nullptr);
  EXPECT_EQ(ids(folded.page("", 3)), "adf");
  EXPECT_EQ(ids(folded.page("f", 2)), "m1000m1001");
}

TEST(TenantTables, TheRegistryWinsOverTheFileAndTheFileOverTheDefault) {
  config::Config cfg = make_config(1);
  cfg.tenants["solo"] = config::Tenant{"solo", "pro"};
  Snapshot snap(cfg, "");
  auto reg = directory({{"acme", "pro"}, {"newco", "pro"}, {"gone", "platinum"}});
  std::shared_ptr<const TenantInfo> owner;
  std::string why;
  // Named by both: the registry's plan, with the tenant's own keys.
  const TenantInfo* t = snap.tables.find("acme", owner, reg.get(), &why);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->plan->name, "pro");
  EXPECT_EQ(t->tenant_key, keys::bucket("acme", "tenant"));
  // Without the registry the file's entry stands.
  t = snap.tables.find("acme", owner, nullptr, &why);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->plan->name, "free");
  t = snap.tables.find("newco", owner, reg.get(), &why);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->plan->name, "pro");
  EXPECT_EQ(t->name, "newco");
  EXPECT_EQ(t->tenant_key, keys::bucket("newco", "tenant"));
  t = snap.tables.find("solo", owner, reg.get(), &why);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->plan->name, "pro");
  t = snap.tables.find("stranger", owner, reg.get(), &why);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->plan->name, "free");
  // A registry plan the configuration lacks: refused, saying why (never another plan).
  EXPECT_EQ(snap.tables.find("gone", owner, reg.get(), &why), nullptr);
  EXPECT_EQ(why.rfind("tenant: 'gone' is on plan 'platinum' in the tenant registry", 0), 0u) << why;
  EXPECT_EQ(snap.tenant_label("newco", reg.get()), "@registry");
  EXPECT_EQ(snap.tenant_label("acme", reg.get()), "acme");
  EXPECT_EQ(snap.tenant_label("stranger", reg.get()), "*");
}

// A loop with a Redis client on it, for the admin calls.
class Admin {
 public:
  explicit Admin(const config::Redis& r)
      : redis_(make_redis_calls(
            loop_.base(), r,
            std::vector<const lua::Script*>(std::begin(lua::kAll), std::end(lua::kAll)))) {
    loop_.wait_until([&] { return redis_->up(); }, 5000ms);
  }
  ~Admin() { redis_.reset(); }
  // The previous plan ("" when none).
  std::string write(const std::string& tenant, const std::string& plan) {
    std::optional<std::string> out;
    registry::write(*redis_, tenant, plan, [&](std::string previous, std::string error) {
      EXPECT_EQ(error, "");
      out = std::move(previous);
    });
    EXPECT_TRUE(loop_.wait_until([&] { return out.has_value(); }, 5000ms));
    return out.value_or("?");
  }
  // n writes "<prefix><i>" at once (one after the other would wait a loop slice each).
  void write_all(const std::string& prefix, int n, const std::string& plan) {
    int answered = 0;
    for (int i = 0; i < n; ++i)
      registry::write(*redis_, prefix + std::to_string(i), plan, [&](std::string, std::string e) {
        EXPECT_EQ(e, "");
        ++answered;
      });
    EXPECT_TRUE(loop_.wait_until([&] { return answered == n; }, 10000ms));
  }
  std::optional<std::string> read(const std::string& tenant) {
    bool done = false;
    std::optional<std::string> out;
    registry::read(*redis_, tenant, [&](std::optional<std::string> plan, std::string error) {
      EXPECT_EQ(error, "");
      out = std::move(plan);
      done = true;
    });
    EXPECT_TRUE(loop_.wait_until([&] { return done; }, 5000ms));
    return out;
  }
  // registry_changes.lua's reply as text, one element per entry.
  std::vector<std::string> changes(int64_t since) {
    namespace s = lua::registry_changes;
    std::string tenants = keys::registry_tenants(), version = keys::registry_version(),
                log = keys::registry_log(), since_s = std::to_string(since),
                max = std::to_string(registry::kMaxChanges);
    std::array<std::string_view, s::kKeysFixed> kv{};
    kv[s::kKeyTenants] = tenants;
    kv[s::kKeyVersion] = version;
    kv[s::kKeyLog] = log;
    std::array<std::string_view, s::kArgsFixed> av{};
    av[s::kArgSince] = since_s;
    av[s::kArgMax] = max;
    std::optional<std::vector<std::string>> out;
    redis_->evalsha(lua::kRegistryChanges, kv, av, [&](const redisReply* r, std::string_view e) {
      std::vector<std::string> v;
      if (!r || r->type != REDIS_REPLY_ARRAY) v.push_back("error: " + std::string(e));
      for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
        const redisReply* x = r->element[i];
        v.push_back(x->type == REDIS_REPLY_INTEGER ? std::to_string(x->integer)
                                                   : std::string(x->str, x->len));
      }
      out = std::move(v);
    });
    EXPECT_TRUE(loop_.wait_until([&] { return out.has_value(); }, 5000ms));
    return out.value_or(std::vector<std::string>{});
  }
  // registry::keys: its status, and the tenant's keys after the change as
  // "<first 4 hex>:<expires_at>" each.
  std::pair<int, std::string> keys(const std::string& tenant, registry::KeyOp op,
                                   const std::string& key, int64_t expires_at, int64_t now) {
    std::optional<std::pair<int, std::string>> out;
    registry::KeyChange change{tenant, op, sha256(key), expires_at, now};
    registry::keys(*redis_, change, [&](registry::KeyResult r, std::string error) {
      EXPECT_EQ(error, "");
      std::string listed;
      for (const TenantKey& k : r.keys)
        listed += (listed.empty() ? "" : " ") + digest_hex(k.sha256).substr(0, 4) + ":" +
                  std::to_string(k.expires_at);
      out.emplace(r.status, listed);
    });
    EXPECT_TRUE(loop_.wait_until([&] { return out.has_value(); }, 5000ms));
    return out.value_or(std::pair{-9, ""});
  }
  testing::EventLoop& loop() { return loop_; }
  RedisCalls& redis() { return *redis_; }

 private:
  testing::EventLoop loop_;
  std::unique_ptr<RedisCalls> redis_;
};

// Until the store's registry copy satisfies pred (polled, not slept on); false after `limit`.
template <class Pred>
bool eventually(const ConfigStore& store, Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    auto d = store.registry();
    if (d && pred(*d)) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

std::string plan_in(const TenantDirectory& d, const std::string& tenant) {
  const std::string* p = d.plan_of(tenant);
  return p ? *p : "";
}

TEST(TenantRegistry, WritesAreVersionedAndLogged) {
  testing::RedisServer server;
  config::Config cfg = make_config(server.port());
  Admin admin(cfg.redis);
  EXPECT_EQ(admin.write("newco", "pro"), "");
  EXPECT_EQ(admin.write("newco", "pro"), "pro");  // the same again: no change
  EXPECT_EQ(server.cli("GET " + keys::registry_version()), "1");
  EXPECT_EQ(admin.write("newco", "free"), "pro");
  EXPECT_EQ(admin.read("newco"), "free");
  EXPECT_EQ(admin.write("newco", ""), "free");
  EXPECT_EQ(admin.read("newco"), std::nullopt);
  EXPECT_EQ(admin.write("newco", ""), "");  // not there: no change
  EXPECT_EQ(server.cli("GET " + keys::registry_version()), "3");
  EXPECT_EQ(server.cli("LRANGE " + keys::registry_log() + " 0 -1"), "newco\nnewco\nnewco");
}

std::string h4(const std::string& key) {
  return digest_hex(sha256(key)).substr(0, 4);
}

// A registry tenant's keys, added, rotated and revoked on a real Redis, and checked against the
// daemon's copy on an injected clock: during a rotation's overlap both keys act as the tenant,
// after it the old one is refused as expired; another tenant's key is foreign, a key nobody
// holds unknown; the shared token stays the trusted proxy's. The keys survive a new plan.
TEST(TenantRegistry, KeysAreAddedRotatedWithAnOverlapAndRevoked) {
  using registry::KeyOp;
  testing::RedisServer server;
  config::Config cfg = make_config(server.port());
  cfg.control.tenant_keys = true;
  cfg.control.auth_token = "proxy-token";
  cfg.tenants["acme"].keys_sha256 = {digest_hex(sha256("acme-file-key"))};
  Admin admin(cfg.redis);
  const int64_t t0 = 1'800'000'000;
  EXPECT_EQ(admin.keys("newco", KeyOp::kAdd, "k1", 0, t0).first, 0);  // not in the registry
  admin.write("newco", "pro");
  admin.write("other", "free");
  EXPECT_EQ(admin.keys("newco", KeyOp::kAdd, "k1", 0, t0), std::pair(1, h4("k1") + ":0"));
  EXPECT_EQ(admin.keys("other", KeyOp::kAdd, "o1", 0, t0).first, 1);
  // Rotate to k2 with 60 s of overlap: k1 ends at t0 + 60.
  EXPECT_EQ(admin.keys("newco", KeyOp::kRotate, "k2", t0 + 60, t0),
            std::pair(1, h4("k1") + ":" + std::to_string(t0 + 60) + " " + h4("k2") + ":0"));
  // A new plan keeps the keys; the daemon's copy reads plan and keys.
  admin.write("newco", "free");
  EXPECT_EQ(admin.read("newco"), "free");
  ConfigStore store(cfg);
  RegistrySync sync(store, cfg.redis, 20ms);
  std::string err;
  ASSERT_TRUE(sync.start(5s, err)) << err;
  auto check = [&](const std::string& tenant, const char* key, int64_t now) {
    auto d = store.registry();
    return check_tenant_key(*store.current(), d.get(), tenant,
                            key ? std::optional<std::string_view>(key) : std::nullopt, now);
  };
  EXPECT_EQ(plan_in(*store.registry(), "newco"), "free");
  EXPECT_EQ(check("newco", "k1", t0 + 59), KeyCheck::kOk);  // the overlap
  EXPECT_EQ(check("newco", "k2", t0 + 59), KeyCheck::kOk);
  EXPECT_EQ(check("newco", "k1", t0 + 60), KeyCheck::kExpired);
  EXPECT_EQ(check("newco", "k2", t0 + 10'000), KeyCheck::kOk);
  EXPECT_EQ(check("newco", "o1", t0), KeyCheck::kForeign);
  EXPECT_EQ(check("other", "k2", t0), KeyCheck::kForeign);
  EXPECT_EQ(check("newco", "acme-file-key", t0), KeyCheck::kForeign);
  EXPECT_EQ(check("acme", "acme-file-key", t0), KeyCheck::kOk);
  EXPECT_EQ(check("acme", "k2", t0), KeyCheck::kForeign);
  EXPECT_EQ(check("newco", "nobody's", t0), KeyCheck::kUnknown);
  EXPECT_EQ(check("newco", nullptr, t0), KeyCheck::kMissing);
  EXPECT_EQ(check("newco", "proxy-token", t0), KeyCheck::kProxy);
  EXPECT_EQ(check("stranger", "proxy-token", t0), KeyCheck::kProxy);
  // The next change after the overlap drops the expired key; revoking k2 refuses it at once.
  EXPECT_EQ(admin.keys("newco", KeyOp::kAdd, "k3", t0 + 7200, t0 + 61),
            std::pair(1, h4("k2") + ":0 " + h4("k3") + ":" + std::to_string(t0 + 7200)));
  EXPECT_EQ(admin.keys("newco", KeyOp::kRevoke, "k1", 0, t0 + 61).first, -1);
  EXPECT_EQ(admin.keys("newco", KeyOp::kRevoke, "k2", 0, t0 + 61),
            std::pair(1, h4("k3") + ":" + std::to_string(t0 + 7200)));
  ASSERT_TRUE(eventually(store, [](const TenantDirectory& d) {
    const auto* k = d.keys_of("newco");
    return k && k->size() == 1;
  }));
  EXPECT_EQ(check("newco", "k2", t0 + 62), KeyCheck::kUnknown);
  EXPECT_EQ(check("newco", "k3", t0 + 62), KeyCheck::kOk);
  EXPECT_EQ(check("newco", "k3", t0 + 7200), KeyCheck::kExpired);
  // A tenant holds at most kMaxKeys.
  for (int i = 0; i < registry::kMaxKeys - 1; ++i)
    ASSERT_EQ(admin.keys("other", KeyOp::kAdd, "m" + std::to_string(i), 0, t0).first, 1);
  EXPECT_EQ(admin.keys("other", KeyOp::kAdd, "one-too-many", 0, t0).first, -2);
  // Taken out of the registry, a tenant's keys go with it.
  admin.write("newco", "");
  admin.write("newco", "pro");
  ASSERT_TRUE(eventually(store, [](const TenantDirectory& d) {
    const auto* k = d.keys_of("newco");
    return k && k->empty() && d.plan_of("newco") && *d.plan_of("newco") == "pro";
  }));
  EXPECT_EQ(check("newco", "k3", t0 + 62), KeyCheck::kUnknown);
}

// What a daemon at version `since` is told: nothing, the changed tenants (each once, with its
// plan now), or to read the registry whole.
TEST(TenantRegistry, TheChangesScriptSaysWhatADaemonMissed) {
  testing::RedisServer server;
  config::Config cfg = make_config(server.port());
  Admin admin(cfg.redis);
  using V = std::vector<std::string>;
  EXPECT_EQ(admin.changes(-1), (V{"0", "full"}));
  EXPECT_EQ(admin.changes(0), (V{"0"}));
  admin.write("a", "pro");
  admin.write("b", "free");
  admin.write("a", "free");
  admin.write("b", "");
  EXPECT_EQ(admin.changes(4), (V{"4"}));
  EXPECT_EQ(admin.changes(3), (V{"4", "changes", "b", ""}));
  EXPECT_EQ(admin.changes(1), (V{"4", "changes", "b", "", "a", "free"}));
  EXPECT_EQ(admin.changes(0), (V{"4", "changes", "a", "free", "b", ""}));
  // A copy newer than Redis: Redis lost its data; read it all.
  EXPECT_EQ(admin.changes(9), (V{"4", "full"}));
  // More changes than worth sending one by one.
  admin.write_all("c", registry::kMaxChanges, "pro");
  const std::string v = std::to_string(4 + registry::kMaxChanges);
  EXPECT_EQ(admin.changes(3), (V{v, "full"}));
  EXPECT_EQ(admin.changes(4).size(), 2u + 2 * registry::kMaxChanges);
  // Beyond the log's length: its oldest entries are gone.
  EXPECT_EQ(server.cli("LLEN " + keys::registry_log()),
            std::to_string(std::min(4 + registry::kMaxChanges, registry::kLogLen)));
}

TEST(TenantRegistry, TheCopyFollowsChangesAndResyncsWhenRedisLosesThem) {
  testing::RedisServer server;
  config::Config cfg = make_config(server.port());
  Admin admin(cfg.redis);
  admin.write("before", "pro");
  ConfigStore store(cfg);
  RegistrySync sync(store, cfg.redis, 20ms);
  std::string err;
  ASSERT_TRUE(sync.start(5s, err)) << err;
  ASSERT_TRUE(store.registry());
  EXPECT_EQ(plan_in(*store.registry(), "before"), "pro");
  EXPECT_EQ(store.registry()->version(), 1u);

  // One by one, from the log.
  admin.write("newco", "pro");
  admin.write("before", "");
  ASSERT_TRUE(eventually(store, [](const TenantDirectory& d) { return d.version() == 3; }));
  EXPECT_EQ(plan_in(*store.registry(), "newco"), "pro");
  EXPECT_EQ(plan_in(*store.registry(), "before"), "");
  EXPECT_EQ(store.registry()->size(), 1u);

  // A burst of changes (applied one by one or read whole, as the polls fall): the same result.
  admin.write_all("bulk-", registry::kMaxChanges + 10, "pro");
  admin.write("bulk-8", "free");
  const uint64_t v = 3 + registry::kMaxChanges + 10 + 1;
  ASSERT_TRUE(eventually(store, [&](const TenantDirectory& d) { return d.version() == v; }));
  EXPECT_EQ(store.registry()->size(), 1u + registry::kMaxChanges + 10);
  EXPECT_EQ(plan_in(*store.registry(), "bulk-7"), "pro");
  EXPECT_EQ(plan_in(*store.registry(), "bulk-8"), "free");

  // Redis restarted empty: the version went back, the copy is read again (and is empty).
  server.stop();
  server.start();
  ASSERT_TRUE(eventually(
      store, [](const TenantDirectory& d) { return d.size() == 0; }, 10s));
  EXPECT_EQ(store.registry()->version(), 0u);
  sync.stop();
}

TEST(TenantRegistry, WithoutRedisTheStartDoesNotWaitForeverAndTheCopyComesLater) {
  testing::RedisServer server;
  config::Config cfg = make_config(server.port());
  server.stop();
  ConfigStore store(cfg);
  RegistrySync sync(store, cfg.redis, 20ms);
  std::string err;
  EXPECT_FALSE(sync.start(300ms, err));
  EXPECT_EQ(err, "");
  EXPECT_TRUE(store.registry_expected());
  EXPECT_FALSE(store.registry());
  server.start();
  {
    Admin admin(cfg.redis);
    admin.write("late", "pro");
  }
  EXPECT_TRUE(eventually(
      store, [](const TenantDirectory& d) { return d.size() == 1; }, 10s));
  EXPECT_TRUE(sync.loaded());
}

// The engine decides a registry tenant on its plan's limits, and refuses one whose plan a
// reload removed, naming the tenant and the plan.
TEST(TenantRegistry, AdmissionUsesTheRegistryPlan) {
  testing::RedisServer server;
  config::Config cfg = make_config(server.port(), /*with_default=*/false);
  Admin admin(cfg.redis);
  ConfigStore store(cfg);
  RegistrySync sync(store, cfg.redis, 20ms);
  std::string err;
  ASSERT_TRUE(sync.start(5s, err)) << err;
  Engine engine(store, admin.loop().base());
  admin.loop().wait_until([&] { return engine.redis_up(); }, 5000ms);
  auto admit = [&](const std::string& tenant) {
    std::optional<AdmitResult> out;
    AdmitRequest r;
    r.tenant = tenant;
    engine.admit(r, [&](AdmitResult res) { out = std::move(res); });
    EXPECT_TRUE(admin.loop().wait_until([&] { return out.has_value(); }, 5000ms));
    return out.value_or(AdmitResult{});
  };
  EXPECT_EQ(admit("newco").outcome, Outcome::kBadRequest);  // unknown: no default plan
  admin.write("newco", "pro");
  ASSERT_TRUE(eventually(store, [](const TenantDirectory& d) { return d.plan_of("newco"); }));
  // "pro": capacity 5, class gold; a sixth one is refused by the tenant gate.
  for (int i = 0; i < 5; ++i) {
    AdmitResult r = admit("newco");
    ASSERT_EQ(r.outcome, Outcome::kAllowed) << i << " " << r.error;
    EXPECT_EQ(r.cls, "gold");
  }
  AdmitResult sixth = admit("newco");
  EXPECT_EQ(sixth.outcome, Outcome::kRefused);
  EXPECT_EQ(sixth.gate, "tenant");
  // The file's tenant moved to "pro" by the registry: 5 admitted where the file said 1.
  admin.write("acme", "pro");
  ASSERT_TRUE(eventually(store, [](const TenantDirectory& d) { return d.plan_of("acme"); }));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(admit("acme").outcome, Outcome::kAllowed) << i;
  EXPECT_EQ(admit("acme").outcome, Outcome::kRefused);

  // A reload without "pro": its registry tenants are refused with the reason, not moved.
  config::Config next = cfg;
  next.plans.erase("pro");
  store.publish(std::make_shared<const Snapshot>(next, ""));
  AdmitResult r = admit("newco");
  EXPECT_EQ(r.outcome, Outcome::kBadRequest);
  EXPECT_EQ(r.error.rfind("tenant: 'newco' is on plan 'pro' in the tenant registry", 0), 0u)
      << r.error;
  sync.stop();
}

TEST(TenantRegistry, WorksOnACluster) {
  testing::RedisCluster nodes(3, 0);
  config::Config cfg = make_config(0);
  cfg.redis.cluster = nodes.seeds();
  Admin admin(cfg.redis);
  // The registry's keys share one slot: each script runs on one node.
  const int slot = nodes.keyslot(keys::registry_tenants());
  EXPECT_EQ(nodes.keyslot(keys::registry_version()), slot);
  EXPECT_EQ(nodes.keyslot(keys::registry_log()), slot);
  for (int i = 0; i < 50; ++i) admin.write("t" + std::to_string(i), "pro");
  ConfigStore store(cfg);
  RegistrySync sync(store, cfg.redis, 20ms);
  std::string err;
  ASSERT_TRUE(sync.start(5s, err)) << err;
  EXPECT_EQ(store.registry()->size(), 50u);
  admin.write("t3", "free");
  ASSERT_TRUE(
      eventually(store, [](const TenantDirectory& d) { return plan_in(d, "t3") == "free"; }));
  EXPECT_EQ(admin.read("t3"), "free");
  sync.stop();
}

}  // namespace
}  // namespace dripgate::control
