// The distributed claim, end to end: 4 dripgate-control daemons share a 3-master Redis Cluster;
// 64 concurrent clients spread over them hammer two tenants that share one global model gate.
// Each limit holds for the fleet as a whole, 1.0x and not 4x: admitted <= capacity + refill * t,
// plus at most one request per daemon (a request admitted while another part's undo was in
// flight). Every request is answered 200 or 429 (none fails), and the limits are actually
// reached (so the bounds are not met by refusing everything).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_cluster.h"

namespace {

using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::RedisCluster;
using namespace std::chrono_literals;

constexpr int kDaemons = 4;
constexpr int kClients = 64;
constexpr double kTenantCapacity = 20, kTenantRefill = 5;  // per tenant
constexpr double kModelCapacity = 30, kModelRefill = 8;    // shared by both tenants

std::string config(const std::vector<std::string>& seeds, const std::string& model) {
  std::string list;
  for (const auto& s : seeds) list += (list.empty() ? "\"" : ", \"") + s + "\"";
  auto bucket = [](double c, double r) {
    return "{ capacity: " + std::to_string(c) + ", refill_per_s: " + std::to_string(r) + " }";
  };
  return "redis: { cluster: [" + list + "], timeout_ms: 2000 }\n" +
         "control: { listen: \"127.0.0.1:8080\", threads: 1 }\n" +
         "plans:\n  p:\n    class: gold\n    gates:\n      tenant: " +
         bucket(kTenantCapacity, kTenantRefill) +
         "\ntenants:\n  a: { plan: p }\n  b: { plan: p }\n  c: { plan: p }\n" +
         "global_gates:\n  model:\n    " + model + ": " + bucket(kModelCapacity, kModelRefill) +
         "\n";
}

TEST(ClusterClaim, FourDaemonsEnforceOneLimitNotFour) {
  RedisCluster cluster(3, 0);
  // A model whose bucket lives on another master than both tenants': the claim spans the cluster.
  auto owner = [&](const std::string& tag) { return cluster.owner(cluster.keyslot(tag)); };
  std::string model;
  for (int i = 0; i < 100 && model.empty(); ++i) {
    std::string m = "m" + std::to_string(i);
    if (owner("{g:model:" + m + "}") != owner("{t:a}") &&
        owner("{g:model:" + m + "}") != owner("{t:b}"))
      model = m;
  }
  ASSERT_FALSE(model.empty());
  std::vector<std::unique_ptr<ControlDaemon>> daemons;
  for (int i = 0; i < kDaemons; ++i) {
    daemons.push_back(
        std::make_unique<ControlDaemon>(DRIPGATE_CONTROL_BIN, config(cluster.seeds(), model)));
    ASSERT_TRUE(daemons.back()->ready()) << daemons.back()->log();
  }

  std::atomic<bool> stop{false};
  std::atomic<int> admitted_a{0}, admitted_b{0}, admitted_c{0}, refused{0};
  std::mutex mu;
  std::map<int, int> other;  // status -> count, for anything but 200/429
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const int port = daemons[static_cast<size_t>(c % kDaemons)]->port();
      // Tenants a and b share the model gate; c names no model, so its own bucket binds.
      const int tenant = c % 3;
      const std::string body = tenant == 2
                                   ? std::string(R"({"tenant":"c"})")
                                   : std::string(R"({"tenant":")") + (tenant == 0 ? "a" : "b") +
                                         R"(","model":")" + model + "\"}";
      std::atomic<int>& admitted = tenant == 0 ? admitted_a : tenant == 1 ? admitted_b : admitted_c;
      while (!stop.load()) {
        auto r = http(port, "POST", "/v1/admit", body);
        if (r.status == 200) {
          admitted++;
        } else if (r.status == 429) {
          refused++;
        } else {
          std::lock_guard lock(mu);
          other[r.status]++;
        }
      }
    });
  }
  std::this_thread::sleep_for(4s);
  stop = true;
  for (auto& t : clients) t.join();
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double tenant_bound = kTenantCapacity + kTenantRefill * t + kDaemons;
  const double model_bound = kModelCapacity + kModelRefill * t + kDaemons;
  const int total = admitted_a + admitted_b;
  std::printf(
      "claim: %.2f s, admitted a %d b %d c %d (tenant bound %.1f each), a+b %d (model bound "
      "%.1f), refused %d\n",
      t, admitted_a.load(), admitted_b.load(), admitted_c.load(), tenant_bound, total, model_bound,
      refused.load());
  EXPECT_TRUE(other.empty()) << "answers other than 200/429: " << other.size() << " statuses, e.g. "
                             << other.begin()->first;
  EXPECT_LE(admitted_a, tenant_bound);
  EXPECT_LE(admitted_b, tenant_bound);
  EXPECT_LE(admitted_c, tenant_bound);
  EXPECT_LE(total, model_bound);
  // The limit is reached: the model bucket's capacity plus most of its refill went through.
  EXPECT_GE(total, kModelCapacity + 0.5 * kModelRefill * t);
  EXPECT_GE(admitted_c, kTenantCapacity + 0.5 * kTenantRefill * t);
  EXPECT_GT(refused, total);
}

}  // namespace
