// The reload path without a daemon: files loaded again, refused with the running configuration
// kept, the restart-only settings, the command-line overrides, the hash and the metrics.
#include "control/registry/reload.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "control/admission/keys.h"

namespace dripgate::control {
namespace {

constexpr char kA[] = R"(control: { listen: "127.0.0.1:8080" }
plans:
  big: { gates: { tenant: { capacity: 100, refill_per_s: 10 } } }
  small: { gates: { tenant: { capacity: 2, refill_per_s: 1 } } }
tenants:
  ws-a: { plan: big }
)";

class ReloadTest : public ::testing::Test {
 protected:
  ReloadTest() {
    char tmpl[] = "/tmp/dripgate-reload-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/control.yaml";
  }
  ~ReloadTest() override { std::filesystem::remove_all(dir_); }

  void write(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }
  // Starts as dripgate-control does: the first load makes the store.
  Reloader& start(const std::string& text, Overrides overrides = {}) {
    write(text);
    Loaded first = load_config(path_, overrides);
    EXPECT_TRUE(first.errors.empty());
    store_.emplace(std::make_shared<const Snapshot>(*first.cfg, first.hash));
    reloader_.emplace(path_, overrides, *store_, metrics_);
    return *reloader_;
  }
  std::string plan_of(const std::string& tenant) {
    return store_->current()->cfg.tenants.at(tenant).plan;
  }

  std::string dir_, path_;
  Metrics metrics_;
  std::optional<ConfigStore> store_;
  std::optional<Reloader> reloader_;
};

TEST(ConfigHash, IsFnv1a64OfTheBytes) {
  EXPECT_EQ(config_hash(""), "fnv1a64:cbf29ce484222325");
  EXPECT_EQ(config_hash("a"), "fnv1a64:af63dc4c8601ec8c");
  EXPECT_NE(config_hash("tenants: {}\n"), config_hash("tenants: {} \n"));
}

TEST_F(ReloadTest, AGoodFileIsPublishedWithItsHash) {
  Reloader& r = start(kA);
  std::shared_ptr<const Snapshot> before = store_->current();
  EXPECT_EQ(before->hash, config_hash(kA));
  uint64_t generation = store_->generation();
  SnapshotView view(*store_);
  EXPECT_EQ(view.get(), before);

  std::string b = std::string(kA) + "  ws-b: { plan: small }\n";
  write(b);
  ReloadOutcome out = r.reload();
  ASSERT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(out.hash, config_hash(b));
  EXPECT_NE(out.hash, before->hash);
  EXPECT_EQ(store_->current()->hash, out.hash);
  EXPECT_EQ(plan_of("ws-b"), "small");
  EXPECT_GT(store_->generation(), generation);
  // A view picks the new snapshot up at its next read; the old one lives as long as a holder.
  EXPECT_EQ(view.get()->hash, out.hash);
  EXPECT_TRUE(before->cfg.tenants.count("ws-b") == 0);
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 1u);
  EXPECT_EQ(metrics_.config_reloads().value({"error"}), 0u);
}

