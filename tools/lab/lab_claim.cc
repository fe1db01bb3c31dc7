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
ClaimRow::State claimed_if(bool claimed, bool ok) {
  return claimed ? verdict(ok) : ClaimRow::State::kNotClaimed;
}

}  // namespace

Claim judge_claim(const ColumnFigures& before, const ColumnFigures& after,
                  const std::vector<ColumnFigures>& tc, const ClaimBounds& bounds,
                  const FairnessBaselines& fair) {
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
    if (bounds.load == Load::kHighRate) {
      const std::optional<double> even =
          a.reference_pps ? std::optional(*a.reference_pps * 100e-6) : std::nullopt;
      c.rows.push_back(
          {verdict(even && a.peak_100us && *a.peak_100us <= bounds.spacing_factor * *even),
           fmt::format("{}: most packets in any 100 us {} vs the even spacing's {} at {}/s "
                       "(claimed at {:.2g}x or less)",
                       a.name, count(a.peak_100us), count(even), count(a.reference_pps),
                       bounds.spacing_factor)});
    }
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
  if (bounds.load == Load::kFairness || fair.alone || fair.fifo) {
    const bool claimed = bounds.load == Load::kFairness;
    const auto at = [](const std::optional<ColumnFigures>& col,
                       std::optional<double> ColumnFigures::*field) -> std::optional<double> {
      if (!col) return std::nullopt;
      return (*col).*field;
    };
    const std::string alone = fair.alone ? fair.alone->name : "not run";
    const std::string fifo = fair.fifo ? fair.fifo->name : "not run";
    const auto ad = at(fair.alone, &ColumnFigures::steady_delivered);
    const auto al = at(fair.alone, &ColumnFigures::steady_delay_p99_ns);
    const auto fd = at(fair.fifo, &ColumnFigures::steady_delivered);
    const auto fl = at(fair.fifo, &ColumnFigures::steady_delay_p99_ns);
    const auto& d = a.steady_delivered;
    const auto& l = a.steady_delay_p99_ns;
    const auto share = [](std::optional<double> x, std::optional<double> of) {
      return x && of && *of > 0 ? fmt::format(", {:.1f}%", 100 * *x / *of) : std::string();
    };
    const auto suffix = [claimed](std::string bound) {
      return claimed ? fmt::format(" (claimed at {})", bound) : std::string();
    };
    c.rows.push_back(
        {claimed_if(claimed, d && ad && *ad > 0 && *d >= bounds.alone_share * *ad),
         fmt::format("vs the steady tenant alone ({}): steady tenant delivered {} vs {}{}{}", alone,
                     count(d), count(ad), share(d, ad),
                     suffix(fmt::format("{:.0f}% or more", 100 * bounds.alone_share)))});
    c.rows.push_back(
        {claimed_if(claimed,
                    l && al && *l <= bounds.alone_delay_factor * *al + bounds.alone_slack_ns),
         fmt::format("vs the steady tenant alone ({}): its p99 delay {} vs {}{}", alone, micros(l),
                     micros(al),
                     suffix(fmt::format("{:.2g}x + {} or less", bounds.alone_delay_factor,
                                        micros(bounds.alone_slack_ns))))});
    c.rows.push_back(
        {claimed_if(claimed, l && fl && *l > 0 && *fl >= bounds.fifo_delay_factor * *l),
         fmt::format("vs fairness: none ({}): its p99 delay {} vs {}, {}{}", fifo, micros(l),
                     micros(fl), times_lower(l, fl),
                     suffix(fmt::format("{:.2g}x lower or more", bounds.fifo_delay_factor)))});
    c.rows.push_back({ClaimRow::State::kNotClaimed,
                      fmt::format("vs fairness: none ({}): steady tenant delivered {} vs {}", fifo,
                                  count(d), count(fd))});
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
