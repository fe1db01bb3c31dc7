// A reload as the dataplane makes it: the Reloader (main lcore) judges the new configuration
// and posts it to a worker thread that owns a real Scheduler and the RX side's classifier, as
// the lcores do, on an injected clock (1 tick = 1 ns). Applied live whole, or refused whole.
#include "dataplane/reload.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace dripgate::dataplane {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kHz = 1'000'000'000;
constexpr auto kWait = std::chrono::seconds(10);  // only a hung owner runs into it

void* pkt(uint64_t id) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
}
uint64_t id_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

ParsedPacket packet(const char* src) {
  ParsedPacket p{};
  p.tuple = *dataplane::make_tuple(src, 1000, "10.9.0.1", 80, 17);
  p.status = ParseStatus::kOk;
  return p;
}

// gold and default, a 1 kpps port, no rules: what the tests start from.
config::Dataplane base() {
  config::Dataplane dp;
  dp.drip.rate_pps = 1000;
  for (const char* name : {"gold", "default"}) {
    config::Class c;
    c.name = name;
    c.queue_depth = 64;
    c.ttl_ms = 0;
    dp.classes.push_back(c);
  }
  return dp;
}

config::Rule rule(const char* src, const char* cls) {
  config::Rule r;
  r.src = src;
  r.cls = cls;
  return r;
}

// The worker lcore: polls both mailboxes and the scheduler, 1000 ticks a loop, until stopped
// and empty; records the departures and uses the classifier it was last given.
struct Worker {
  Worker(Scheduler& s, const Classifier* c) : sched(s), classifier(c) {}
  Scheduler& sched;
  DripMailbox drip;
  RxMailbox rx;
  const Classifier* classifier;
  config::UnknownFlows unknown = config::UnknownFlows::kDefault;
  std::vector<Departure> sent;
  std::atomic<bool> stop{false};
  std::atomic<unsigned> changes{0};

  void run() {
    uint64_t now = 0;
    while (!stop.load() || sched.backlog() != 0) {
      drip.poll([&](const DripChange& r) {
        changes.fetch_add(1);
        return apply_drip_change(sched, r, now);
      });
      rx.poll([&](const RxChange& r) {
        changes.fetch_add(1);
        classifier = r.classifier;
        unknown = r.unknown;
        return MailboxResult{true, {}};
      });
      Departure out[4];
      const unsigned n = sched.poll(now, out, 4, nullptr, 0, nullptr);
      sent.insert(sent.end(), out, out + n);
      now += 1000;
    }
  }
};

TEST(Reload, RestartFieldsNameEachFieldThatNeedsARestart) {
  const config::Dataplane a = base();
  EXPECT_TRUE(restart_fields(a, a).empty());
  config::Dataplane b = a;
  b.drip.rate_pps = 5;
  b.classes[0].weight = 7;
  b.classify.push_back(rule("10.0.0.0/8", "gold"));
  b.unknown_flows = config::UnknownFlows::kDrop;
  b.flow_idle_timeout_s = 9;
  EXPECT_TRUE(restart_fields(a, b).empty()) << "all of these are live";
  b = a;
  b.eal.push_back("--no-pci");
  b.cluster_port = 3;
  b.drip_lcore = 2;
  b.mbufs = 4095;
  b.mtu = 9000;
  b.flow_table_size = 8;
  b.control_socket = "/tmp/x.sock";
  b.metrics_listen = "127.0.0.1:9101";
  EXPECT_EQ(
      restart_fields(a, b),
      (std::vector<std::string>{"dataplane.eal", "dataplane.ports", "dataplane.lcores",
                                "dataplane.mbufs", "dataplane.mtu", "dataplane.flow_table_size",
                                "dataplane.control_socket", "dataplane.metrics_listen"}));
  b = a;
  std::swap(b.classes[0], b.classes[1]);
  EXPECT_EQ(restart_fields(a, b),
            (std::vector<std::string>{"dataplane.classes (names, order: gold, default -> "
                                      "default, gold)"}));
}

