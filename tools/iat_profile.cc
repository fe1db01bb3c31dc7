#include "tools/iat_profile.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace dripgate::iat {

namespace {

constexpr double kQuantiles[] = {0.5, 0.9, 0.99, 0.999};
constexpr int kBarWidth = 52;  // as bpftrace

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string quantile_name(double q) {
  if (q == 0.5) return "p50";
  if (q == 0.9) return "p90";
  if (q == 0.99) return "p99";
  if (q == 0.999) return "p99.9";
  return fmt::format("p{:g}", q * 100);
}

// One row of a merged (powers of two) histogram.
struct Row {
  std::string label;
  uint64_t count = 0;
};

std::string bar_chart(const std::vector<Row>& rows) {
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

// The groups between the first and the last non-empty one, as bpftrace prints.
template <class Group>
std::span<const Group> nonempty_span(const std::vector<Group>& groups) {
  auto nonempty = [](const Group& g) { return g.count != 0; };
  auto first = std::find_if(groups.begin(), groups.end(), nonempty);
  if (first == groups.end()) return {};
  auto last = std::find_if(groups.rbegin(), groups.rend(), nonempty).base();
  return {&*first, static_cast<size_t>(last - first)};
}

// Inter-arrival buckets merged to powers of two; only the span between the first and last
// non-empty row, as bpftrace prints.
std::vector<Row> merged_iat_rows(const std::array<uint64_t, IAT_BUCKETS>& hist) {
  struct Group {
    uint64_t low, high;  // high == 0: open-ended
    uint64_t count;
  };
  std::vector<Group> groups;
  groups.push_back({0, 1, hist[0]});
  groups.push_back({1, 2, hist[1]});
  groups.push_back({2, 4, hist[2] + hist[3]});
  groups.push_back({4, 8, hist[4] + hist[5] + hist[6] + hist[7]});
  for (unsigned g = IAT_SUB; g < IAT_BUCKETS; g += IAT_SUB) {
    uint64_t c = 0;
    for (unsigned b = g; b < g + IAT_SUB; ++b) c += hist[b];
    bool last = g + IAT_SUB >= IAT_BUCKETS;
    groups.push_back({bucket_low(g), last ? 0 : bucket_low(g + IAT_SUB), c});
  }
  std::vector<Row> rows;
  for (const auto& g : nonempty_span(groups)) {
    std::string label;
    if (g.high == g.low + 1)
      label = fmt::format("[{}]", format_ns(static_cast<double>(g.low)));
    else if (g.high == 0)
      label = fmt::format("[{}, ...)", format_ns(static_cast<double>(g.low)));
    else
      label = fmt::format("[{}, {})", format_ns(static_cast<double>(g.low)),
                          format_ns(static_cast<double>(g.high)));
    rows.push_back({label, g.count});
  }
  return rows;
}

std::vector<Row> merged_count_rows(const std::array<uint64_t, IAT_COUNT_BUCKETS>& hist) {
  struct Group {
    uint64_t low, high;
    uint64_t count;
  };
  std::vector<Group> groups;
  groups.push_back({0, 1, hist[0]});
  groups.push_back({1, 2, hist[1]});
  groups.push_back({2, 4, hist[2] + hist[3]});
  for (unsigned g = 4; g < IAT_COUNT_BUCKETS; g += 4) {
    uint64_t c = 0;
    for (unsigned b = g; b < g + 4; ++b) c += hist[b];
    bool last = g + 4 >= IAT_COUNT_BUCKETS;
    groups.push_back({count_bucket_low(g), last ? 0 : count_bucket_low(g + 4), c});
  }
  std::vector<Row> rows;
  for (const auto& g : nonempty_span(groups)) {
    std::string label = g.high == g.low + 1 ? fmt::format("[{}]", g.low)
                        : g.high == 0       ? fmt::format("[{}, ...)", g.low)
                                            : fmt::format("[{}, {})", g.low, g.high);
    rows.push_back({label, g.count});
  }
  return rows;
}

double bucket_mid(unsigned b) {
  return (static_cast<double>(bucket_low(b)) + static_cast<double>(bucket_high(b))) / 2.0;
}

uint64_t hist_total(const std::array<uint64_t, IAT_BUCKETS>& hist) {
  uint64_t n = 0;
  for (auto c : hist) n += c;
  return n;
}

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

uint64_t parse_duration_ns(std::string_view text) {
  std::string s = trim(text);
  if (s.empty()) throw std::invalid_argument("empty duration");
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v < 0 || !std::isfinite(v))
    throw std::invalid_argument(
        fmt::format("bad duration '{}' (expected e.g. 5s, 100us, 1.5ms)", s));
  std::string unit = trim(std::string_view(ptr, s.data() + s.size() - ptr));
  double mult;
  if (unit.empty() || unit == "s")
    mult = 1e9;
  else if (unit == "ns")
    mult = 1;
  else if (unit == "us" || unit == "\u00b5s")
    mult = 1e3;
  else if (unit == "ms")
    mult = 1e6;
  else if (unit == "m" || unit == "min")
    mult = 60e9;
  else if (unit == "h")
    mult = 3600e9;
  else
    throw std::invalid_argument(
        fmt::format("bad duration unit '{}' in '{}' (use ns, us, ms, s, m, h)", unit, s));
  double ns = v * mult;
  if (ns > 1e18) throw std::invalid_argument(fmt::format("duration '{}' is too long", s));
  return static_cast<uint64_t>(std::llround(ns));
}

std::vector<uint64_t> parse_windows(std::string_view text) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    uint64_t w = parse_duration_ns(text.substr(pos, comma - pos));
    if (w == 0) throw std::invalid_argument("a burst window must be longer than 0");
    out.push_back(w);
    pos = comma + 1;
  }
  if (out.size() > IAT_WINDOWS)
    throw std::invalid_argument(
        fmt::format("at most {} window widths, got {}", IAT_WINDOWS, out.size()));
  return out;
}

