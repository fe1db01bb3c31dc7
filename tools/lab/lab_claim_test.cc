#include "tools/lab/lab_claim.h"

#include <gtest/gtest.h>

namespace dripgate::lab {
namespace {

// Figures of the shape the lab measures under bursts: direct drops and bursts, the tc shapers
// drip at the rate but pass the runaway's unadmitted traffic, dripgate drips with less jitter;
// every shaper delivers what the obeying tenants send.
ColumnFigures direct() {
  return {"direct", 4450, 51.0, 552'800, 40, 835, 1400, 3e6};
}
ColumnFigures tbf() {
  return {"tbf", 0, 1.00, 33'100, 2, 2560, 2400, 180e6};
}
ColumnFigures htb() {
  return {"htb", 0, 1.01, 39'400, 3, 2560, 2400, 190e6};
}
ColumnFigures dripgate() {
  return {"dripgate", 0, 1.06, 11'800, 2, 1234, 2400, 150e6};
}

// Under overload: the tc queue stays full, so the obeying tenants lose about half their
// requests and wait its length; dripgate serves their classes and drops the unadmitted excess.
ColumnFigures overloaded(ColumnFigures c, double obeying, double delay_ns, double jitter_ns) {
  c.obeying_delivered = obeying;
  c.obeying_delay_p99_ns = delay_ns;
  c.jitter_p99_ns = jitter_ns;
  return c;
}
constexpr ClaimBounds kOverload{.load = Load::kOverload};

ClaimRow::State state_of(const Claim& c, const std::string& prefix) {
  for (const ClaimRow& r : c.rows)
    if (r.text.rfind(prefix, 0) == 0) return r.state;
  ADD_FAILURE() << "no row starting with " << prefix;
  return ClaimRow::State::kFails;
}

TEST(LabClaim, HoldsAgainstDirectAndTheBestTc) {
  const Claim c = judge_claim(direct(), dripgate(), {tbf(), htb()});
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(c.rows.size(), 9u);
  const std::string s = format_claim(c);
  EXPECT_NE(s.find("claim holds"), std::string::npos);
  // The best tc is picked per row: tbf has the lower jitter.
  EXPECT_NE(
      s.find("best tc (tbf): p99 jitter 11.8 us vs 33.1 us, 2.81x lower (claimed at 1.2x or more)"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find("runaway tenant delivered 1234 vs 2560"), std::string::npos) << s;
  // The burst factor is worse than tbf's: reported, not claimed, and not failing.
  EXPECT_NE(s.find("[not claimed] vs the best tc (tbf): burst factor 1.06x vs 1.00x"),
            std::string::npos)
      << s;
  // Under bursts every shaper delivers the obeying tenants' requests: reported, not claimed.
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): tenants that obey 429 delivered 2400 vs 2400"),
            ClaimRow::State::kNotClaimed);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): their p99 delay 150.0 ms vs 180.0 ms"),
            ClaimRow::State::kNotClaimed);
}

TEST(LabClaim, UnderOverloadTheObeyingTenantsRowsAreClaimed) {
  const ColumnFigures t = overloaded(tbf(), 1150, 560e6, 30'000);
  const ColumnFigures h = overloaded(htb(), 1180, 570e6, 40'000);
  const ColumnFigures d = overloaded(dripgate(), 2390, 9e6, 35'000);
  const Claim c = judge_claim(direct(), d, {t, h}, kOverload);
  EXPECT_TRUE(c.holds) << format_claim(c);
  // The best tc per row: htb delivered more, tbf had the shorter delay and the lower jitter.
  EXPECT_EQ(state_of(c, "vs the best tc (htb): tenants that obey 429 delivered 2390 vs 1180"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c,
                     "vs the best tc (tbf): their p99 delay 9.0 ms vs 560.0 ms, 62.22x lower "
                     "(claimed at 2x or more)"),
            ClaimRow::State::kHolds);
  // Jitter is higher than tbf's here: reported, not claimed, not failing.
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): p99 jitter 35.0 us vs 30.0 us, 1.17x higher"),
            ClaimRow::State::kNotClaimed);
}

TEST(LabClaim, UnderOverloadFailsWhenTheObeyingTenantsFareNoBetter) {
  const ColumnFigures t = overloaded(tbf(), 1150, 560e6, 30'000);
  ColumnFigures d = overloaded(dripgate(), 1150, 9e6, 10'000);  // as many lost as tc
  EXPECT_FALSE(judge_claim(direct(), d, {t}, kOverload).holds);
  d = overloaded(dripgate(), 2390, 300e6, 10'000);  // delivered, but only 1.87x sooner
  const Claim c = judge_claim(direct(), d, {t}, kOverload);
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): their p99 delay"), ClaimRow::State::kFails);
  d.obeying_delay_p99_ns.reset();  // a missing figure fails its row
  EXPECT_FALSE(judge_claim(direct(), d, {t}, kOverload).holds);
}

TEST(LabClaim, WithoutTcOnlyTheDirectRowsCount) {
  const Claim c = judge_claim(direct(), dripgate(), {});
  EXPECT_TRUE(c.holds);
  EXPECT_EQ(c.rows.size(), 2u);
  ColumnFigures worse = dripgate();
  worse.burst_factor = 60;
  EXPECT_FALSE(judge_claim(direct(), worse, {}).holds);
}

TEST(LabClaim, FailsWhenJitterIsNotLowerByTheFactor) {
  ColumnFigures d = dripgate();
  d.jitter_p99_ns = 30'000;  // lower than tbf's 33.1 us, but only 1.10x
  const Claim c = judge_claim(direct(), d, {tbf(), htb()});
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): p99 jitter"), ClaimRow::State::kFails);
  EXPECT_NE(format_claim(c).find("CLAIM FAILED"), std::string::npos);
  EXPECT_NE(format_claim(c).find("1.10x lower"), std::string::npos) << format_claim(c);
  // A looser bound accepts it.
  EXPECT_TRUE(judge_claim(direct(), d, {tbf(), htb()}, {.jitter_factor = 1.05}).holds);
}

TEST(LabClaim, TheBestTcIsTheBaselineNotTheWorst) {
  // A tc column with less jitter than dripgate.
  ColumnFigures fq = {"fq", 0, 1.0, 9'000, 2, 2560, 2400, 180e6};
  const Claim c = judge_claim(direct(), dripgate(), {tbf(), fq});
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the best tc (fq): p99 jitter"), ClaimRow::State::kFails);
  EXPECT_NE(format_claim(c).find("1.31x higher"), std::string::npos) << format_claim(c);
}

TEST(LabClaim, FailsWhenTheRunawayGetsAsMuchThrough) {
  ColumnFigures d = dripgate();
  d.runaway_delivered = 2560;
  EXPECT_FALSE(judge_claim(direct(), d, {tbf()}).holds);
}

TEST(LabClaim, FailsOnMoreRingDropsThanTc) {
  ColumnFigures d = dripgate();
  d.ring_drops = 3;
  const Claim c = judge_claim(direct(), d, {tbf(), htb()});
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): NIC ring drops"), ClaimRow::State::kFails);
}

TEST(LabClaim, AMissingFigureFailsItsRow) {
  ColumnFigures t = tbf();
  t.jitter_p99_ns.reset();
  ColumnFigures h = htb();
  h.jitter_p99_ns.reset();
  EXPECT_FALSE(judge_claim(direct(), dripgate(), {t, h}).holds);
  ColumnFigures d = dripgate();
  d.ring_drops.reset();
  EXPECT_FALSE(judge_claim(direct(), d, {}).holds);
}

TEST(LabClaim, WithoutARunawayTenantItsRowIsNotClaimed) {
  ColumnFigures t = tbf(), d = dripgate();
  t.runaway_delivered.reset();
  d.runaway_delivered.reset();
  t.peak_100us = 40;  // and the high-rate load's own row holds
  const Claim c = judge_claim(direct(), d, {t}, {.load = Load::kHighRate});
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(state_of(c, "runaway tenant: none in this load"), ClaimRow::State::kNotClaimed);
  // One column with the figure and one without still fails the row.
  t.runaway_delivered = 2560;
  EXPECT_FALSE(judge_claim(direct(), d, {t}, {.load = Load::kHighRate}).holds);
}

TEST(LabClaim, AtHighRateThePeakPer100usIsClaimedNotTheJitter) {
  // 100,000/s: 10 per 100 us at an even spacing; the tc shapers' timers send clumps.
  ColumnFigures t = tbf(), h = htb(), d = dripgate();
  t.peak_100us = 74, h.peak_100us = 58, d.peak_100us = 14;
  d.jitter_p99_ns = 40'000;  // higher than tbf's: reported, not claimed
  const Claim c = judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate});
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(state_of(c,
                     "vs the best tc (htb): most packets in any 100 us 14 vs 58, 4.14x lower "
                     "(claimed at 2x or more)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): p99 jitter"), ClaimRow::State::kNotClaimed);
  d.peak_100us = 30;  // fewer, but not 2x
  EXPECT_FALSE(judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate}).holds);
}

}  // namespace
}  // namespace dripgate::lab
