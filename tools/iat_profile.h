// The inter-arrival analysis of dripgate-iat, independent of where the data comes from: the
// eBPF probe's maps (live) or a capture file (pcap). Both feed the same log-linear buckets of
// ebpf/iat.h, so a live profile and a pcap profile compare figure by figure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ebpf/iat.h"

namespace dripgate::iat {

inline constexpr uint64_t kDefaultWindows[] = {100'000, 1'000'000};  // 100 us, 1 ms

// "5s", "100us", "1.5ms", "250ns", "2m"; a bare number is seconds. Throws std::invalid_argument.
uint64_t parse_duration_ns(std::string_view text);
// "100us,1ms" -> {100000, 1000000}; at most IAT_WINDOWS widths (the probe's limit).
std::vector<uint64_t> parse_windows(std::string_view text);
// 3 significant digits with a unit: 1024 -> "1.02us", 1000000 -> "1ms".
std::string format_ns(double ns);
std::string format_rate(double per_second);

// What the probe's maps hold, copied out; the CLI converts the probe's Snapshot into this so
// the analysis needs no libbpf.
struct RawCounters {
  std::array<uint64_t, IAT_BUCKETS> hist{};
  iat_totals totals{};
  std::array<iat_window, IAT_WINDOWS> windows{};
  std::array<std::array<uint64_t, IAT_COUNT_BUCKETS>, IAT_WINDOWS> count_hist{};
};

// Exact moments of the inter-arrival values, available when every timestamp was seen (pcap).
struct ExactStats {
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  long double sum = 0;
  long double sum_sq = 0;
};

// Tolerances of the interval fit: MoonGen's pacing table (±64 to ±512 ns) plus ±1 us.
inline constexpr uint64_t kIntervalTolerances[] = {64, 128, 256, 512, 1000};

// How far each inter-arrival lies from an ideal interval (1/rate of a paced stream): the
// receiver-side counterpart of a pacer's departure error, so a shaper without a schedule (Linux
// tc) and one with (the dataplane) are judged alike. Exact: kept only when every timestamp was
// seen (pcap).
struct IntervalFit {
  uint64_t interval_ns = 0;
  uint64_t gaps = 0;
  // Gaps with |gap - interval| <= kIntervalTolerances[i].
  std::array<uint64_t, std::size(kIntervalTolerances)> within{};
  // |gap - interval| by nearest rank: the smallest deviation with at least that share of the
  // gaps at or below it (as the dataplane's departure-error percentiles).
  uint64_t p50_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  double rate_offset = 0;  // mean rate * interval - 1: the long-run rate error

  double share_within(size_t i) const {
    return gaps ? static_cast<double>(within[i]) / static_cast<double>(gaps) : 0.0;
  }
};

struct Percentile {
  double q = 0;              // 0.5, 0.9, 0.99, 0.999
  double value_ns = 0;       // interpolated linearly inside its bucket
  double resolution_ns = 0;  // width of that bucket
};

struct WindowProfile {
  uint64_t width_ns = 0;
  uint64_t max_count = 0;  // most packets seen in one window
  uint64_t windows = 0;    // windows that held at least one packet
  double peak_rate_pps = 0;
  double burst_factor = 0;  // peak_rate_pps / mean_rate_pps
  std::array<uint64_t, IAT_COUNT_BUCKETS> count_hist{};
};

struct Profile {
  std::string source;  // "pcap FILE [filter]" or "live IF ingress"
  std::string mode;    // "pcap" or "live"
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t capture_ns = 0;        // live: how long the probe was attached
  uint64_t ts_resolution_ns = 1;  // pcap: 1000 when the file only carries microseconds
  uint64_t out_of_order = 0;  // pcap: timestamps earlier than their predecessor (counted as 0 ns)
  uint64_t filtered_out = 0;  // live: packets the probe saw but the filter rejected
  std::array<uint64_t, IAT_BUCKETS> hist{};
  std::optional<ExactStats> exact;
  std::vector<WindowProfile> windows;
  std::optional<IntervalFit> interval;  // pcap with an ideal interval given

  // Derived by finish(); stored in JSON so compare needs no recomputation.
  uint64_t intervals = 0;
  double duration_s = 0;     // last - first
  double mean_rate_pps = 0;  // intervals / duration: the rate the mean inter-arrival implies
  double mean_iat_ns = 0;
  double cv = 0;
  bool cv_exact = false;
  std::vector<Percentile> percentiles;
  double max_iat_ns = 0;  // exact in pcap mode; else the upper bound of the highest bucket
  bool max_exact = false;

  // Computes the derived figures from the counters above.
  void finish();
};

// Feeds timestamps one by one (pcap mode): exact sums plus the probe's bucketing and windows.
class ProfileBuilder {
 public:
  explicit ProfileBuilder(std::vector<uint64_t> windows_ns);
  void add(uint64_t ts_ns, uint64_t bytes);
  // The resolution the source stamped with (1000 for a microsecond pcap); only reported.
  void set_ts_resolution_ns(uint64_t ns) { p_.ts_resolution_ns = ns; }
  // Also fits every gap to this ideal interval (IntervalFit); 0 = no fit. Keeps one deviation
  // per gap until finish(): exact percentiles, 8 bytes a packet.
  void set_interval_ns(uint64_t ns) { interval_ns_ = ns; }
  // Closes the open windows and computes the figures; the builder is spent afterwards.
  Profile finish(std::string source, std::string mode);

 private:
  struct WindowState {
    uint64_t start = 0;
    uint64_t count = 0;
  };
  Profile p_;
  std::vector<WindowState> state_;
  uint64_t prev_ = 0;
  uint64_t interval_ns_ = 0;
  std::vector<uint64_t> deviations_;
};

// Live mode: the probe's maps at the end of a run. capture_ns is how long it was attached.
Profile profile_from_counters(const RawCounters& raw, uint64_t capture_ns, std::string source);

// Bucket b's bounds in ns: [bucket_low(b), bucket_high(b)).
uint64_t bucket_low(unsigned b);
uint64_t bucket_high(unsigned b);
// Bounds of the count-histogram bucket b: [low, high).
uint64_t count_bucket_low(unsigned b);
uint64_t count_bucket_high(unsigned b);

// Percentile q in (0, 1] from the histogram, interpolated inside the bucket holding rank q*N.
Percentile percentile_from_hist(const std::array<uint64_t, IAT_BUCKETS>& hist, double q);

// The human report: figures plus bpftrace-style histograms merged to powers of two.
std::string render_text(const Profile& p);
nlohmann::json to_json(const Profile& p);
// Reads what to_json wrote; throws std::runtime_error naming the missing or bad field.
Profile from_json(const nlohmann::json& j);
std::string render_svg(const Profile& p);
// Figures of two profiles side by side with the change of each.
std::string render_compare(const Profile& a, const Profile& b, const std::string& name_a,
                           const std::string& name_b);

}  // namespace dripgate::iat