std::string format_ns(double ns) {
  if (!std::isfinite(ns)) return "inf";
  struct Unit {
    double scale;
    const char* name;
  };
  static constexpr Unit units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}, {1, "ns"}};
  for (const auto& u : units) {
    if (std::fabs(ns) >= u.scale || u.scale == 1) {
      double v = ns / u.scale;
      // 3 significant digits; "{:.3g}" would switch to exponents at 1000.
      std::string s = std::fabs(v) >= 100  ? fmt::format("{:.0f}", v)
                      : std::fabs(v) >= 10 ? fmt::format("{:.1f}", v)
                                           : fmt::format("{:.2f}", v);
      if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
      }
      return s + u.name;
    }
  }
  return "?";
}

std::string format_rate(double r) {
  if (r >= 1e6) return fmt::format("{:.3g}M/s", r / 1e6);
  if (r >= 1e3) return fmt::format("{:.3g}k/s", r / 1e3);
  return fmt::format("{:.3g}/s", r);
}

uint64_t bucket_low(unsigned b) {
  return iat_bucket_low(b);
}
uint64_t bucket_high(unsigned b) {
  return iat_bucket_low(b + 1);
}
uint64_t count_bucket_low(unsigned b) {
  return iat_count_bucket_low(b);
}
uint64_t count_bucket_high(unsigned b) {
  return iat_count_bucket_low(b + 1);
}

Percentile percentile_from_hist(const std::array<uint64_t, IAT_BUCKETS>& hist, double q) {
  Percentile p;
  p.q = q;
  uint64_t n = hist_total(hist);
  if (n == 0) return p;
  double rank = q * static_cast<double>(n);
  double cum = 0;
  for (unsigned b = 0; b < IAT_BUCKETS; ++b) {
    if (hist[b] == 0) continue;
    double c = static_cast<double>(hist[b]);
    if (cum + c >= rank) {
      double lo = static_cast<double>(bucket_low(b));
      double width = static_cast<double>(bucket_high(b) - bucket_low(b));
      p.value_ns = lo + (rank - cum) / c * width;
      p.resolution_ns = width;
      return p;
    }
    cum += c;
  }
  return p;  // unreachable: rank <= n
}

