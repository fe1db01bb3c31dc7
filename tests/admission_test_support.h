// What the engine's Redis tests share (admission_test.cc, quota_test.cc, window_test.cc): the
// Redis of the run (a redis-server of the test's own, or with DRIPGATE_ADMISSION_CLUSTER=1 a
// 3-master cluster), an engine on a real libevent loop, a synchronous connection to set up and
// read the keys, and script calls run by hand.
#pragma once

#include <event2/event.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"
#include "control/admission/keys.h"
#include "control/admission/script_calls.h"
#include "control/redis/redis_client.h"
#include "control/redis/slot.h"
#include "lua/lua_scripts.h"
#include "tests/event_loop.h"
#include "tests/redis_cluster.h"

namespace dripgate::control::admission_testing {

using std::chrono::milliseconds;

struct Observer : RedisObserver {
  std::mutex mu;
  std::map<std::string, int> errors;
  int round_trips = 0;
  std::vector<bool> ups;
  void round_trip(double) override {
    std::lock_guard l(mu);
    ++round_trips;
  }
  void error(const std::string& kind) override {
    std::lock_guard l(mu);
    ++errors[kind];
  }
  void up(bool is_up) override {
    std::lock_guard l(mu);
    ups.push_back(is_up);
  }
  int count(const std::string& kind) {
    std::lock_guard l(mu);
    return errors[kind];
  }
};

inline config::Bucket bucket(double cap, double rate) {
  return config::Bucket{cap, rate};
}

// The cluster of the cluster run (DRIPGATE_ADMISSION_CLUSTER=1), made on first use; else null.
inline testing::RedisCluster* cluster() {
  static std::unique_ptr<testing::RedisCluster> c =
      std::getenv("DRIPGATE_ADMISSION_CLUSTER") ? std::make_unique<testing::RedisCluster>(3, 0)
                                                : nullptr;
  return c.get();
}

// The engine's Redis: the test's own server, or in the cluster run the cluster.
inline config::Config base_config(int port) {
  config::Config c;
  if (cluster()) c.redis.cluster = cluster()->seeds();
  c.redis.host = "127.0.0.1";
  c.redis.port = port;
  c.redis.timeout_ms = 2000;
  c.redis.pool_size = 2;
  return c;
}

inline void add_tenant(config::Config& c, const std::string& tenant, config::Plan plan) {
  plan.name = "plan-" + tenant;
  c.plans[plan.name] = plan;
  c.tenants[tenant] = config::Tenant{tenant, plan.name};
}

// A libevent loop with an engine on it; each call runs the loop until its callback ran.
class Harness {
 public:
  Harness(const config::Config& cfg, RedisObserver* obs = nullptr)
      : store_(cfg), engine_(std::make_unique<Engine>(store_, loop_.base(), obs)) {
    // Let the pool connect, so the first call does not race the connect.
    wait_until([&] { return engine_->redis_up(); }, milliseconds(3000));
  }
  ~Harness() { engine_.reset(); }
  Engine& engine() { return *engine_; }
  ConfigStore& store() { return store_; }

  template <class Pred>
  bool wait_until(Pred pred, milliseconds limit) {
    return loop_.wait_until(pred, limit);
  }
  template <class R>
  R run(std::function<void(std::function<void(R)>)> call) {
    std::optional<R> out;
    call([&](R r) { out = std::move(r); });
    EXPECT_TRUE(wait_until([&] { return out.has_value(); }, milliseconds(10000)));
    return out.value_or(R{});
  }
  AdmitResult admit(AdmitRequest req) {
    return run<AdmitResult>([&](auto done) { engine_->admit(req, done); });
  }
  SettleResult settle(const std::string& tenant, const std::string& rid, int64_t tokens) {
    return settle(SettleRequest{tenant, rid, tokens, {}, {}, {}});
  }
  SettleResult settle(SettleRequest r) {
    return run<SettleResult>([&](auto done) { engine_->settle(r, done); });
  }
  ChargeResult charge(ChargeRequest r) {
    return run<ChargeResult>([&](auto done) { engine_->charge(r, done); });
  }
  ReleaseResult release(const std::string& tenant, const std::string& rid) {
    return run<ReleaseResult>([&](auto done) { engine_->release(tenant, rid, done); });
  }