// The ip and total gates are reloaded like every gate: added, changed and removed live, into the
// engine's tables; a bad value is refused and the running ones stay.
TEST_F(ReloadTest, IpAndTotalGatesComeAndGoByReload) {
  Reloader& r = start(kA);
  EXPECT_FALSE(store_->current()->tables.total);
  EXPECT_FALSE(store_->current()->tables.tenants.at("ws-a").ip);
  const std::string with = R"(control: { listen: "127.0.0.1:8080" }
plans:
  big: { gates: { tenant: { capacity: 100, refill_per_s: 10 }, ip: { capacity: 7, refill_per_s: 1 } } }
  small: { gates: { tenant: { capacity: 2, refill_per_s: 1 } } }
tenants:
  ws-a: { plan: big }
global_gates: { total: { capacity: 500, refill_per_s: 50 } }
)";
  write(with);
  ReloadOutcome out = r.reload();
  ASSERT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  const Tables& t = store_->current()->tables;
  ASSERT_TRUE(t.total);
  EXPECT_EQ(t.total->capacity, 500);
  EXPECT_EQ(t.total->key, keys::total_bucket());
  ASSERT_TRUE(t.tenants.at("ws-a").ip);
  EXPECT_EQ(t.tenants.at("ws-a").ip->capacity, 7);

  std::string bad = with;
  bad.replace(bad.find("capacity: 500"), 13, "capacity: 0");
  write(bad);
  out = r.reload();
  ASSERT_FALSE(out.ok);
  ASSERT_EQ(out.errors.size(), 1u);
  EXPECT_NE(out.errors[0].find(":7:36: global_gates.total.capacity: must be >= 1, got 0"),
            std::string::npos)
      << out.errors[0];
  EXPECT_EQ(store_->current()->tables.total->capacity, 500);

  write(kA);
  out = r.reload();
  ASSERT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_FALSE(store_->current()->tables.total);
  EXPECT_FALSE(store_->current()->tables.tenants.at("ws-a").ip);
}

TEST_F(ReloadTest, AFileWithErrorsIsRefusedAndTheRunningOneStays) {
  Reloader& r = start(kA);
  std::shared_ptr<const Snapshot> before = store_->current();
  write(std::string(kA) + "  ws-b: { plan: gold }\n  ws-c: { plan: big, colour: red }\n");
  ReloadOutcome out = r.reload();
  EXPECT_FALSE(out.ok);
  ASSERT_EQ(out.errors.size(), 2u);
  EXPECT_EQ(out.errors[0],
            path_ + ":7:17: tenants.ws-b.plan: no plan named 'gold' (defined: big, small)");
  EXPECT_EQ(out.errors[1].rfind(path_ + ":8:22: tenants.ws-c.colour: unknown key 'colour'", 0), 0u)
      << out.errors[1];
  EXPECT_EQ(out.hash, before->hash);
  EXPECT_EQ(store_->current(), before);
  // A file that cannot be read is refused the same way.
  std::filesystem::remove(path_);
  out = r.reload();
  EXPECT_FALSE(out.ok);
  ASSERT_EQ(out.errors.size(), 1u);
  EXPECT_EQ(out.errors[0].rfind(path_ + ": cannot open: ", 0), 0u) << out.errors[0];
  EXPECT_EQ(store_->current(), before);
  EXPECT_EQ(metrics_.config_reloads().value({"error"}), 2u);
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 0u);
  // Fixed, it loads.
  write(kA);
  EXPECT_TRUE(r.reload().ok);
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 1u);
}

