#include "tools/lab/lab_claim.h"

#include <algorithm>

#include <fmt/format.h>

namespace dripgate::lab {
namespace {

std::string count(std::optional<double> v) {
  return v ? fmt::format("{:.0f}", *v) : "-";
}
std::string ratio(std::optional<double> v) {
  return v ? fmt::format("{:.2f}x", *v) : "-";
}
std::string micros(std::optional<double> v) {
  if (!v) return "-";
  return *v >= 1e6 ? fmt::format("{:.1f} ms", *v / 1e6) : fmt::format("{:.1f} us", *v / 1e3);
}

// The tc column with the lowest (or, `highest`, the highest) value of `field`; nullptr when none
// has it.
const ColumnFigures* best(const std::vector<ColumnFigures>& tc,
                          std::optional<double> ColumnFigures::*field, bool highest = false) {
  const ColumnFigures* b = nullptr;
  for (const ColumnFigures& c : tc)
    if (c.*field &&
        (b == nullptr || (highest ? *(c.*field) > *(b->*field) : *(c.*field) < *(b->*field))))
      b = &c;
  return b;
}

// "2.81x lower" / "1.31x higher": how AFTER's value compares with the baseline's.
std::string times_lower(std::optional<double> after, std::optional<double> base) {
  if (!after || !base || *after <= 0 || *base <= 0) return "-";
  const double x = *base / *after;
  return x >= 1 ? fmt::format("{:.2f}x lower", x) : fmt::format("{:.2f}x higher", 1 / x);
}

ClaimRow::State verdict(bool ok) {
  return ok ? ClaimRow::State::kHolds : ClaimRow::State::kFails;
}

}  // namespace

Claim judge_claim(const ColumnFigures& before, const ColumnFigures& after,
                  const std::vector<ColumnFigures>& tc, const ClaimBounds& bounds) {
  Claim c;
  const auto& a = after;
  const auto& b = before;
  c.rows.push_back({verdict(a.ring_drops && b.ring_drops && *a.ring_drops < *b.ring_drops),
                    fmt::format("vs {}: NIC ring drops (modelled) {} vs {}", b.name,
                                count(a.ring_drops), count(b.ring_drops))});
  c.rows.push_back({verdict(a.burst_factor && b.burst_factor && *a.burst_factor < *b.burst_factor),
                    fmt::format("vs {}: burst factor {} vs {}", b.name, ratio(a.burst_factor),
                                ratio(b.burst_factor))});
  if (!tc.empty()) {
    const auto claimed_if = [](bool claimed, bool ok) {
      return claimed ? verdict(ok) : ClaimRow::State::kNotClaimed;
    };
    // "vs the best tc (NAME): LABEL A vs B, Nx lower": claimed (when `claimed`) at `factor`.
    const auto lower_by = [&](std::optional<double> ColumnFigures::*field, const char* label,
                              std::string (*show)(std::optional<double>), bool claimed,
                              double factor) {
      const ColumnFigures* t = best(tc, field);
      const std::optional<double> base = t ? t->*field : std::nullopt;
      c.rows.push_back(
          {claimed_if(claimed, base && a.*field && *(a.*field) * factor <= *base),
           fmt::format("vs the best tc ({}): {} {} vs {}, {}{}", t ? t->name : "-", label,
                       show(a.*field), show(base), times_lower(a.*field, base),
                       claimed ? fmt::format(" (claimed at {:.2g}x or more)", factor) : "")});
    };
    const bool overload = bounds.load == Load::kOverload;
    lower_by(&ColumnFigures::jitter_p99_ns, "p99 jitter", micros, bounds.load == Load::kBursts,
             bounds.jitter_factor);
    lower_by(&ColumnFigures::peak_100us, "most packets in any 100 us", count,
             bounds.load == Load::kHighRate, bounds.peak_factor);
    const ColumnFigures* o = best(tc, &ColumnFigures::obeying_delivered, true);
    c.rows.push_back({claimed_if(overload, o && a.obeying_delivered &&
                                               *a.obeying_delivered > *o->obeying_delivered),
                      fmt::format("vs the best tc ({}): tenants that obey 429 delivered {} vs {}",
                                  o ? o->name : "-", count(a.obeying_delivered),
                                  o ? count(o->obeying_delivered) : "-")});
    lower_by(&ColumnFigures::obeying_delay_p99_ns, "their p99 delay", micros, overload,
             bounds.delay_factor);
    const ColumnFigures* r = best(tc, &ColumnFigures::runaway_delivered);
    const bool runaway = r || a.runaway_delivered;  // no tenant ignores 429: nothing to claim
    c.rows.push_back(
        {claimed_if(runaway,
                    r && a.runaway_delivered && *a.runaway_delivered < *r->runaway_delivered),
         runaway ? fmt::format("vs the best tc ({}): runaway tenant delivered {} vs {}: its "
                               "unadmitted traffic dropped at the gateway",
                               r ? r->name : "-", count(a.runaway_delivered),
                               r ? count(r->runaway_delivered) : "-")
                 : std::string("runaway tenant: none in this load (no tenant ignores 429)")});
    const ColumnFigures* d = best(tc, &ColumnFigures::ring_drops);
    c.rows.push_back(
        {verdict(d && a.ring_drops && *a.ring_drops <= *d->ring_drops),
         fmt::format("vs the best tc ({}): NIC ring drops (modelled) {} vs {}, "
                     "no more",
                     d ? d->name : "-", count(a.ring_drops), d ? count(d->ring_drops) : "-")});
    const ColumnFigures* f = best(tc, &ColumnFigures::burst_factor);
    c.rows.push_back({ClaimRow::State::kNotClaimed,
                      fmt::format("vs the best tc ({}): burst factor {} vs {}", f ? f->name : "-",
                                  ratio(a.burst_factor), f ? ratio(f->burst_factor) : "-")});
  }
  c.holds = std::none_of(c.rows.begin(), c.rows.end(),
                         [](const ClaimRow& r) { return r.state == ClaimRow::State::kFails; });
  return c;
}

std::string format_claim(const Claim& c) {
  std::string s = c.holds ? "claim holds:\n" : "CLAIM FAILED:\n";
  for (const ClaimRow& r : c.rows) {
    const char* tag = r.state == ClaimRow::State::kHolds   ? "holds      "
                      : r.state == ClaimRow::State::kFails ? "FAILS      "
                                                           : "not claimed";
    s += fmt::format("  [{}] {}\n", tag, r.text);
  }
  return s;
}

}  // namespace dripgate::lab
