#include "tools/iat/svg.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "tools/iat/units.h"

namespace dripgate::iat {
namespace {

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_svg(const Profile& p) {
  constexpr double W = 960, left = 70, right = 20, plot_w = W - left - right;
  constexpr double h1_h = 260;
  const double panel_h = 170;
  const size_t nwin = p.windows.size();
  const double h1_top = 92 + 18 * static_cast<double>(nwin);
  const double H = h1_top + h1_h + 60 + static_cast<double>(nwin) * (panel_h + 60) + 10;
  std::ostringstream s;
  s << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      W, H, W, H);
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << fmt::format(
      "<text x=\"{}\" y=\"22\" font-size=\"16\" font-weight=\"bold\">dripgate-iat: {}</text>\n",
      left, xml_escape(p.source));
  std::string line1 = fmt::format("{} packets over {}, mean rate {}, CV {:.2f}{}", p.packets,
                                  format_ns(p.duration_s * 1e9), format_rate(p.mean_rate_pps), p.cv,
                                  p.cv_exact ? "" : " (estimate)");
  std::string line2;
  for (const auto& q : p.percentiles)
    line2 += fmt::format("{} {}   ", quantile_name(q.q), format_ns(q.value_ns));
  line2 += fmt::format("max {}{}", p.max_exact ? "" : "< ", format_ns(p.max_iat_ns));
  s << fmt::format("<text x=\"{}\" y=\"44\">{}</text>\n", left, xml_escape(line1));
  s << fmt::format("<text x=\"{}\" y=\"62\">{}</text>\n", left, xml_escape(line2));
  double y = 80;
  for (const auto& w : p.windows) {
    s << fmt::format(
        "<text x=\"{}\" y=\"{}\">{} window: max {} packets, peak {}, burst factor "
        "{:.1f}x the mean rate</text>\n",
        left, y, format_ns(static_cast<double>(w.width_ns)), w.max_count,
        format_rate(w.peak_rate_pps), w.burst_factor);
    y += 18;
  }

  // Panel 1: inter-arrival histogram at full resolution on a log-10 time axis.
  unsigned lo_b = IAT_BUCKETS, hi_b = 0;
  uint64_t maxc = 0;
  for (unsigned b = 0; b < IAT_BUCKETS; ++b) {
    if (p.hist[b]) {
      lo_b = std::min(lo_b, b);
      hi_b = b;
      maxc = std::max(maxc, p.hist[b]);
    }
  }
  s << fmt::format(
      "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">inter-arrival time (log axis), "
      "packets per bucket</text>\n",
      left, h1_top - 8);
  s << fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", left,
      h1_top, plot_w, h1_h);
  if (maxc > 0) {
    double dmin =
        std::floor(std::log10(std::max<double>(1, static_cast<double>(bucket_low(lo_b)))));
    double dmax = std::ceil(std::log10(static_cast<double>(bucket_high(hi_b))));
    if (dmax <= dmin) dmax = dmin + 1;
    auto x_of = [&](double ns) {
      double l = std::log10(std::max(ns, 1.0));
      return left + (l - dmin) / (dmax - dmin) * plot_w;
    };
    for (double d = dmin; d <= dmax; d += 1) {
      double x = x_of(std::pow(10, d));
      s << fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n",
                       x, h1_top, x, h1_top + h1_h);
      s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                       h1_top + h1_h + 16, format_ns(std::pow(10, d)));
    }
    for (unsigned b = lo_b; b <= hi_b; ++b) {
      if (!p.hist[b]) continue;
      double x0 = x_of(static_cast<double>(std::max<uint64_t>(bucket_low(b), 1)));
      double x1 = x_of(static_cast<double>(bucket_high(b)));
      // At least a pixel: a lone outlier is exactly what a reader looks for.
      double h =
          std::max(1.5, static_cast<double>(p.hist[b]) / static_cast<double>(maxc) * (h1_h - 10));
      s << fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"#3465a4\">"
          "<title>[{}, {}): {}</title></rect>\n",
          x0, h1_top + h1_h - h, std::max(x1 - x0, 1.0), h,
          format_ns(static_cast<double>(bucket_low(b))),
          format_ns(static_cast<double>(bucket_high(b))), p.hist[b]);
    }
    double label_y = h1_top + 14;  // staggered: p50 and p99 are often a few pixels apart
    for (const auto& q : p.percentiles) {
      if (q.q != 0.5 && q.q != 0.99) continue;
      double x = x_of(q.value_ns);
      const double ly = label_y;
      label_y += 16;
      s << fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#cc0000\" "
          "stroke-dasharray=\"4 3\"/>\n<text x=\"{:.1f}\" y=\"{}\" fill=\"#cc0000\">{}</text>\n",
          x, h1_top, x, h1_top + h1_h, x + 3, ly, quantile_name(q.q));
    }
    s << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 6,
                     h1_top + 12, maxc);
    s << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n", left - 6,
                     h1_top + h1_h);
  } else {
    s << fmt::format("<text x=\"{}\" y=\"{}\">no inter-arrival data</text>\n", left + 10,
                     h1_top + 30);
  }

  // One panel per burst window: how many windows held how many packets.
  double top = h1_top + h1_h + 60;
  for (const auto& w : p.windows) {
    auto rows = merged_count_rows(w.count_hist);
    uint64_t m = 0;
    for (const auto& r : rows) m = std::max(m, r.count);
    s << fmt::format(
        "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">packets per {} window "
        "(number of windows; max {} packets = {})</text>\n",
        left, top - 8, format_ns(static_cast<double>(w.width_ns)), w.max_count,
        format_rate(w.peak_rate_pps));
    s << fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
        left, top, plot_w, panel_h);
    if (!rows.empty()) {
      double slot = plot_w / static_cast<double>(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        double h =
            m ? static_cast<double>(rows[i].count) / static_cast<double>(m) * (panel_h - 20) : 0;
        if (rows[i].count) h = std::max(h, 1.5);
        double x = left + static_cast<double>(i) * slot;
        s << fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#73a946\">"
            "<title>{}: {} windows</title></rect>\n",
            x + slot * 0.1, top + panel_h - h, slot * 0.8, h, rows[i].label, rows[i].count);
        if (rows[i].count)
          s << fmt::format(
              "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
              "font-size=\"10\">{}</text>\n",
              x + slot / 2, top + panel_h - h - 3, rows[i].count);
        s << fmt::format(
            "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}"
            "</text>\n",
            x + slot / 2, top + panel_h + 14, xml_escape(rows[i].label));
      }
    }
    top += panel_h + 60;
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace dripgate::iat