TEST(Reload, JudgeNamesEveryProblemTheLoaderCannotSee) {
  config::Dataplane dp = base();
  Judgement ok = judge(dp, kHz);
  EXPECT_TRUE(ok.errors.empty());
  ASSERT_NE(ok.classifier, nullptr);
  dp.classify.push_back(rule("10.0.0.0/8", "platinum"));
  dp.classes[0].rate_pps = 1e-9;
  dp.classes[1].name = "bronze";  // unknown_flows: default needs a class `default`
  const Judgement bad = judge(dp, kHz);
  EXPECT_EQ(bad.classifier, nullptr);
  ASSERT_EQ(bad.errors.size(), 3u);
  EXPECT_EQ(bad.errors[0], "dataplane.classify[0].class: unknown class 'platinum'");
  EXPECT_NE(bad.errors[1].find("dataplane.unknown_flows:"), std::string::npos) << bad.errors[1];
  EXPECT_NE(bad.errors[2].find("dataplane.classes.gold.rate_pps: "), std::string::npos)
      << bad.errors[2];
}

TEST(Reload, ValidReloadAppliesLiveAndLosesNoQueuedPacket) {
  const config::Dataplane dp = base();
  Scheduler sched(dp.drip, dp.classes, kHz);
  for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(sched.enqueue(1, pkt(i), 100, 0));
  Judgement j = judge(dp, kHz);
  Worker w(sched, j.classifier.get());
  Reloader reloader(sched, w.drip, {&w.rx}, dp, std::move(j.classifier));
  const Classifier* before = &reloader.classifier();
  EXPECT_EQ(before->classify(packet("10.1.2.3")), Classifier::kNoMatch);
  std::thread lcore([&] { w.run(); });

  // A new port rate, a gold cap, a deeper default queue, and a rule that moves 10.1/16 to gold.
  config::Dataplane next = dp;
  next.drip.rate_pps = 4000;
  next.classes[0].rate_pps = 500;
  next.classes[1].queue_depth = 1000;
  next.classify.push_back(rule("10.1.0.0/16", "gold"));
  next.unknown_flows = config::UnknownFlows::kDrop;
  const Reloader::Outcome o = reloader.reload(next, kWait);
  EXPECT_TRUE(o.applied);
  EXPECT_TRUE(o.errors.empty()) << o.errors.front();
  EXPECT_TRUE(o.restart.empty());
  EXPECT_EQ(w.changes.load(), 2u);  // one post to each owner
  EXPECT_EQ(reloader.running(), next);
  EXPECT_EQ(sched.port_rate().rate_pps, 4000);
  EXPECT_EQ(sched.class_rate(0).rate_pps, 500);
  w.stop = true;
  lcore.join();
  // The worker classifies with the new rules, the reloader holds them, the old ones are gone.
  EXPECT_EQ(w.classifier, &reloader.classifier());
  EXPECT_NE(w.classifier, before);
  EXPECT_EQ(w.classifier->classify(packet("10.1.2.3")), 0);
  EXPECT_EQ(w.classifier->classify(packet("10.2.2.3")), Classifier::kNoMatch);
  EXPECT_EQ(w.unknown, config::UnknownFlows::kDrop);
  // Every queued packet left, in order, and the deeper queue takes more than the old 64.
  ASSERT_EQ(w.sent.size(), 20u);
  for (uint64_t k = 0; k < 20; ++k) EXPECT_EQ(id_of(w.sent[k].pkt), k + 1);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE(sched.enqueue(1, pkt(i), 100, 0)) << i;
}

TEST(Reload, RefusedReloadsChangeNothing) {
  const config::Dataplane dp = base();
  Scheduler sched(dp.drip, dp.classes, kHz);
  Judgement j = judge(dp, kHz);
  Worker w(sched, j.classifier.get());
  Reloader reloader(sched, w.drip, {&w.rx}, dp, std::move(j.classifier));
  std::thread lcore([&] { w.run(); });

  // A live change together with a restart-only one: all or nothing, so nothing.
  config::Dataplane next = dp;
  next.drip.rate_pps = 4000;
  next.mbufs = 4095;
  Reloader::Outcome o = reloader.reload(next, kWait);
  EXPECT_FALSE(o.applied);
  EXPECT_EQ(o.restart, std::vector<std::string>{"dataplane.mbufs"});
  // Renamed classes.
  next = dp;
  next.classes[0].name = "silver";
  next.classify.push_back(rule("10.1.0.0/16", "silver"));
  o = reloader.reload(next, kWait);
  EXPECT_FALSE(o.applied);
  ASSERT_EQ(o.restart.size(), 1u);
  EXPECT_NE(o.restart[0].find("gold, default -> silver, default"), std::string::npos);
  // A rule naming no class, and a rate the timeline cannot hold, beside a valid rate change.
  next = dp;
  next.drip.rate_pps = 4000;
  next.classify.push_back(rule("10.1.0.0/16", "platinum"));
  next.classes[1].rate_bps = 1e-9;
  o = reloader.reload(next, kWait);
  EXPECT_FALSE(o.applied);
  EXPECT_TRUE(o.restart.empty());
  ASSERT_EQ(o.errors.size(), 2u);
  EXPECT_EQ(o.errors[0], "dataplane.classify[0].class: unknown class 'platinum'");
  EXPECT_NE(o.errors[1].find("dataplane.classes.default.rate_bps"), std::string::npos);

  w.stop = true;
  lcore.join();
  EXPECT_EQ(w.changes.load(), 0u) << "a refused reload posts nothing";
  EXPECT_EQ(w.classifier, &reloader.classifier());
  EXPECT_EQ(reloader.running(), dp);
  EXPECT_EQ(sched.port_rate().rate_pps, 1000);
}

