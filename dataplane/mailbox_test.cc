// Live rate changes as the dataplane makes them: a poster thread (the control socket) posts
// through the DripMailbox while the owner thread (the drip lcore) polls the mailbox and the
// scheduler, here on an injected clock (1 tick = 1 ns), so the departure times are exact.
#include "dataplane/mailbox.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {
namespace {

constexpr uint64_t kHz = 1'000'000'000;
constexpr auto kWait = std::chrono::seconds(10);  // only a hung owner runs into it

config::Class make_class(const std::string& name) {
  config::Class c;
  c.name = name;
  c.queue_depth = 64;
  c.ttl_ms = 0;
  return c;
}

void* pkt(uint64_t id) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
}
uint64_t id_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// The owner: polls the mailbox and the scheduler every 1000 ticks until nothing is queued. After
// `hold_after` departures it holds the clock until `hold_for` requests have been applied, so the
// changes land at a known time with packets still queued.
struct Owner {
  Scheduler& sched;
  DripMailbox& mailbox;
  unsigned hold_after;
  unsigned hold_for;
  std::vector<Departure> sent;
  std::atomic<unsigned> applied{0};
  std::atomic<bool> holding{false};  // the clock is held: changes posted now land at a known time

  void run() {
    uint64_t now = 0;
    while (sched.backlog() != 0) {
      mailbox.poll([&](const DripChange& r) {
        MailboxResult res = apply_drip_change(sched, r, now);
        if (res.ok) applied.fetch_add(1);
        return res;
      });
      Departure out[4];
      const unsigned n = sched.poll(now, out, 4, nullptr, 0, nullptr);
      sent.insert(sent.end(), out, out + n);
      if (sent.size() >= hold_after && applied.load() < hold_for) {
        holding.store(true);
        continue;
      }
      now += 1000;
    }
  }
};

TEST(DripMailbox, LiveRateChangeAppliesAtOnceAndLosesNoQueuedPacket) {
  config::Drip drip;
  drip.rate_pps = 1000;  // 1e6 ticks per packet
  Scheduler sched(drip, {make_class("a"), make_class("b")}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(sched.enqueue(0, pkt(i), 100, 0));
  DripMailbox mailbox;
  Owner owner{sched, mailbox, 3, 2, {}, {}};
  std::thread drip_lcore([&] { owner.run(); });

  // Refused by the owner: nothing changes, and the poster hears why.
  MailboxResult res;
  ASSERT_TRUE(mailbox.post_and_wait({DripChange::kPort, -1, 0}, &res, kWait));
  EXPECT_FALSE(res.ok);
  EXPECT_NE(res.error.find("rate_pps"), std::string::npos) << res.error;
  ASSERT_TRUE(mailbox.post_and_wait({5, 1, 0}, &res, kWait));
  EXPECT_FALSE(res.ok);
  EXPECT_NE(res.error.find("class"), std::string::npos) << res.error;
  EXPECT_EQ(sched.port_rate().rate_pps, 1000);

  // The owner may still be before its third departure: post once it holds the clock there.
  while (!owner.holding.load()) std::this_thread::yield();
  ASSERT_TRUE(mailbox.post_and_wait({DripChange::kPort, 4000, 0}, &res, kWait));
  EXPECT_TRUE(res.ok) << res.error;
  ASSERT_TRUE(mailbox.post_and_wait({1, 7, 8000}, &res, kWait));
  EXPECT_TRUE(res.ok) << res.error;
  drip_lcore.join();

  // Three departures at 1 kpps (0, 1 ms, 2 ms), the changes at 2 ms, then every 250 us from the
  // last departure: all ten packets, in order, none lost or sent twice.
  ASSERT_EQ(owner.sent.size(), 10u);
  for (uint64_t k = 0; k < 10; ++k) {
    EXPECT_EQ(id_of(owner.sent[k].pkt), k + 1);
    const uint64_t expected = k < 3 ? k * 1'000'000 : 2'000'000 + (k - 2) * 250'000;
    EXPECT_EQ(owner.sent[k].scheduled_tsc, expected) << k;
  }
  EXPECT_EQ(owner.applied.load(), 2u);
  EXPECT_EQ(sched.port_rate().rate_pps, 4000);
  EXPECT_EQ(sched.class_rate(1).rate_pps, 7);
  EXPECT_EQ(sched.class_rate(1).rate_bps, 8000);
  EXPECT_EQ(sched.class_rate(0).rate_pps, 0);
  const ClassStats st = sched.class_stats(0);
  EXPECT_EQ(st.enq_packets, st.tx_packets);
}

TEST(DripMailbox, AnUnansweredRequestBlocksTheNextUntilTheOwnerTakesIt) {
  config::Drip drip;
  Scheduler sched(drip, {make_class("a")}, kHz);
  DripMailbox mailbox;
  MailboxResult res;
  // No owner polling: the poster gives up, and the next post is refused while that one waits.
  EXPECT_FALSE(
      mailbox.post_and_wait({DripChange::kPort, 10, 0}, &res, std::chrono::milliseconds(1)));
  EXPECT_NE(res.error.find("in time"), std::string::npos) << res.error;
  EXPECT_FALSE(mailbox.post_and_wait({DripChange::kPort, 20, 0}, &res, kWait));
  EXPECT_NE(res.error.find("still pending"), std::string::npos) << res.error;
  // The owner takes the first one late; after that the mailbox is free again.
  mailbox.poll([&](const DripChange& r) { return apply_drip_change(sched, r, 0); });
  EXPECT_EQ(sched.port_rate().rate_pps, 10);
  std::thread owner([&] {
    while (sched.port_rate().rate_pps != 30) {
      mailbox.poll([&](const DripChange& r) { return apply_drip_change(sched, r, 0); });
    }
  });
  EXPECT_TRUE(mailbox.post_and_wait({DripChange::kPort, 30, 0}, &res, kWait));
  EXPECT_TRUE(res.ok) << res.error;
  owner.join();
}

}  // namespace
}  // namespace dripgate::dataplane
