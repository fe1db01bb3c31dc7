#include "tools/iat/compare.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "tools/iat/units.h"

namespace dripgate::iat {

std::string render_compare(const Profile& a, const Profile& b, const std::string& name_a,
                           const std::string& name_b) {
  struct Line {
    std::string name;
    std::optional<double> va, vb;
    enum Kind { kCount, kNs, kRate, kRatio } kind;
  };
  std::vector<Line> lines;
  lines.push_back({"packets", double(a.packets), double(b.packets), Line::kCount});
  lines.push_back({"duration", a.duration_s * 1e9, b.duration_s * 1e9, Line::kNs});
  lines.push_back({"mean rate", a.mean_rate_pps, b.mean_rate_pps, Line::kRate});
  lines.push_back({"mean inter-arrival", a.mean_iat_ns, b.mean_iat_ns, Line::kNs});
  for (const auto& q : a.percentiles) {
    std::optional<double> vb;
    for (const auto& qb : b.percentiles)
      if (qb.q == q.q) vb = qb.value_ns;
    lines.push_back({quantile_name(q.q), q.value_ns, vb, Line::kNs});
  }
  lines.push_back({"max", a.max_iat_ns, b.max_iat_ns, Line::kNs});
  lines.push_back({"CV", a.cv, b.cv, Line::kRatio});
  std::vector<uint64_t> widths;
  for (const auto& w : a.windows) widths.push_back(w.width_ns);
  for (const auto& w : b.windows)
    if (std::find(widths.begin(), widths.end(), w.width_ns) == widths.end())
      widths.push_back(w.width_ns);
  for (uint64_t wd : widths) {
    auto find = [wd](const Profile& p) -> const WindowProfile* {
      for (const auto& w : p.windows)
        if (w.width_ns == wd) return &w;
      return nullptr;
    };
    const auto* wa = find(a);
    const auto* wb = find(b);
    auto get = [](const WindowProfile* w, auto f) -> std::optional<double> {
      if (!w) return std::nullopt;
      return f(*w);
    };
    std::string wn = format_ns(static_cast<double>(wd));
    lines.push_back({"max pkts/" + wn, get(wa, [](auto& w) { return double(w.max_count); }),
                     get(wb, [](auto& w) { return double(w.max_count); }), Line::kCount});
    lines.push_back({"peak rate/" + wn, get(wa, [](auto& w) { return w.peak_rate_pps; }),
                     get(wb, [](auto& w) { return w.peak_rate_pps; }), Line::kRate});
    lines.push_back({"burst factor/" + wn, get(wa, [](auto& w) { return w.burst_factor; }),
                     get(wb, [](auto& w) { return w.burst_factor; }), Line::kRatio});
  }
  auto fmtv = [](const std::optional<double>& v, Line::Kind k) -> std::string {
    if (!v) return "-";
    switch (k) {
      case Line::kCount:
        return fmt::format("{:.0f}", *v);
      case Line::kNs:
        return format_ns(*v);
      case Line::kRate:
        return format_rate(*v);
      case Line::kRatio:
        return fmt::format("{:.2f}", *v);
    }
    return "";
  };
  auto change = [](const std::optional<double>& va, const std::optional<double>& vb) {
    if (!va || !vb) return std::string("-");
    if (*va == *vb) return std::string("=");
    if (*va == 0) return std::string("new");
    double rel = (*vb - *va) / *va * 100.0;
    std::string s = fmt::format("{:+.1f}%", rel);
    double ratio = *vb / *va;
    if (ratio >= 2 || (ratio > 0 && ratio <= 0.5)) s += fmt::format(" (x{:.3g})", ratio);
    return s;
  };
  std::string out;
  out += fmt::format("A: {}  ({})\nB: {}  ({})\n\n", name_a, a.source, name_b, b.source);
  out += fmt::format("{:<22} {:>14} {:>14}   {}\n", "figure", "A", "B", "change B vs A");
  for (const auto& l : lines)
    out += fmt::format("{:<22} {:>14} {:>14}   {}\n", l.name, fmtv(l.va, l.kind),
                       fmtv(l.vb, l.kind), change(l.va, l.vb));
  if (a.cv_exact != b.cv_exact)
    out += "note: one CV is exact, the other an estimate from bucket midpoints\n";
  return out;
}

}  // namespace dripgate::iat