void Profile::finish() {
  intervals = hist_total(hist);
  duration_s = last_ns > first_ns ? static_cast<double>(last_ns - first_ns) / 1e9 : 0.0;
  mean_rate_pps = duration_s > 0 ? static_cast<double>(intervals) / duration_s : 0.0;
  percentiles.clear();
  for (double q : kQuantiles) percentiles.push_back(percentile_from_hist(hist, q));
  mean_iat_ns = 0;
  cv = 0;
  max_iat_ns = 0;
  if (intervals == 0) {
    cv_exact = exact.has_value();
    max_exact = exact.has_value();
    return;
  }
  if (exact) {
    long double n = static_cast<long double>(intervals);
    long double mean = exact->sum / n;
    long double var = exact->sum_sq / n - mean * mean;
    if (var < 0) var = 0;  // rounding
    mean_iat_ns = static_cast<double>(mean);
    cv = mean > 0 ? static_cast<double>(std::sqrt(var) / mean) : 0.0;
    cv_exact = true;
    max_iat_ns = static_cast<double>(exact->max_ns);
    max_exact = true;
  } else {
    // The sum of all intervals is last - first exactly; only the spread needs the buckets.
    double n = static_cast<double>(intervals);
    double mean = duration_s * 1e9 / n;
    double var = 0;
    for (unsigned b = 0; b < IAT_BUCKETS; ++b) {
      if (hist[b] == 0) continue;
      double d = bucket_mid(b) - mean;
      var += static_cast<double>(hist[b]) * d * d;
    }
    var /= n;
    mean_iat_ns = mean;
    cv = mean > 0 ? std::sqrt(var) / mean : 0.0;
    cv_exact = false;
    for (unsigned b = IAT_BUCKETS; b-- > 0;) {
      if (hist[b]) {
        max_iat_ns = static_cast<double>(bucket_high(b));
        break;
      }
    }
    max_exact = false;
  }
  for (auto& w : windows) {
    double width_s = static_cast<double>(w.width_ns) / 1e9;
    w.peak_rate_pps = static_cast<double>(w.max_count) / width_s;
    w.burst_factor = mean_rate_pps > 0 ? w.peak_rate_pps / mean_rate_pps : 0.0;
  }
}

ProfileBuilder::ProfileBuilder(std::vector<uint64_t> windows_ns) {
  for (uint64_t w : windows_ns) {
    WindowProfile wp;
    wp.width_ns = w;
    p_.windows.push_back(wp);
  }
  state_.resize(windows_ns.size());
  p_.exact = ExactStats{};
}

void ProfileBuilder::add(uint64_t ts_ns, uint64_t bytes) {
  uint64_t t = ts_ns;
  if (p_.packets == 0) {
    p_.first_ns = t;
  } else {
    uint64_t d = 0;
    if (t < prev_) {
      ++p_.out_of_order;
      t = prev_;  // keeps the windows and the span monotonic
    } else {
      d = t - prev_;
    }
    ++p_.hist[iat_bucket(d)];
    auto& e = *p_.exact;
    if (p_.packets == 1 || d < e.min_ns) e.min_ns = d;
    e.max_ns = std::max(e.max_ns, d);
    e.sum += static_cast<long double>(d);
    e.sum_sq += static_cast<long double>(d) * static_cast<long double>(d);
    if (interval_ns_) deviations_.push_back(d > interval_ns_ ? d - interval_ns_ : interval_ns_ - d);
  }
  ++p_.packets;
  p_.bytes += bytes;
  p_.last_ns = t;
  prev_ = t;
  // Windows tile the time axis from 0 (start = t - t % width), as the probe's do, so a live
  // profile and a pcap of the same traffic count the same windows.
  for (size_t i = 0; i < state_.size(); ++i) {
    auto& s = state_[i];
    auto& w = p_.windows[i];
    uint64_t start = t - t % w.width_ns;
    if (s.count == 0 || start > s.start) {
      if (s.count) {
        ++w.count_hist[iat_count_bucket(s.count)];
        ++w.windows;
      }
      s.start = start;
      s.count = 0;
    }
    ++s.count;
    w.max_count = std::max(w.max_count, s.count);
  }
}

