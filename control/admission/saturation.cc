#include "control/admission/saturation.h"

#include <algorithm>
#include <cmath>

namespace dripgate::control {

SaturationLaw::SaturationLaw(const config::Saturation& cfg) : cfg_(cfg), share_(clamp(1)) {}

void SaturationLaw::configure(const config::Saturation& cfg) {
  cfg_ = cfg;
  share_ = clamp(share_);
}

double SaturationLaw::clamp(double share) const {
  return std::clamp(share, cfg_.min_share, cfg_.max_share);
}

bool SaturationLaw::may_move(Clock::time_point at) {
  if (moved_ && at - *moved_ < std::chrono::milliseconds(cfg_.interval_ms)) return false;
  moved_ = at;
  return true;
}

double SaturationLaw::signal(double signal, Clock::time_point at) {
  if (std::isnan(signal)) return failure(at);
  failures_ = 0;
  if (signal > cfg_.target) {
    if (share_ > cfg_.min_share && may_move(at)) share_ = clamp(share_ * cfg_.decrease);
  } else if (share_ < cfg_.max_share && may_move(at)) {
    share_ = clamp(share_ + cfg_.increase);
  }
  return share_;
}

double SaturationLaw::failure(Clock::time_point at) {
  ++failures_;
  const double configured = clamp(1);
  if (failures_ < cfg_.failures || share_ == configured || !may_move(at)) return share_;
  share_ = share_ < configured ? std::min(configured, share_ + cfg_.increase)
                               : std::max(configured, share_ - cfg_.increase);
  return share_;
}

double SaturationShares::of(std::string_view kind, const std::string& id) const {
  const auto* shares = kind == "model" ? &model : kind == "model_tokens" ? &model_tokens : nullptr;
  if (!shares) return 1;
  auto it = shares->find(id);
  return it == shares->end() ? 1 : it->second;
}

}  // namespace dripgate::control
