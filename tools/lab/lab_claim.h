// The lab's claim, as numbers in and a verdict out: dripgate (AFTER) against the unshaped run
// (BEFORE) and against the best of the Linux tc shapers run on the same offered load.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dripgate::lab {

// One column's figures (medians over its rounds); nullopt where the run has no such figure.
struct ColumnFigures {
  std::string name;
  std::optional<double> ring_drops;            // modelled NIC ring drops
  std::optional<double> burst_factor;          // most arrivals in 10 ms / the rate's share
  std::optional<double> jitter_p99_ns;         // p99 |inter-arrival - 1/rate| at the receiver
  std::optional<double> peak_100us;            // most arrivals in any 100 us at the receiver
  std::optional<double> reference_pps;         // the rate the receiver measures against
  std::optional<double> runaway_delivered;     // what the tenants that ignore 429 got delivered
  std::optional<double> obeying_delivered;     // what the tenants that obey 429 got delivered
  std::optional<double> obeying_delay_p99_ns;  // the worst of their p99 send -> receive delays
  std::optional<double> steady_delivered;      // the fairness load's steady tenant: delivered
  std::optional<double> steady_delay_p99_ns;   // and its p99 send -> receive delay
};

// The offered load decides which rows against tc the claim stands on; the others are reported.
enum class Load {
  // Synchronized bursts whose mean stays below the rate: every shaper's queue absorbs them,
  // so what differs is how evenly the packets leave (jitter).
  kBursts,
  // More offered than the rate for seconds: a tc shaper's one queue fills and delays and drops
  // every tenant alike, so what differs is what the tenants that obey 429 get, and how late.
  kOverload,
  // One admitted tenant offered well above a drip rate of 100,000/s: every shaper is always
  // busy, and what differs is how the packets leave at a 10 us spacing, where a kernel
  // shaper's timer and softirq batching send them in clumps (the most in any 100 us). The
  // p99 jitter there is as much the machine's preemptions as the shaper's: reported.
  kHighRate,
  // A runaway tenant's admitted burst shares a class with a steady tenant: what differs is
  // whether the steady tenant fares as if alone (fairness: tenant) or waits behind the burst
  // (fairness: none). Claimed against dripgate's own baselines (FairnessBaselines), not tc.
  kFairness,
};

struct ClaimBounds {
  // Jitter is claimed only when AFTER's p99 is at least this many times lower than the best
  // tc shaper's. Low on purpose: on a shared 2-vCPU machine a preempted drip worker or tc
  // timer moves either p99 by a factor of two from run to run.
  double jitter_factor = 1.2;
  // Under overload, the obeying tenants' p99 delay is claimed at this many times lower: a
  // full tc queue holds its length over the rate (1000 frames at 1,800/s: 0.55 s), a
  // margin far beyond run-to-run noise.
  double delay_factor = 2.0;
  // At high rate AFTER's most arrivals in any 100 us is claimed at most this many times the
  // even spacing's count at its rate (10 at 100,000/s): one preempted drip worker's catch-up,
  // not a clump ...
  double spacing_factor = 1.5;
  // ... and at this many times fewer than the best tc's. How much a kernel shaper's timer and
  // softirq batching clump depends on the host (60-66 per 100 us on one 2-vCPU VM, 19-27 on
  // another, dripgate 13-14 on both), so the margin claimed is one no run-to-run noise closes,
  // not the largest seen.
  double peak_factor = 1.2;
  // Under fairness, the steady tenant's figures through AFTER against the same tenant alone:
  // at least this share of its requests delivered ...
  double alone_share = 0.95;
  // ... and a p99 delay of at most alone_delay_factor x alone's plus alone_slack_ns. The slack
  // holds one DRR turn of the other tenant: a steady request that finds the runaway's turn
  // under way waits for its quantum, 1536 B of 106 B frames (15 frames, 8.3 ms at 1,800/s),
  // with room for a preempted drip worker on a shared machine. A FIFO's wait is the queue's.
  double alone_delay_factor = 2.0;
  double alone_slack_ns = 15e6;
  // And with fairness: none (FairnessBaselines::fifo) its p99 delay is claimed at least this
  // many times AFTER's: behind the burst it waits the class's queue (up to 1024 frames).
  double fifo_delay_factor = 2.0;
  Load load = Load::kBursts;
};

// The fairness load's own columns: the steady tenant alone through dripgate, and the same
// dataplane with the shared class at fairness: none. Missing under kFairness: its rows fail.
struct FairnessBaselines {
  std::optional<ColumnFigures> alone, fifo;
};

struct ClaimRow {
  enum class State { kHolds, kFails, kNotClaimed };
  State state;
  std::string text;
};

struct Claim {
  bool holds = false;
  std::vector<ClaimRow> rows;
};

// Against BEFORE (claimed): fewer ring drops and a lower burst factor. Against the tc columns
// (none given: not compared), each row compared with the best tc value for that row:
//   claimed: fewer requests of the runaway tenants delivered (when a tenant ignores 429); no
//     more ring drops; and
//     under Load::kBursts: p99 jitter at least bounds.jitter_factor times lower;
//     under Load::kHighRate: the most arrivals in any 100 us at least bounds.peak_factor
//     times fewer, and (a row of AFTER's own) at most bounds.spacing_factor times the even
//     spacing's count at AFTER's reference_pps;
//     under Load::kOverload: more of the obeying tenants' requests delivered, and their p99
//     delay at least bounds.delay_factor times lower;
//   reported, not claimed: the burst factor and the rows the other load claims.
// Against the fairness baselines (given, or the load is Load::kFairness), the steady tenant:
//   claimed under Load::kFairness: through AFTER at least bounds.alone_share of what it got
//     delivered alone, with a p99 delay of at most bounds.alone_delay_factor x alone's plus
//     bounds.alone_slack_ns; through the FIFO column a p99 delay at least
//     bounds.fifo_delay_factor x AFTER's;
//   reported, not claimed: what it got delivered through the FIFO column.
// The claim holds when every claimed row holds; a missing figure fails its row.
Claim judge_claim(const ColumnFigures& before, const ColumnFigures& after,
                  const std::vector<ColumnFigures>& tc, const ClaimBounds& bounds = {},
                  const FairnessBaselines& fair = {});

// The verdict line and one line per row, as dripgate-lab-report prints them.
std::string format_claim(const Claim& c);

}  // namespace dripgate::lab