Profile ProfileBuilder::finish(std::string source, std::string mode) {
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].count) {
      ++p_.windows[i].count_hist[iat_count_bucket(state_[i].count)];
      ++p_.windows[i].windows;
      state_[i].count = 0;
    }
  }
  p_.source = std::move(source);
  p_.mode = std::move(mode);
  p_.finish();
  if (interval_ns_) {
    IntervalFit f;
    f.interval_ns = interval_ns_;
    f.gaps = deviations_.size();
    std::sort(deviations_.begin(), deviations_.end());
    for (size_t i = 0; i < std::size(kIntervalTolerances); ++i)
      f.within[i] = static_cast<uint64_t>(
          std::upper_bound(deviations_.begin(), deviations_.end(), kIntervalTolerances[i]) -
          deviations_.begin());
    auto rank = [&](double q) {
      if (deviations_.empty()) return uint64_t{0};
      auto r = static_cast<size_t>(std::ceil(q * static_cast<double>(deviations_.size())));
      return deviations_[std::clamp<size_t>(r, 1, deviations_.size()) - 1];
    };
    f.p50_ns = rank(0.5);
    f.p99_ns = rank(0.99);
    f.p999_ns = rank(0.999);
    f.max_ns = deviations_.empty() ? 0 : deviations_.back();
    f.rate_offset =
        p_.mean_rate_pps > 0 ? p_.mean_rate_pps * static_cast<double>(interval_ns_) / 1e9 - 1 : 0;
    p_.interval = f;
    deviations_ = {};
  }
  return std::move(p_);
}

Profile profile_from_counters(const RawCounters& raw, uint64_t capture_ns, std::string source) {
  Profile p;
  p.source = std::move(source);
  p.mode = "live";
  p.packets = raw.totals.packets;
  p.bytes = raw.totals.bytes;
  p.first_ns = raw.totals.first_ns;
  p.last_ns = raw.totals.last_ns;
  p.filtered_out = raw.totals.filtered_out;
  p.capture_ns = capture_ns;
  p.hist = raw.hist;
  for (unsigned i = 0; i < IAT_WINDOWS; ++i) {
    const auto& rw = raw.windows[i];
    if (rw.width_ns == 0) continue;
    WindowProfile w;
    w.width_ns = rw.width_ns;
    w.max_count = std::max(rw.max_count, rw.cur_count);
    w.windows = rw.windows;
    w.count_hist = raw.count_hist[i];
    // The probe files a window when the next one opens; the last one is still open.
    if (rw.cur_count) {
      ++w.count_hist[iat_count_bucket(rw.cur_count)];
      ++w.windows;
    }
    p.windows.push_back(w);
  }
  p.finish();
  return p;
}

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
    out +=
        fmt::format("note        {} timestamps went backwards (counted as 0 ns)\n", p.out_of_order);
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