TEST_F(ReloadTest, RestartOnlySettingsAreRefusedByName) {
  Reloader& r = start(kA);
  std::shared_ptr<const Snapshot> before = store_->current();
  std::string changed = kA;
  changed.replace(changed.find("8080"), 4, "8081");
  write("redis: { url: \"redis://10.0.0.9:6379/0\", pool_size: 9 }\n" + changed);
  ReloadOutcome out = r.reload();
  EXPECT_FALSE(out.ok);
  const std::string why =
      ": changes only on a restart; the reload is refused (put the running value back, or "
      "restart)";
  EXPECT_EQ(out.errors, (std::vector<std::string>{path_ + ": redis.url" + why,
                                                  path_ + ": redis.pool_size" + why,
                                                  path_ + ": control.listen" + why}));
  // A cluster in place of one node: named too.
  write(std::string("redis: { cluster: [\"10.0.0.9:7000\"] }\n") + kA);
  out = r.reload();
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.errors, (std::vector<std::string>{path_ + ": redis.cluster" + why}));
  EXPECT_EQ(store_->current(), before);
  // The rate-limit service's listener is restart-only; its domains are read per call.
  std::string grpc = kA;
  grpc.replace(grpc.find("8080\" }"), 7, "8080\", grpc_listen: \"127.0.0.1:9\" }");
  write(grpc);
  out = r.reload();
  EXPECT_EQ(out.errors, (std::vector<std::string>{path_ + ": control.grpc_listen" + why}));
  std::string domains = kA;
  domains.replace(domains.find("8080\" }"), 7,
                  "8080\", rls: { domains: { edge: { x-tenant-id: tenant } } } }");
  write(domains);
  out = r.reload();
  EXPECT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(store_->current()->cfg.control.rls_domains.count("edge"), 1u);
  // So is the cap on its calls in flight.
  std::string cap = kA;
  cap.replace(cap.find("8080\" }"), 7, "8080\", grpc_max_inflight: 16 }");
  write(cap);
  out = r.reload();
  EXPECT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(store_->current()->cfg.control.grpc_max_inflight, 16);
  // OpenAI's headers are read per answer.
  std::string openai = kA;
  openai.replace(openai.find("8080\" }"), 7, "8080\", openai_headers: false }");
  write(openai);
  out = r.reload();
  EXPECT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_FALSE(store_->current()->cfg.control.openai_headers);
  // The tokens are read per request: they may change.
  write(std::string(kA).replace(0, 10, "control: { admin_token: a1, auth_token: t1,"));
  out = r.reload();
  ASSERT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(store_->current()->cfg.control.admin_token, "a1");
  EXPECT_EQ(store_->current()->cfg.control.auth_token, "t1");
  // The outage policy is read per request; the journal is opened once.
  write("redis: { on_failure: open, local_share: 0.5 }\n" + std::string(kA));
  out = r.reload();
  ASSERT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(store_->current()->cfg.redis.on_failure, config::OnFailure::kOpen);
  EXPECT_EQ(store_->current()->cfg.redis.local_share, 0.5);
  write("redis: { on_failure: local, journal: /tmp/dg-reload-test.journal }\n" + std::string(kA));
  out = r.reload();
  EXPECT_EQ(out.errors, (std::vector<std::string>{path_ + ": redis.journal" + why}));
}

TEST_F(ReloadTest, CommandLineOverridesApplyToEveryLoad) {
  Overrides overrides = [](config::Config& cfg) -> std::optional<config::Error> {
    cfg.control.listen = "127.0.0.1:9999";
    return std::nullopt;
  };
  Reloader& r = start(kA, overrides);
  EXPECT_EQ(store_->current()->cfg.control.listen, "127.0.0.1:9999");
  // The file's listen changes, the override still wins: nothing restart-only changed.
  std::string changed = kA;
  changed.replace(changed.find("8080"), 4, "8081");
  write(changed);
  ReloadOutcome out = r.reload();
  EXPECT_TRUE(out.ok) << ::testing::PrintToString(out.errors);
  EXPECT_EQ(store_->current()->cfg.control.listen, "127.0.0.1:9999");
}

// The file in place of the configuration becomes a FIFO or a link to /dev/zero: the reload is
// refused at once, naming the file, and the running configuration stays.
TEST_F(ReloadTest, AFifoOrADeviceInTheFilesPlaceIsRefusedAtOnce) {
  Reloader& r = start(kA);
  std::shared_ptr<const Snapshot> before = store_->current();
  std::filesystem::remove(path_);
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  ReloadThread thread(r);
  thread.request();
  // Waited for with a guard: a reload that blocks fails the test instead of hanging it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (metrics_.config_reloads().value({"error"}) == 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!thread.stop(std::chrono::seconds(0))) {
    ::close(::open(path_.c_str(), O_WRONLY));  // releases a reader blocked on the FIFO
    FAIL() << "the reload blocked on a FIFO";
  }
  EXPECT_EQ(metrics_.config_reloads().value({"error"}), 1u);
  std::filesystem::remove(path_);
  std::filesystem::create_symlink("/dev/zero", path_);
  ReloadOutcome out = r.reload();
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.errors,
            (std::vector<std::string>{path_ + ": is a character device, not a regular file; a "
                                              "configuration is read from a regular file"}));
  EXPECT_EQ(store_->current(), before);
}

