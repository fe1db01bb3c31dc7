#include "tools/lab/lab_claim.h"

#include <gtest/gtest.h>

namespace dripgate::lab {
namespace {

// Figures of the shape the lab measures under bursts: direct drops and bursts, the tc shapers
// drip at the rate but pass the runaway's unadmitted traffic, dripgate drips with less jitter;
// every shaper delivers what the obeying tenants send.
ColumnFigures direct() {
  return {"direct", 4450, 51.0, 552'800, 40, 2000, 835, 1400, 3e6, 400, 60e3};
}
ColumnFigures tbf() {
  return {"tbf", 0, 1.00, 33'100, 2, 2000, 2560, 2400, 180e6, 1600, 150e6};
}
ColumnFigures htb() {
  return {"htb", 0, 1.01, 39'400, 3, 2000, 2560, 2400, 190e6, 1600, 160e6};
}
ColumnFigures dripgate() {
  return {"dripgate", 0, 1.06, 11'800, 2, 2000, 1234, 2400, 150e6, 1600, 120e6};
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
  ColumnFigures fq = {"fq", 0, 1.0, 9'000, 2, 2000, 2560, 2400, 180e6, 1600, 150e6};
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
  t.peak_100us = 40;  // and the high-rate load's own rows hold
  d.reference_pps = 100'000;
  d.peak_100us = 12;
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
  d.reference_pps = 100'000;
  d.jitter_p99_ns = 40'000;  // higher than tbf's: reported, not claimed
  const Claim c = judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate});
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(state_of(c,
                     "vs the best tc (htb): most packets in any 100 us 14 vs 58, 4.14x lower "
                     "(claimed at 1.2x or more)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c,
                     "dripgate: most packets in any 100 us 14 vs the even spacing's 10 at "
                     "100000/s (claimed at 1.5x or less)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): p99 jitter"), ClaimRow::State::kNotClaimed);
  // A host where tc clumps less (19 per 100 us): still 1.36x fewer.
  h.peak_100us = 19;
  EXPECT_TRUE(judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate}).holds);
  d.peak_100us = 17;  // fewer than htb's 19, but not 1.2x, and 1.7x the even spacing
  const Claim fewer = judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate});
  EXPECT_EQ(state_of(fewer, "vs the best tc (htb): most packets"), ClaimRow::State::kFails);
  EXPECT_EQ(state_of(fewer, "dripgate: most packets"), ClaimRow::State::kFails);
  // Far below tc's clumps, but uneven itself: the row of its own fails alone.
  h.peak_100us = 58, d.peak_100us = 16;
  const Claim uneven = judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate});
  EXPECT_FALSE(uneven.holds);
  EXPECT_EQ(state_of(uneven, "vs the best tc (htb): most packets"), ClaimRow::State::kHolds);
  // Without the rate, the even spacing is unknown: the row fails.
  d.peak_100us = 14;
  d.reference_pps.reset();
  EXPECT_EQ(state_of(judge_claim(direct(), d, {t, h}, {.load = Load::kHighRate}),
                     "dripgate: most packets"),
            ClaimRow::State::kFails);
}

// Under the fairness load no tenant ignores 429 (the runaway's plan admits its burst): the
// steady tenant's figures are what differ. Alone it waits about a millisecond; with the burst
// in a tenant-fair class up to one DRR turn of the runaway (~8 ms); in a FIFO class the queue.
ColumnFigures fairness_load(ColumnFigures c, std::string name, double delivered, double delay_ns) {
  c.name = std::move(name);
  c.runaway_delivered.reset();
  c.steady_delivered = delivered;
  c.steady_delay_p99_ns = delay_ns;
  return c;
}
constexpr ClaimBounds kFairness{.load = Load::kFairness};
FairnessBaselines baselines(double fifo_delivered = 1380, double fifo_delay_ns = 540e6) {
  return {fairness_load(dripgate(), "dripgate-alone", 1600, 1.5e6),
          fairness_load(dripgate(), "dripgate-fifo", fifo_delivered, fifo_delay_ns)};
}

TEST(LabClaim, UnderFairnessTheSteadyTenantIsClaimedAsIfAloneAndNotWithoutFairness) {
  const ColumnFigures t = fairness_load(tbf(), "tbf", 1290, 560e6);
  const ColumnFigures d = fairness_load(dripgate(), "dripgate", 1600, 8.9e6);
  const Claim c = judge_claim(direct(), d, {t}, kFairness, baselines());
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(state_of(c,
                     "vs the steady tenant alone (dripgate-alone): steady tenant delivered 1600 vs "
                     "1600, 100.0% (claimed at 95% or more)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c,
                     "vs the steady tenant alone (dripgate-alone): its p99 delay 8.9 ms vs 1.5 ms "
                     "(claimed at 2x + 15.0 ms or less)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c,
                     "vs fairness: none (dripgate-fifo): its p99 delay 8.9 ms vs 540.0 ms, 60.67x "
                     "lower (claimed at 2x lower or more)"),
            ClaimRow::State::kHolds);
  EXPECT_EQ(state_of(c, "vs fairness: none (dripgate-fifo): steady tenant delivered 1600 vs 1380"),
            ClaimRow::State::kNotClaimed);
  // The other loads' rows are reported, not claimed; nobody ignores 429.
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): p99 jitter"), ClaimRow::State::kNotClaimed);
  EXPECT_EQ(state_of(c, "vs the best tc (tbf): their p99 delay"), ClaimRow::State::kNotClaimed);
  EXPECT_EQ(state_of(c, "runaway tenant: none in this load"), ClaimRow::State::kNotClaimed);
  // The direct rows still count: the fairness rows do not replace them.
  ColumnFigures bursty = d;
  bursty.burst_factor = 60;
  EXPECT_FALSE(judge_claim(direct(), bursty, {t}, kFairness, baselines()).holds);
}