nlohmann::json to_json(const Profile& p) {
  using nlohmann::json;
  json j;
  j["format"] = "dripgate-iat profile 1";
  j["source"] = p.source;
  j["mode"] = p.mode;
  j["packets"] = p.packets;
  j["bytes"] = p.bytes;
  j["first_ns"] = p.first_ns;
  j["last_ns"] = p.last_ns;
  j["capture_ns"] = p.capture_ns;
  j["ts_resolution_ns"] = p.ts_resolution_ns;
  j["out_of_order"] = p.out_of_order;
  j["filtered_out"] = p.filtered_out;
  j["intervals"] = p.intervals;
  j["duration_s"] = p.duration_s;
  j["mean_rate_pps"] = p.mean_rate_pps;
  j["mean_iat_ns"] = p.mean_iat_ns;
  j["cv"] = p.cv;
  j["cv_exact"] = p.cv_exact;
  j["cv_method"] = p.cv_exact ? "exact sums" : "estimate from bucket midpoints";
  j["max_iat_ns"] = p.max_iat_ns;
  j["max_exact"] = p.max_exact;
  json ps = json::array();
  for (const auto& q : p.percentiles)
    ps.push_back({{"q", q.q},
                  {"name", quantile_name(q.q)},
                  {"value_ns", q.value_ns},
                  {"resolution_ns", q.resolution_ns}});
  j["percentiles"] = ps;
  if (p.exact) {
    j["exact"] = {{"min_ns", p.exact->min_ns},
                  {"max_ns", p.exact->max_ns},
                  {"sum_ns", static_cast<double>(p.exact->sum)},
                  {"sum_sq_ns2", static_cast<double>(p.exact->sum_sq)}};
  } else {
    j["exact"] = nullptr;
  }
  json buckets = json::array();
  for (unsigned b = 0; b < IAT_BUCKETS; ++b)
    if (p.hist[b]) buckets.push_back({bucket_low(b), bucket_high(b), p.hist[b]});
  j["histogram"] = {
      {"layout", fmt::format("log-linear ns, values below {} exact, then {} linear sub-buckets "
                             "per power of two (ebpf/iat.h)",
                             IAT_SUB, IAT_SUB)},
      {"columns", {"low_ns", "high_ns", "count"}},
      {"buckets", buckets}};
  json ws = json::array();
  for (const auto& w : p.windows) {
    json cb = json::array();
    for (unsigned b = 0; b < IAT_COUNT_BUCKETS; ++b)
      if (w.count_hist[b])
        cb.push_back({count_bucket_low(b), count_bucket_high(b), w.count_hist[b]});
    ws.push_back({{"width_ns", w.width_ns},
                  {"max_count", w.max_count},
                  {"windows", w.windows},
                  {"peak_rate_pps", w.peak_rate_pps},
                  {"burst_factor", w.burst_factor},
                  {"count_histogram", {{"columns", {"low", "high", "windows"}}, {"buckets", cb}}}});
  }
  j["windows"] = ws;
  if (p.interval) {
    const auto& f = *p.interval;
    json ij = {{"interval_ns", f.interval_ns}, {"gaps", f.gaps},       {"p50_ns", f.p50_ns},
               {"p99_ns", f.p99_ns},           {"p999_ns", f.p999_ns}, {"max_ns", f.max_ns},
               {"rate_offset", f.rate_offset}};
    for (size_t i = 0; i < std::size(kIntervalTolerances); ++i) {
      ij[fmt::format("within_{}ns", kIntervalTolerances[i])] = f.share_within(i);
      ij[fmt::format("count_within_{}ns", kIntervalTolerances[i])] = f.within[i];
    }
    j["interval"] = ij;
  } else {
    j["interval"] = nullptr;
  }
  return j;
}

namespace {

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.is_object() || !j.contains(name))
    throw std::runtime_error(fmt::format("profile JSON: missing field '{}'", name));
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(fmt::format("profile JSON: field '{}' has the wrong type", name));
  }
}

}  // namespace

