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

constexpr double kWidth = 960, kLeft = 70, kRight = 20, kPlotW = kWidth - kLeft - kRight;
constexpr double kHistH = 260;   // the inter-arrival panel
constexpr double kPanelH = 170;  // each burst-window panel
constexpr double kLineH = 18;    // a line of the summary

// Title and summary lines: the figures a reader wants before the charts.
void summary(std::ostringstream& s, const Profile& p, double H) {
  s << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, H, kWidth, H);
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << fmt::format(
      "<text x=\"{}\" y=\"22\" font-size=\"16\" font-weight=\"bold\">dripgate-iat: {}</text>\n",
      kLeft, xml_escape(p.source));
  std::string line1 = fmt::format("{} packets over {}, mean rate {}, CV {:.2f}{}", p.packets,
                                  format_ns(p.duration_s * 1e9), format_rate(p.mean_rate_pps), p.cv,
                                  p.cv_exact ? "" : " (estimate)");
  std::string line2;
  for (const auto& q : p.percentiles)
    line2 += fmt::format("{} {}   ", quantile_name(q.q), format_ns(q.value_ns));
  line2 += fmt::format("max {}{}", p.max_exact ? "" : "< ", format_ns(p.max_iat_ns));
  s << fmt::format("<text x=\"{}\" y=\"44\">{}</text>\n", kLeft, xml_escape(line1));
  s << fmt::format("<text x=\"{}\" y=\"62\">{}</text>\n", kLeft, xml_escape(line2));
  double y = 80;
  for (const auto& w : p.windows) {
    s << fmt::format(
        "<text x=\"{}\" y=\"{}\">{} window: max {} packets, peak {}, burst factor "
        "{:.1f}x the mean rate</text>\n",
        kLeft, y, format_ns(static_cast<double>(w.width_ns)), w.max_count,
        format_rate(w.peak_rate_pps), w.burst_factor);
    y += kLineH;
  }
}

// The inter-arrival histogram at full resolution on a log-10 time axis, p50 and p99 marked.
void histogram_panel(std::ostringstream& s, const Profile& p, double top) {
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
      kLeft, top - 8);
  s << fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", kLeft,
      top, kPlotW, kHistH);
  if (maxc > 0) {
    double dmin =
        std::floor(std::log10(std::max<double>(1, static_cast<double>(bucket_low(lo_b)))));
    double dmax = std::ceil(std::log10(static_cast<double>(bucket_high(hi_b))));
    if (dmax <= dmin) dmax = dmin + 1;
    auto x_of = [&](double ns) {
      double l = std::log10(std::max(ns, 1.0));
      return kLeft + (l - dmin) / (dmax - dmin) * kPlotW;
    };
    for (double d = dmin; d <= dmax; d += 1) {
      double x = x_of(std::pow(10, d));
      s << fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n",
                       x, top, x, top + kHistH);
      s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                       top + kHistH + 16, format_ns(std::pow(10, d)));
    }
    for (unsigned b = lo_b; b <= hi_b; ++b) {
      if (!p.hist[b]) continue;
      double x0 = x_of(static_cast<double>(std::max<uint64_t>(bucket_low(b), 1)));
      double x1 = x_of(static_cast<double>(bucket_high(b)));
      // At least a pixel: a lone outlier is exactly what a reader looks for.
      double h =
          std::max(1.5, static_cast<double>(p.hist[b]) / static_cast<double>(maxc) * (kHistH - 10));
      s << fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"#3465a4\">"
          "<title>[{}, {}): {}</title></rect>\n",
          x0, top + kHistH - h, std::max(x1 - x0, 1.0), h,
          format_ns(static_cast<double>(bucket_low(b))),
          format_ns(static_cast<double>(bucket_high(b))), p.hist[b]);
    }
    double label_y = top + 14;  // staggered: p50 and p99 are often a few pixels apart
    for (const auto& q : p.percentiles) {
      if (q.q != 0.5 && q.q != 0.99) continue;
      double x = x_of(q.value_ns);
      const double ly = label_y;
      label_y += 16;
      s << fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#cc0000\" "
          "stroke-dasharray=\"4 3\"/>\n<text x=\"{:.1f}\" y=\"{}\" fill=\"#cc0000\">{}</text>\n",
          x, top, x, top + kHistH, x + 3, ly, quantile_name(q.q));
    }
    s << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft - 6, top + 12,
                     maxc);
    s << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\n", kLeft - 6,
                     top + kHistH);
  } else {
    s << fmt::format("<text x=\"{}\" y=\"{}\">no inter-arrival data</text>\n", kLeft + 10,
                     top + 30);
  }
}

// How many windows of one width held how many packets.
void window_panel(std::ostringstream& s, const WindowProfile& w, double top) {
  auto rows = merged_count_rows(w.count_hist);
  uint64_t m = 0;
  for (const auto& r : rows) m = std::max(m, r.count);
  s << fmt::format(
      "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">packets per {} window "
      "(number of windows; max {} packets = {})</text>\n",
      kLeft, top - 8, format_ns(static_cast<double>(w.width_ns)), w.max_count,
      format_rate(w.peak_rate_pps));
  s << fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", kLeft,
      top, kPlotW, kPanelH);
  if (!rows.empty()) {
    double slot = kPlotW / static_cast<double>(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      double h =
          m ? static_cast<double>(rows[i].count) / static_cast<double>(m) * (kPanelH - 20) : 0;
      if (rows[i].count) h = std::max(h, 1.5);
      double x = kLeft + static_cast<double>(i) * slot;
      s << fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#73a946\">"
          "<title>{}: {} windows</title></rect>\n",
          x + slot * 0.1, top + kPanelH - h, slot * 0.8, h, rows[i].label, rows[i].count);
      if (rows[i].count)
        s << fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
            "font-size=\"10\">{}</text>\n",
            x + slot / 2, top + kPanelH - h - 3, rows[i].count);
      s << fmt::format(
          "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}"
          "</text>\n",
          x + slot / 2, top + kPanelH + 14, xml_escape(rows[i].label));
    }
  }
}

}  // namespace

std::string render_svg(const Profile& p) {
  const double nwin = static_cast<double>(p.windows.size());
  const double hist_top = 92 + kLineH * nwin;
  const double H = hist_top + kHistH + 60 + nwin * (kPanelH + 60) + 10;
  std::ostringstream s;
  summary(s, p, H);
  histogram_panel(s, p, hist_top);
  double top = hist_top + kHistH + 60;
  for (const auto& w : p.windows) {
    window_panel(s, w, top);
    top += kPanelH + 60;
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace dripgate::iat
