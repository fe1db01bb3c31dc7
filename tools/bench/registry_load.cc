// registry_load: what 100,000 tenants in the tenant registry cost (control/registry/tenant_registry.h).
// Against a scratch Redis (registry_bench.sh starts one; the registry's keys are deleted first
// and last), it writes --tenants tenants through the admin API's own call (registry_write.lua),
// then reads them as a daemon does at start (RegistrySync: HSCAN in pages into the in-memory
// copy), and prints:
//   redis_bytes_per_tenant   INFO used_memory after the writes less before, per tenant (the
//                            change log's 10,000 entries included)
//   load_ms                  the daemon's first full read, Redis to published copy
//   daemon_bytes_per_tenant  this process's RSS after the read less before, per tenant
//   change_ms                one more change, written to seen in the copy (a map copy + apply)
// Not a test: figures only.
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "control/admission/config_snapshot.h"
#include "control/admission/keys.h"
#include "control/registry/tenant_registry.h"
#include "lua/lua_scripts.h"

using namespace dripgate;
using Clock = std::chrono::steady_clock;

namespace {

long rss_bytes() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Runs the loop until done() or `limit`.
template <class Pred>
bool run_until(event_base* base, Pred done, std::chrono::seconds limit) {
  auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return false;
    timeval tv{0, 2000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
  }
  return true;
}

std::optional<long long> used_memory(control::RedisCalls& redis, event_base* base) {
  std::optional<long long> out;
  bool done = false;
  std::array<std::string_view, 2> argv{"INFO", "memory"};
  redis.command(argv, [&](const redisReply* r, std::string_view) {
    done = true;
    if (!r || r->type != REDIS_REPLY_STRING) return;
    std::string s(r->str, r->len);
    auto at = s.find("used_memory:");
    if (at != std::string::npos) out = std::stoll(s.substr(at + 12));
  });
  run_until(
      base, [&] { return done; }, std::chrono::seconds(10));
  return out;
}

bool del_registry(control::RedisCalls& redis, event_base* base) {
  bool done = false, ok = false;
  std::string k1 = control::keys::registry_tenants(), k2 = control::keys::registry_version(),
              k3 = control::keys::registry_log();
  std::array<std::string_view, 4> argv{"DEL", k1, k2, k3};
  redis.command(argv, [&](const redisReply* r, std::string_view) {
    done = true;
    ok = r && r->type == REDIS_REPLY_INTEGER;
  });
  run_until(
      base, [&] { return done; }, std::chrono::seconds(10));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"registry_load: Redis and daemon memory per registry tenant, time to load"};
  std::string url = "redis://127.0.0.1:6379/0", plan = "free";
  int tenants = 100000, window = 2000;
  app.add_option("--redis", url, "a scratch Redis: the registry's keys are deleted")->required();
  app.add_option("--tenants", tenants, "how many")->check(CLI::Range(1, 10000000));
  app.add_option("--plan", plan, "the plan every tenant is put on");
  app.add_option("--window", window, "writes in flight")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  config::Redis rcfg;
  if (auto why = rcfg.set_url(url)) {
    std::fprintf(stderr, "--redis: %s\n", why->c_str());
    return 2;
  }
  rcfg.timeout_ms = 5000;
  rcfg.pool_size = 4;
  event_base* base = event_base_new();
  auto redis = control::make_redis_calls(
      base, rcfg, std::vector<const lua::Script*>(std::begin(lua::kAll), std::end(lua::kAll)));
  if (!run_until(
          base, [&] { return redis->up(); }, std::chrono::seconds(5))) {
    std::fprintf(stderr, "cannot reach %s\n", url.c_str());
    return 1;
  }
  if (!del_registry(*redis, base)) return 1;
  auto before = used_memory(*redis, base);

  // The writes, `window` in flight, through the admin API's own call.
  int sent = 0, answered = 0, failed = 0;
  auto t0 = Clock::now();
  char id[32];
  while (answered < tenants) {
    while (sent < tenants && sent - answered < window) {
      std::snprintf(id, sizeof id, "tenant-%07d", sent++);
      control::registry::write(*redis, id, plan, [&](std::string, std::string error) {
        ++answered;
        if (!error.empty()) ++failed;
      });
    }
    timeval tv{0, 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
  }
  auto write_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto after = used_memory(*redis, base);
  if (failed || !before || !after) {
    std::fprintf(stderr, "%d writes failed\n", failed);
    return 1;
  }

  // The daemon's side: its first full read, in this process.
  long rss0 = rss_bytes();
  control::ConfigStore store{config::Config{}};
  control::RegistrySync sync(store, rcfg);
  std::string err;
  auto t1 = Clock::now();
  if (!sync.start(std::chrono::seconds(120), err)) {
    std::fprintf(stderr, "registry not read: %s\n", err.c_str());
    return 1;
  }
  auto load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  long rss1 = rss_bytes();
  size_t n = store.registry()->size();

  // One more change, until the copy has it: what every later change costs a daemon.
  uint64_t v = store.registry()->version();
  bool wrote = false;
  auto t2 = Clock::now();
  control::registry::write(*redis, "tenant-extra", plan,
                           [&](std::string, std::string) { wrote = true; });
  run_until(
      base, [&] { return wrote; }, std::chrono::seconds(10));
  while (store.registry()->version() == v && Clock::now() - t2 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  auto change_ms = std::chrono::duration<double, std::milli>(Clock::now() - t2).count();
  sync.stop();

  del_registry(*redis, base);
  redis.reset();
  event_base_free(base);

  std::printf("tenants                  %zu\n", n);
  std::printf("write_s                  %.2f (%d in flight, registry_write.lua each)\n",
              write_ms / 1000, window);
  std::printf("redis_bytes_per_tenant   %.1f (used_memory %lld -> %lld)\n",
              static_cast<double>(*after - *before) / tenants, *before, *after);
  std::printf(
      "load_ms                  %.1f (first full read, HSCAN COUNT %d; sync reports %.1f)\n",
      load_ms, control::registry::kScanCount,
      static_cast<double>(sync.last_full_read().count()) / 1000);
  std::printf("daemon_bytes_per_tenant  %.1f (RSS %ld -> %ld)\n",
              static_cast<double>(rss1 - rss0) / static_cast<double>(n), rss0, rss1);
  std::printf(
      "change_ms                %.1f (one change, written to in the copy; polls every %d ms)\n",
      change_ms, control::registry::kPollMs);
  return n == static_cast<size_t>(tenants) ? 0 : 1;
}