 private:
  dripgate::testing::EventLoop loop_;
  ConfigStore store_;
  std::unique_ptr<Engine> engine_;
};

inline AdmitRequest req(const std::string& tenant, int64_t tokens = 0) {
  AdmitRequest r;
  r.tenant = tenant;
  r.tokens = tokens;
  return r;
}

inline const Remaining* find_gate(const AdmitResult& r, const std::string& gate) {
  for (const auto& x : r.remaining)
    if (x.gate == gate) return &x;
  return nullptr;
}

inline double rem(const AdmitResult& r, const std::string& gate) {
  const Remaining* x = find_gate(r, gate);
  EXPECT_NE(x, nullptr) << "no remaining entry for " << gate;
  return x ? x->value : -1;
}

// A synchronous connection for setting up and inspecting Redis state in tests.
class Sync {
 public:
  // port: the test's redis-server; in the cluster run, every master of the cluster instead.
  explicit Sync(int port) {
    if (!cluster()) {
      c_.push_back(redisConnect("127.0.0.1", port));
      return;
    }
    for (size_t i : cluster()->masters()) {
      c_.push_back(redisConnect("127.0.0.1", cluster()->node(i).port()));
      node_of_.push_back(i);
    }
  }
  ~Sync() {
    for (auto* c : c_) redisFree(c);
  }
  // A command on the node of its key (argv[1], or an EVAL's first key); one without a key (TIME,
  // FLUSHALL, SCRIPT ...) on every node, answered with the first node's reply.
  redisReply* cmd(std::vector<std::string> argv) {
    if (c_.size() == 1) return run(c_[0], argv);
    static const std::set<std::string> keyless = {"TIME", "FLUSHALL", "SCRIPT", "INFO", "DBSIZE"};
    if (keyless.count(argv[0])) {
      redisReply* first = nullptr;
      for (auto* c : c_) {
        redisReply* r = run(c, argv);
        if (!first)
          first = r;
        else
          freeReplyObject(r);
      }
      return first;
    }
    const std::string& key = argv[0] == "EVAL" ? argv[3] : argv[1];
    const size_t owner = cluster()->owner(hash_slot(key));
    for (size_t i = 0; i < c_.size(); ++i)
      if (node_of_[i] == owner) return run(c_[i], argv);
    return nullptr;
  }
  // Every key matching pattern, on every node.
  std::vector<std::string> keys(const std::string& pattern) {
    std::vector<std::string> out;
    for (auto* c : c_) {
      redisReply* r = run(c, {"KEYS", pattern});
      for (size_t i = 0; r && i < r->elements; ++i)
        out.emplace_back(r->element[i]->str, r->element[i]->len);
      freeReplyObject(r);
    }
    return out;
  }
  // Redis TIME, seconds.
  std::time_t time_s() {
    redisReply* r = cmd({"TIME"});
    std::time_t t = r && r->elements == 2 ? std::stol(r->element[0]->str) : 0;
    freeReplyObject(r);
    return t;
  }
  std::string str(std::vector<std::string> argv) {
    redisReply* r = cmd(std::move(argv));
    std::string out;
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
      out.assign(r->str, r->len);
    if (r && r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
    freeReplyObject(r);
    return out;
  }
  // The tenant's reservations, open or settled, whatever their window (lua/lib_reservation.lua):
  // request_id -> value.
  std::map<std::string, std::string> reservations(const std::string& tenant) {
    std::map<std::string, std::string> out;
    for (const std::string& window : keys(keys::reservations(tenant) + "*")) {
      redisReply* h = cmd({"HGETALL", window});
      for (size_t j = 0; h && j + 1 < h->elements; j += 2) {
        std::string field(h->element[j]->str, h->element[j]->len);
        std::string value(h->element[j + 1]->str, h->element[j + 1]->len);
        // "#" the count, "x:<attempt>" and an engine id's "x" cancellations: no reservations.
        if (field == "#" || field.starts_with("x:") || value == "x") continue;
        out[field] = value;
      }
      freeReplyObject(h);
    }
    return out;
  }
  // Every key with its full value: HGETALL / GET / ZRANGE WITHSCORES, sorted.
  std::map<std::string, std::string> dump() {
    std::map<std::string, std::string> out;
    for (const std::string& k : keys("*")) {
      std::string type = str({"TYPE", k});
      redisReply* v = nullptr;
      if (type == "hash") v = cmd({"HGETALL", k});
      if (type == "string") v = cmd({"GET", k});
      if (type == "zset") v = cmd({"ZRANGE", k, "0", "-1", "WITHSCORES"});
      std::string val = type + ":";
      if (v && v->type == REDIS_REPLY_ARRAY) {
        std::vector<std::pair<std::string, std::string>> pairs;
        for (size_t j = 0; j + 1 < v->elements; j += 2)
          pairs.emplace_back(std::string(v->element[j]->str, v->element[j]->len),
                             std::string(v->element[j + 1]->str, v->element[j + 1]->len));
        if (type == "hash") std::sort(pairs.begin(), pairs.end());
        for (auto& [a, b] : pairs) val += a + "=" + b + ";";
      } else if (v && v->type == REDIS_REPLY_STRING) {
        val += std::string(v->str, v->len);
      }
      freeReplyObject(v);
      out[k] = val;
    }
    return out;
  }

 private:
  static redisReply* run(redisContext* c, const std::vector<std::string>& argv) {
    std::vector<const char*> a;
    std::vector<size_t> l;
    for (auto& s : argv) {
      a.push_back(s.data());
      l.push_back(s.size());
    }
    return static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(a.size()), a.data(), l.data()));
  }

  std::vector<redisContext*> c_;
  std::vector<size_t> node_of_;  // cluster node index of each connection
};

// A script call run by hand (EVAL of its text) on the node of its first key.
inline redisReply* run_call(Sync& s, const Call& c) {
  std::vector<std::string> argv = {"EVAL", std::string(c.script.text),
                                   std::to_string(c.keys.view().size())};
  for (auto k : c.keys.view()) argv.emplace_back(k);
  for (auto a : c.args.view()) argv.emplace_back(a);
  return s.cmd(argv);
}

// A reply's code (its first element, or the integer it is), freed; -1 for anything else.
inline int64_t code_of(redisReply* r) {
  int64_t code = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 ? r->element[0]->integer : -1;
  if (r && r->type == REDIS_REPLY_INTEGER) code = r->integer;
  freeReplyObject(r);
  return code;
}

}  // namespace dripgate::control::admission_testing