Profile from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>().rfind("dripgate-iat profile", 0) != 0)
    throw std::runtime_error("not a dripgate-iat profile (field 'format' missing or different)");
  Profile p;
  p.source = field<std::string>(j, "source");
  p.mode = field<std::string>(j, "mode");
  p.packets = field<uint64_t>(j, "packets");
  p.bytes = field<uint64_t>(j, "bytes");
  p.first_ns = field<uint64_t>(j, "first_ns");
  p.last_ns = field<uint64_t>(j, "last_ns");
  p.capture_ns = field<uint64_t>(j, "capture_ns");
  p.ts_resolution_ns = field<uint64_t>(j, "ts_resolution_ns");
  p.out_of_order = field<uint64_t>(j, "out_of_order");
  p.filtered_out = field<uint64_t>(j, "filtered_out");
  p.intervals = field<uint64_t>(j, "intervals");
  p.duration_s = field<double>(j, "duration_s");
  p.mean_rate_pps = field<double>(j, "mean_rate_pps");
  p.mean_iat_ns = field<double>(j, "mean_iat_ns");
  p.cv = field<double>(j, "cv");
  p.cv_exact = field<bool>(j, "cv_exact");
  p.max_iat_ns = field<double>(j, "max_iat_ns");
  p.max_exact = field<bool>(j, "max_exact");
  for (const auto& q : field<nlohmann::json>(j, "percentiles")) {
    Percentile pc;
    pc.q = field<double>(q, "q");
    pc.value_ns = field<double>(q, "value_ns");
    pc.resolution_ns = field<double>(q, "resolution_ns");
    p.percentiles.push_back(pc);
  }
  const auto& ex = field<nlohmann::json>(j, "exact");
  if (!ex.is_null()) {
    ExactStats e;
    e.min_ns = field<uint64_t>(ex, "min_ns");
    e.max_ns = field<uint64_t>(ex, "max_ns");
    e.sum = field<double>(ex, "sum_ns");
    e.sum_sq = field<double>(ex, "sum_sq_ns2");
    p.exact = e;
  }
  const auto hist = field<nlohmann::json>(j, "histogram");
  for (const auto& row : field<nlohmann::json>(hist, "buckets")) {
    if (!row.is_array() || row.size() != 3)
      throw std::runtime_error("profile JSON: histogram bucket is not [low_ns, high_ns, count]");
    unsigned b = iat_bucket(row[0].get<uint64_t>());
    if (bucket_low(b) != row[0].get<uint64_t>())
      throw std::runtime_error(fmt::format(
          "profile JSON: histogram bucket low {} is not a bucket bound", row[0].get<uint64_t>()));
    p.hist[b] = row[2].get<uint64_t>();
  }
  for (const auto& wj : field<nlohmann::json>(j, "windows")) {
    WindowProfile w;
    w.width_ns = field<uint64_t>(wj, "width_ns");
    w.max_count = field<uint64_t>(wj, "max_count");
    w.windows = field<uint64_t>(wj, "windows");
    w.peak_rate_pps = field<double>(wj, "peak_rate_pps");
    w.burst_factor = field<double>(wj, "burst_factor");
    for (const auto& row :
         field<nlohmann::json>(field<nlohmann::json>(wj, "count_histogram"), "buckets")) {
      if (!row.is_array() || row.size() != 3)
        throw std::runtime_error("profile JSON: count bucket is not [low, high, windows]");
      w.count_hist[iat_count_bucket(row[0].get<uint64_t>())] = row[2].get<uint64_t>();
    }
    p.windows.push_back(w);
  }
  // Absent from profiles written before the interval fit existed.
  if (j.contains("interval") && !j["interval"].is_null()) {
    const auto& ij = j["interval"];
    IntervalFit f;
    f.interval_ns = field<uint64_t>(ij, "interval_ns");
    f.gaps = field<uint64_t>(ij, "gaps");
    for (size_t i = 0; i < std::size(kIntervalTolerances); ++i)
      f.within[i] =
          field<uint64_t>(ij, fmt::format("count_within_{}ns", kIntervalTolerances[i]).c_str());
    f.p50_ns = field<uint64_t>(ij, "p50_ns");
    f.p99_ns = field<uint64_t>(ij, "p99_ns");
    f.p999_ns = field<uint64_t>(ij, "p999_ns");
    f.max_ns = field<uint64_t>(ij, "max_ns");
    f.rate_offset = field<double>(ij, "rate_offset");
    p.interval = f;
  }
  return p;
}

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
