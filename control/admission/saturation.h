// A model gate's hold-back on its inference backends' own saturation (config::Saturation):
// the law that moves the gate's share of its configured rate from the backends' signal
// (SaturationLaw, a pure function of its inputs and the times it is given), and the shares in
// force (SaturationShares), which the scraper (registry/saturation_sync.h) publishes through
// the ConfigStore and prepare() scales the gates by, as it scales them by the brake.
//
// The law is AIMD, the rule TCP's congestion control made familiar: above the target the share
// is multiplied by `decrease` (a backend's queue grows faster the fuller it is, so the cut must
// be proportional), at or below it `increase` is added (probing for room slowly); the share
// moves at most once per interval_ms, so a decrease is not repeated before the backends could
// show its effect. A PI law would settle closer to the target, but needs gains tuned per
// backend; AIMD needs none beyond the two steps, and its worst case (a sawtooth around the
// target) is bounded by them. Without a signal (failed scrapes) the share holds for
// `failures - 1` scrapes (a blip changes nothing), then moves back toward the configured rate
// (1) by `increase` an interval: a scraper that cannot see the backends must not keep the gate
// down for good, and the configured rate is what the operator set without the signal.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.h"

namespace dripgate::control {

class SaturationLaw {
 public:
  using Clock = std::chrono::steady_clock;

  // The share starts at the configured rate (1, within the bounds): a daemon that just started
  // knows nothing of the backends yet.
  explicit SaturationLaw(const config::Saturation& cfg);
  // A new configuration of the same gate (a reload): the share is kept, within the new bounds.
  void configure(const config::Saturation& cfg);

  // A scrape due at `at` read `signal` (NaN counts as a failure). Returns the share.
  double signal(double signal, Clock::time_point at);
  // A scrape due at `at` failed. Returns the share.
  double failure(Clock::time_point at);

  double share() const { return share_; }
  // Failed scrapes in a row.
  int64_t failures() const { return failures_; }
  const config::Saturation& config() const { return cfg_; }

 private:
  // Whether the share may move at `at` (at most once per interval); notes the move.
  bool may_move(Clock::time_point at);
  double clamp(double share) const;

  config::Saturation cfg_;
  double share_ = 1;
  int64_t failures_ = 0;
  std::optional<Clock::time_point> moved_;  // the last move
};

// The shares of the configured rates in force, by model: those of the model gates and of the
// model_tokens gates. A model absent from its map is at 1. Immutable once published.
struct SaturationShares {
  std::unordered_map<std::string, double> model, model_tokens;

  // The share of the global gate `kind` ("model", "model_tokens"; any other: 1) of `id`.
  double of(std::string_view kind, const std::string& id) const;
  bool operator==(const SaturationShares&) const = default;
};

}  // namespace dripgate::control