// A reload held inside (by an override that waits, standing for a slow file): asking for more
// never waits, the requests made during it make one more reload, and stop() gives up on a
// reload that does not end within its grace.
class HeldReloadTest : public ReloadTest {
 protected:
  Reloader& start_held() {
    return start(kA, [this](config::Config&) -> std::optional<config::Error> {
      std::unique_lock lock(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return !hold_; });
      return std::nullopt;
    });
  }
  void hold(bool on) {
    std::lock_guard lock(mu_);
    hold_ = on;
    cv_.notify_all();
  }
  // Asks `thread` for a reload and holds it: true once it is held inside.
  bool request_held(ReloadThread& thread) {
    hold(true);
    thread.request();
    return entered(2);
  }
  // Whether n loads have begun (the first is the start's), within a guard of 10 s.
  bool entered(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return entered_ >= n; });
  }
  // Whether n reloads were counted, within a guard of 10 s.
  bool counted(uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (metrics_.config_reloads().value({"ok"}) < n) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  int entered_ = 0;
};

TEST_F(HeldReloadTest, RequestsDuringAReloadMakeOneMoreAndNeverWait) {
  Reloader& r = start_held();
  ReloadThread thread(r);
  ASSERT_TRUE(request_held(thread));
  for (int i = 0; i < 3; ++i) thread.request();  // returns while the reload is held
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 0u);
  hold(false);
  ASSERT_TRUE(counted(2));
  EXPECT_TRUE(thread.stop(std::chrono::seconds(10)));
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 2u) << "three requests, one reload";
  EXPECT_EQ(entered_, 3);
}

// What POST /v1/admin/reload relies on: each asker gets the outcome of a reload that began after
// it asked, on the reload thread; those that ask during a reload share the one after it.
TEST_F(HeldReloadTest, AskersGetTheOutcomeOfAReloadThatBeganAfterTheyAsked) {
  Reloader& r = start_held();
  ReloadThread thread(r);
  std::mutex got_mu;
  std::condition_variable got_cv;
  std::vector<std::pair<int, std::thread::id>> got;  // asker, the thread that told it
  auto asker = [&](int n) {
    return [&, n](const ReloadOutcome& out) {
      EXPECT_TRUE(out.ok);
      EXPECT_EQ(out.hash, store_->current()->hash);
      std::lock_guard lock(got_mu);
      got.emplace_back(n, std::this_thread::get_id());
      got_cv.notify_all();
    };
  };
  hold(true);
  thread.request(asker(1));
  ASSERT_TRUE(entered(2));  // held inside asker 1's reload
  thread.request(asker(2));
  thread.request(asker(3));
  {
    std::lock_guard lock(got_mu);
    EXPECT_TRUE(got.empty());
  }
  hold(false);
  std::unique_lock lock(got_mu);
  ASSERT_TRUE(got_cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() == 3; }));
  EXPECT_EQ(got[0].first, 1);
  EXPECT_EQ(got[1].first, 2);
  EXPECT_EQ(got[2].first, 3);
  EXPECT_NE(got[0].second, std::this_thread::get_id());
  EXPECT_EQ(entered_, 3) << "three askers, two reloads";
  lock.unlock();
  EXPECT_TRUE(thread.stop(std::chrono::seconds(10)));
  // Stopped: asking does nothing, and the asker is not told.
  thread.request(asker(4));
  EXPECT_EQ(metrics_.config_reloads().value({"ok"}), 2u);
}

TEST_F(HeldReloadTest, StopGivesUpOnAReloadThatDoesNotEnd) {
  Reloader& r = start_held();
  {
    ReloadThread thread(r);
    ASSERT_TRUE(request_held(thread));
    EXPECT_FALSE(thread.stop(std::chrono::milliseconds(50)));
  }
  // The thread left to it finishes the reload once released, and ends.
  hold(false);
  EXPECT_TRUE(counted(1));
  // One more, here: the reloader's lock is free again before the fixture goes.
  EXPECT_TRUE(r.reload().ok);
}

}  // namespace
}  // namespace dripgate::control
