#include "tools/iat/text.h"

#include <algorithm>

#include <fmt/format.h>

#include "tools/iat/units.h"

namespace dripgate::iat {
namespace {

constexpr int kBarWidth = 52;  // as bpftrace

std::string bar_chart(const std::vector<MergedRow>& rows) {
  uint64_t max = 0;
  size_t label_w = 0;
  for (const auto& r : rows) {
    max = std::max(max, r.count);
    label_w = std::max(label_w, r.label.size());
  }
  std::string out;
  for (const auto& r : rows) {
    int n = max == 0 ? 0 : static_cast<int>((r.count * kBarWidth + max - 1) / max);
    if (r.count == 0) n = 0;
    out += fmt::format("{:<{}} {:>9} |{:<{}}|\n", r.label, label_w + 2, r.count,
                       std::string(n, '@'), kBarWidth);
  }
  return out;
}

}  // namespace

std::string render_text(const Profile& p) {
  std::string out;
  out += fmt::format("source      {}\n", p.source);
  out += fmt::format("packets     {}   bytes {}", p.packets, p.bytes);
  if (p.mode == "live") out += fmt::format("   filtered out {}", p.filtered_out);
  out += "\n";
  if (p.packets < 2) {
    out += "fewer than 2 packets: no inter-arrival figures\n";
    return out;
  }
  out += fmt::format("duration    {} (first to last packet)", format_ns(p.duration_s * 1e9));
  if (p.mode == "live" && p.capture_ns)
    out += fmt::format(
        ", probe attached {} ({} over it)", format_ns(static_cast<double>(p.capture_ns)),
        format_rate(static_cast<double>(p.packets) * 1e9 / static_cast<double>(p.capture_ns)));
  out += "\n";
  out += fmt::format("mean rate   {} (mean inter-arrival {})\n", format_rate(p.mean_rate_pps),
                     format_ns(p.mean_iat_ns));
  out += "inter-arrival";
  for (const auto& q : p.percentiles)
    out += fmt::format("  {} {}", quantile_name(q.q), format_ns(q.value_ns));
  out += fmt::format("  max {}{}\n", p.max_exact ? "" : "< ", format_ns(p.max_iat_ns));
  out += "  resolution";
  for (const auto& q : p.percentiles)
    out += fmt::format("  {} {}", quantile_name(q.q), format_ns(q.resolution_ns));
  out += fmt::format(" (bucket widths; percentiles interpolate inside them){}\n",
                     p.max_exact ? ", max exact" : ", max = top of highest bucket");
  out += fmt::format("CV          {:.3f} ({})\n", p.cv,
                     p.cv_exact ? "exact" : "estimate from bucket midpoints");
  if (p.interval) {
    const auto& f = *p.interval;
    const std::string ideal = format_ns(static_cast<double>(f.interval_ns));
    out += fmt::format("interval    ideal {} ({}): mean rate {:+.4f}% of it, {} gaps\n", ideal,
                       format_rate(1e9 / static_cast<double>(f.interval_ns)), f.rate_offset * 100,
                       f.gaps);
    out += fmt::format("  |gap - {}| within", ideal);
    for (size_t i = 0; i < std::size(kIntervalTolerances); ++i)
      out += fmt::format("  ±{} {:.3f}%", format_ns(static_cast<double>(kIntervalTolerances[i])),
                         f.share_within(i) * 100);
    out += fmt::format(
        "\n  |gap - {}|  p50 {}  p99 {}  p99.9 {}  max {} (exact)\n", ideal,
        format_ns(static_cast<double>(f.p50_ns)), format_ns(static_cast<double>(f.p99_ns)),
        format_ns(static_cast<double>(f.p999_ns)), format_ns(static_cast<double>(f.max_ns)));
  }
  if (p.ts_resolution_ns > 1)
    out += fmt::format("note        timestamps carry only {} resolution\n",
                       format_ns(static_cast<double>(p.ts_resolution_ns)));
  if (p.out_of_order)
    out += fmt::format(
        "note        out of order: {} (timestamps that went backwards; not counted as intervals)\n",
        p.out_of_order);
  for (const auto& w : p.windows) {
    out += fmt::format(
        "window {:<6} max {} packets -> peak {}, burst factor {:.1f}x mean ({} windows with "
        "packets)\n",
        format_ns(static_cast<double>(w.width_ns)), w.max_count, format_rate(w.peak_rate_pps),
        w.burst_factor, w.windows);
  }
  out += "\n@inter_arrival:\n";
  out += bar_chart(merged_iat_rows(p.hist));
  for (const auto& w : p.windows) {
    out += fmt::format("\n@packets_per_{}_window:\n", format_ns(static_cast<double>(w.width_ns)));
    out += bar_chart(merged_count_rows(w.count_hist));
  }
  return out;
}

}  // namespace dripgate::iat