TEST(Reload, AWorkerThatDoesNotAnswerBlocksTheNextReload) {
  const config::Dataplane dp = base();
  Scheduler sched(dp.drip, dp.classes, kHz);
  Judgement j = judge(dp, kHz);
  Worker w(sched, j.classifier.get());
  Reloader reloader(sched, w.drip, {&w.rx}, dp, std::move(j.classifier));
  config::Dataplane next = dp;
  next.drip.rate_pps = 4000;
  // Nobody polls: the drip part is not taken in time, and nothing else is posted.
  Reloader::Outcome o = reloader.reload(next, 1ms);
  EXPECT_FALSE(o.applied);
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(o.errors[0].find("in time; nothing else was changed"), std::string::npos);
  EXPECT_TRUE(w.rx.idle());
  o = reloader.reload(next, 1ms);
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(o.errors[0].find("still pending"), std::string::npos) << o.errors[0];
  // The worker takes the late change (its prepared object was kept alive); then reloads work.
  std::thread lcore([&] { w.run(); });
  while (w.changes.load() == 0) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(sched.port_rate().rate_pps, 4000);
  next.drip.rate_pps = 2000;
  o = reloader.reload(next, kWait);
  EXPECT_TRUE(o.applied) << (o.errors.empty() ? "" : o.errors.front());
  w.stop = true;
  lcore.join();
  EXPECT_EQ(sched.port_rate().rate_pps, 2000);
}

// RSS: every RX lcore gets the new rules; one that does not answer in time keeps the reload
// from completing, and the rules it may still take stay alive.
TEST(Reload, EachRxLcoreTakesTheNewRules) {
  const config::Dataplane dp = base();
  Scheduler sched(dp.drip, dp.classes, kHz);
  Judgement j = judge(dp, kHz);
  Worker w(sched, j.classifier.get());
  RxMailbox second;  // a second RX lcore's mailbox, polled by a thread of its own
  const Classifier* second_uses = j.classifier.get();
  std::atomic<bool> second_polls{true}, second_stop{false};
  std::thread lcore([&] { w.run(); });
  std::thread rx2([&] {
    while (!second_stop.load()) {
      if (second_polls.load())
        second.poll([&](const RxChange& r) {
          second_uses = r.classifier;
          return MailboxResult{true, {}};
        });
      std::this_thread::sleep_for(100us);
    }
  });
  Reloader reloader(sched, w.drip, {&w.rx, &second}, dp, std::move(j.classifier));
  config::Dataplane next = dp;
  next.classify.push_back(rule("10.1.0.0/16", "gold"));
  Reloader::Outcome o = reloader.reload(next, kWait);
  EXPECT_TRUE(o.applied) << (o.errors.empty() ? "" : o.errors.front());
  EXPECT_EQ(w.classifier, &reloader.classifier());
  EXPECT_EQ(second_uses, &reloader.classifier());

  second_polls = false;  // the second RX lcore stops answering
  next.classify.push_back(rule("10.2.0.0/16", "gold"));
  o = reloader.reload(next, 5ms);
  EXPECT_FALSE(o.applied);
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(o.errors[0].find("rx lcore 1: "), std::string::npos) << o.errors[0];
  EXPECT_NE(w.classifier, &reloader.classifier()) << "the first took the new rules";
  EXPECT_EQ(second_uses, &reloader.classifier()) << "the second still has the old ones";
  second_polls = true;  // it answers late, taking rules the reloader kept alive
  while (!second.idle()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(second_uses, w.classifier);
  second_stop = true;
  rx2.join();
  w.stop = true;
  lcore.join();
}

}  // namespace
}  // namespace dripgate::dataplane