TEST(LabClaim, UnderFairnessFailsWhenTheSteadyTenantFaresWorseThanAlone) {
  ColumnFigures d = fairness_load(dripgate(), "dripgate", 1510, 8.9e6);  // 94.4% of alone
  Claim c = judge_claim(direct(), d, {}, kFairness, baselines());
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the steady tenant alone (dripgate-alone): steady tenant delivered"),
            ClaimRow::State::kFails);
  d.steady_delivered = 1520;  // 95%
  EXPECT_TRUE(judge_claim(direct(), d, {}, kFairness, baselines()).holds);
  d.steady_delay_p99_ns = 18.1e6;  // above 2 x 1.5 ms + 15 ms
  c = judge_claim(direct(), d, {}, kFairness, baselines());
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the steady tenant alone (dripgate-alone): its p99 delay"),
            ClaimRow::State::kFails);
  d.steady_delay_p99_ns = 17.9e6;
  EXPECT_TRUE(judge_claim(direct(), d, {}, kFairness, baselines()).holds);
  // A tighter slack rejects the same figures.
  ClaimBounds tight = kFairness;
  tight.alone_slack_ns = 10e6;
  EXPECT_FALSE(judge_claim(direct(), d, {}, tight, baselines()).holds);
}

TEST(LabClaim, UnderFairnessFailsWhenFifoDoesNoWorse) {
  const ColumnFigures d = fairness_load(dripgate(), "dripgate", 1600, 8.9e6);
  // Without fairness the steady tenant waited 1.5x as long, not 2x: nothing shown.
  const Claim c = judge_claim(direct(), d, {}, kFairness, baselines(1600, 13.4e6));
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c,
                     "vs fairness: none (dripgate-fifo): its p99 delay 8.9 ms vs 13.4 ms, "
                     "1.51x lower"),
            ClaimRow::State::kFails);
  EXPECT_TRUE(judge_claim(direct(), d, {}, kFairness, baselines(1600, 17.8e6)).holds);
}

TEST(LabClaim, UnderFairnessAMissingBaselineOrFigureFailsItsRow) {
  const ColumnFigures d = fairness_load(dripgate(), "dripgate", 1600, 8.9e6);
  FairnessBaselines b = baselines();
  b.alone.reset();
  Claim c = judge_claim(direct(), d, {}, kFairness, b);
  EXPECT_FALSE(c.holds);
  EXPECT_EQ(state_of(c, "vs the steady tenant alone (not run): steady tenant delivered 1600 vs -"),
            ClaimRow::State::kFails);
  b = baselines();
  b.fifo.reset();
  EXPECT_FALSE(judge_claim(direct(), d, {}, kFairness, b).holds);
  ColumnFigures no_steady = d;  // the tenant named as steady did not run
  no_steady.steady_delivered.reset();
  no_steady.steady_delay_p99_ns.reset();
  EXPECT_FALSE(judge_claim(direct(), no_steady, {}, kFairness, baselines()).holds);
  // Nothing delivered: a p99 delay of 0 is no figure to be 2x lower than.
  ColumnFigures none = d;
  none.steady_delay_p99_ns = 0;
  c = judge_claim(direct(), none, {}, kFairness, baselines());
  EXPECT_EQ(state_of(c, "vs fairness: none (dripgate-fifo): its p99 delay"),
            ClaimRow::State::kFails);
}

TEST(LabClaim, OtherLoadsReportTheFairnessRowsOnlyWhenTheBaselinesRan) {
  EXPECT_EQ(judge_claim(direct(), dripgate(), {tbf()}).rows.size(), 9u);
  // Baselines that would fail the fairness claim: reported, not claimed, under bursts.
  const Claim c = judge_claim(direct(), dripgate(), {tbf()}, {}, baselines(1600, 1e6));
  EXPECT_TRUE(c.holds) << format_claim(c);
  EXPECT_EQ(c.rows.size(), 13u);
  EXPECT_EQ(state_of(c, "vs fairness: none (dripgate-fifo): its p99 delay 120.0 ms vs 1.0 ms"),
            ClaimRow::State::kNotClaimed);
  EXPECT_EQ(format_claim(c).find("(claimed at 95%"), std::string::npos) << format_claim(c);
}

}  // namespace
}  // namespace dripgate::lab
