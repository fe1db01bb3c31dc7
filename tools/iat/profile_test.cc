#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "tools/iat/builder.h"
#include "tools/iat/compare.h"
#include "tools/iat/json.h"
#include "tools/iat/svg.h"
#include "tools/iat/text.h"
#include "tools/iat/units.h"

namespace dripgate::iat {
namespace {

constexpr uint64_t kBase = 1'700'000'000ull * 1'000'000'000ull;  // on the 1 ms grid

TEST(ParseDuration, UnitsAndErrors) {
  EXPECT_EQ(parse_duration_ns("5s"), 5'000'000'000ull);
  EXPECT_EQ(parse_duration_ns("100us"), 100'000ull);
  EXPECT_EQ(parse_duration_ns("1.5ms"), 1'500'000ull);
  EXPECT_EQ(parse_duration_ns("250ns"), 250ull);
  EXPECT_EQ(parse_duration_ns("2"), 2'000'000'000ull);
  EXPECT_EQ(parse_duration_ns("2m"), 120'000'000'000ull);
  EXPECT_THROW(parse_duration_ns(""), std::invalid_argument);
  EXPECT_THROW(parse_duration_ns("fast"), std::invalid_argument);
  EXPECT_THROW(parse_duration_ns("5 parsecs"), std::invalid_argument);
  EXPECT_THROW(parse_duration_ns("-1s"), std::invalid_argument);
}

TEST(ParseWindows, ListAndLimit) {
  EXPECT_EQ(parse_windows("100us,1ms"), (std::vector<uint64_t>{100'000, 1'000'000}));
  EXPECT_EQ(parse_windows("10ms"), (std::vector<uint64_t>{10'000'000}));
  EXPECT_EQ(parse_windows("100us,1ms,10ms"),
            (std::vector<uint64_t>{100'000, 1'000'000, 10'000'000}));
  EXPECT_THROW(parse_windows("1ms,2ms,3ms,4ms"), std::invalid_argument);
  EXPECT_THROW(parse_windows("0"), std::invalid_argument);
  EXPECT_THROW(parse_windows("1ms,"), std::invalid_argument);
}

TEST(FormatNs, ThreeSignificantDigits) {
  EXPECT_EQ(format_ns(0), "0ns");
  EXPECT_EQ(format_ns(512), "512ns");
  EXPECT_EQ(format_ns(1024), "1.02us");
  EXPECT_EQ(format_ns(1'000'000), "1ms");
  EXPECT_EQ(format_ns(131'072), "131us");
  EXPECT_EQ(format_ns(16'384), "16.4us");
  EXPECT_EQ(format_ns(2.5e9), "2.5s");
}

TEST(Buckets, BoundsTileTheAxis) {
  for (unsigned b = 0; b + 1 < IAT_BUCKETS; ++b) {
    EXPECT_EQ(bucket_high(b), bucket_low(b + 1));
    EXPECT_EQ(iat_bucket(bucket_low(b)), b);
    EXPECT_EQ(iat_bucket(bucket_high(b) - 1), b);
  }
}

TEST(Percentile, InterpolatesInsideTheBucketAndGivesItsWidth) {
  std::array<uint64_t, IAT_BUCKETS> h{};
  const unsigned b1 = iat_bucket(1000), b2 = iat_bucket(1'000'000);
  h[b1] = 90;
  h[b2] = 10;
  const double w1 = double(bucket_high(b1) - bucket_low(b1));
  const double w2 = double(bucket_high(b2) - bucket_low(b2));
  auto p50 = percentile_from_hist(h, 0.5);
  EXPECT_DOUBLE_EQ(p50.value_ns, double(bucket_low(b1)) + 50.0 / 90.0 * w1);
  EXPECT_DOUBLE_EQ(p50.resolution_ns, w1);
  EXPECT_EQ(w1, 64.0);  // 1000 ns lies in [960, 1024)
  auto p99 = percentile_from_hist(h, 0.99);
  EXPECT_DOUBLE_EQ(p99.value_ns, double(bucket_low(b2)) + 9.0 / 10.0 * w2);
  EXPECT_DOUBLE_EQ(p99.resolution_ns, w2);
  auto p90 = percentile_from_hist(h, 0.9);  // rank 90 is the last value of the first bucket
  EXPECT_DOUBLE_EQ(p90.value_ns, double(bucket_high(b1)));
  std::array<uint64_t, IAT_BUCKETS> empty{};
  EXPECT_EQ(percentile_from_hist(empty, 0.5).value_ns, 0.0);
}

// 10 bursts, one per millisecond; each burst 50 packets 2 us apart, starting on the ms grid.
std::vector<uint64_t> burst_pattern() {
  std::vector<uint64_t> ts;
  for (uint64_t b = 0; b < 10; ++b)
    for (uint64_t j = 0; j < 50; ++j) ts.push_back(kBase + b * 1'000'000 + j * 2'000);
  return ts;
}

TEST(ProfileBuilder, ExactFiguresOfAKnownPattern) {
  ProfileBuilder pb({100'000, 1'000'000});
  auto ts = burst_pattern();
  for (auto t : ts) pb.add(t, 60);
  Profile p = pb.finish("test", "pcap");

  EXPECT_EQ(p.packets, 500u);
  EXPECT_EQ(p.bytes, 500u * 60);
  EXPECT_EQ(p.intervals, 499u);
  EXPECT_EQ(p.hist[iat_bucket(2'000)], 490u);
  EXPECT_EQ(p.hist[iat_bucket(902'000)], 9u);
  EXPECT_EQ(std::accumulate(p.hist.begin(), p.hist.end(), uint64_t{0}), 499u);

  const double span = 9'098'000;
  EXPECT_DOUBLE_EQ(p.duration_s, span / 1e9);
  EXPECT_DOUBLE_EQ(p.mean_rate_pps, 499 / (span / 1e9));
  EXPECT_NEAR(p.mean_iat_ns, span / 499, 1e-6);

  // CV from the intervals themselves.
  double mean = span / 499, var = 0;
  for (size_t i = 1; i < ts.size(); ++i) var += std::pow(double(ts[i] - ts[i - 1]) - mean, 2);
  var /= 499;
  EXPECT_TRUE(p.cv_exact);
  EXPECT_NEAR(p.cv, std::sqrt(var) / mean, 1e-9);
  EXPECT_TRUE(p.max_exact);
  EXPECT_EQ(p.max_iat_ns, 902'000.0);
  ASSERT_TRUE(p.exact);
  EXPECT_EQ(p.exact->min_ns, 2'000u);

  ASSERT_EQ(p.percentiles.size(), 4u);
  const unsigned bs = iat_bucket(2'000), bl = iat_bucket(902'000);
  const double ws = double(bucket_high(bs) - bucket_low(bs));
  const double wl = double(bucket_high(bl) - bucket_low(bl));
  EXPECT_DOUBLE_EQ(p.percentiles[0].value_ns, double(bucket_low(bs)) + 249.5 / 490 * ws);
  EXPECT_DOUBLE_EQ(p.percentiles[1].value_ns, double(bucket_low(bs)) + 0.9 * 499 / 490 * ws);
  EXPECT_DOUBLE_EQ(p.percentiles[2].value_ns, double(bucket_low(bl)) + (0.99 * 499 - 490) / 9 * wl);
  EXPECT_DOUBLE_EQ(p.percentiles[2].resolution_ns, wl);

  ASSERT_EQ(p.windows.size(), 2u);
  for (const auto& w : p.windows) {
    EXPECT_EQ(w.max_count, 50u) << w.width_ns;
    EXPECT_EQ(w.windows, 10u);
    EXPECT_EQ(w.count_hist[iat_count_bucket(50)], 10u);
    EXPECT_DOUBLE_EQ(w.peak_rate_pps, 50.0 / (double(w.width_ns) / 1e9));
    EXPECT_DOUBLE_EQ(w.burst_factor, w.peak_rate_pps / p.mean_rate_pps);
  }
  EXPECT_DOUBLE_EQ(p.windows[0].peak_rate_pps, 500'000.0);
  EXPECT_DOUBLE_EQ(p.windows[1].peak_rate_pps, 50'000.0);
  EXPECT_EQ(p.ts_resolution_ns, 1u);
}

TEST(ProfileBuilder, WindowsFollowTheGridLikeTheProbe) {
  // 10 packets 1 us apart from 95 us: the 100 us grid splits them 5 + 5.
  ProfileBuilder pb({100'000});
  for (uint64_t j = 0; j < 10; ++j) pb.add(kBase + 95'000 + j * 1'000, 100);
  Profile p = pb.finish("grid", "pcap");
  EXPECT_EQ(p.windows[0].max_count, 5u);
  EXPECT_EQ(p.windows[0].windows, 2u);
  EXPECT_EQ(p.windows[0].count_hist[iat_count_bucket(5)], 2u);
}

TEST(ProfileBuilder, BackwardsTimestampsAreCountedApart) {
  ProfileBuilder pb({});
  pb.add(kBase + 1000, 1);
  pb.add(kBase + 500, 1);
  pb.add(kBase + 2000, 1);
  Profile p = pb.finish("ooo", "pcap");
  EXPECT_EQ(p.out_of_order, 1u);
  EXPECT_EQ(p.hist[0], 0u);
  EXPECT_EQ(p.hist[iat_bucket(1000)], 1u);
  EXPECT_EQ(p.intervals, 1u);
  EXPECT_EQ(p.exact->min_ns, 1000u);
  EXPECT_EQ(p.last_ns, kBase + 2000);
}

TEST(ProfileBuilder, PercentilesStayWithinTheExactExtremes) {
  // Equal stamps are real 0 ns gaps; bucket [0, 1) must not interpolate them to 0.5 ns.
  ProfileBuilder pb({});
  for (int j = 0; j < 4; ++j) pb.add(kBase, 1);
  Profile p = pb.finish("same", "pcap");
  EXPECT_EQ(p.intervals, 3u);
  for (const auto& q : p.percentiles) EXPECT_EQ(q.value_ns, 0.0) << quantile_name(q.q);
  EXPECT_EQ(p.max_iat_ns, 0.0);
}

TEST(ProfileBuilder, CoarseTimestampsAreNoted) {
  ProfileBuilder pb({});
  pb.set_ts_resolution_ns(1000);
  for (uint64_t j = 0; j < 5; ++j) pb.add(kBase + j * 7'000, 1);
  Profile p = pb.finish("us", "pcap");
  EXPECT_EQ(p.ts_resolution_ns, 1000u);
  EXPECT_NE(render_text(p).find("timestamps carry only 1us resolution"), std::string::npos);
}

TEST(ProfileBuilder, FewPacketsGiveNoFigures) {
  ProfileBuilder pb({100'000});
  pb.add(kBase, 10);
  Profile p = pb.finish("one", "pcap");
  EXPECT_EQ(p.packets, 1u);
  EXPECT_EQ(p.intervals, 0u);
  EXPECT_EQ(p.mean_rate_pps, 0.0);
  EXPECT_EQ(p.windows[0].burst_factor, 0.0);
  EXPECT_NE(render_text(p).find("fewer than 2 packets"), std::string::npos);
}

// 1000 gaps around an ideal 2 us, with |deviations| placed on and beside the tolerances:
// 900 x 0, 25 x +64, 25 x -64, 10 x +128, 10 x -100, 15 x +200, 10 x -300, 4 x +700, 1 x +5000.
std::vector<uint64_t> jittered_stream() {
  std::vector<int64_t> devs;
  auto add = [&](int n, int64_t d) { devs.insert(devs.end(), n, d); };
  add(900, 0);
  add(25, 64);
  add(25, -64);
  add(10, 128);
  add(10, -100);
  add(15, 200);
  add(10, -300);
  add(4, 700);
  add(1, 5000);
  // Spread the outliers through the stream: the figures must not depend on the order.
  for (size_t i = 0; i < devs.size(); i += 7) std::swap(devs[i], devs[devs.size() - 1 - i / 7]);
  std::vector<uint64_t> ts{kBase};
  for (int64_t d : devs) ts.push_back(ts.back() + static_cast<uint64_t>(2'000 + d));
  return ts;
}

TEST(IntervalFit, ExactSharesAndPercentilesOfTheDeviation) {
  ProfileBuilder pb({});
  pb.set_interval_ns(2'000);
  for (auto t : jittered_stream()) pb.add(t, 60);
  Profile p = pb.finish("jitter", "pcap");
  ASSERT_TRUE(p.interval);
  const auto& f = *p.interval;
  EXPECT_EQ(f.interval_ns, 2'000u);
  EXPECT_EQ(f.gaps, 1000u);
  // |gap - interval| <= tolerance, bounds included: 64 and 128 count, 65..100 is inside 128.
  EXPECT_EQ(f.within, (std::array<uint64_t, 5>{950, 970, 985, 995, 999}));
  EXPECT_DOUBLE_EQ(f.share_within(2), 0.985);
  // Sorted: 900 x 0, 50 x 64, 10 x 100, 10 x 128, 15 x 200, 10 x 300, 4 x 700, 1 x 5000.
  EXPECT_EQ(f.p50_ns, 0u);
  EXPECT_EQ(f.p99_ns, 300u);   // rank 990
  EXPECT_EQ(f.p999_ns, 700u);  // rank 999
  EXPECT_EQ(f.max_ns, 5'000u);
  // The signed deviations add up to +8080 ns over 1000 gaps: the mean rate is that much slow.
  EXPECT_NEAR(f.rate_offset, 2'000'000.0 / 2'008'080.0 - 1, 1e-12);
  auto text = render_text(p);
  EXPECT_NE(text.find("±64ns 95.000%  ±128ns 97.000%  ±256ns 98.500%  ±512ns 99.500%  ±1us "
                      "99.900%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("p99 300ns  p99.9 700ns  max 5us (exact)"), std::string::npos) << text;
  EXPECT_NE(text.find("ideal 2us (500k/s): mean rate -0.4024% of it"), std::string::npos) << text;
}

TEST(IntervalFit, AbsentUnlessAsked) {
  ProfileBuilder pb({});
  for (auto t : jittered_stream()) pb.add(t, 60);
  Profile p = pb.finish("jitter", "pcap");
  EXPECT_FALSE(p.interval);
  EXPECT_TRUE(to_json(p)["interval"].is_null());
  EXPECT_EQ(render_text(p).find("ideal"), std::string::npos);
}

TEST(IntervalFit, BackwardsTimestampIsNoGap) {
  ProfileBuilder pb({});
  pb.set_interval_ns(1'000);
  pb.add(kBase + 1000, 1);
  pb.add(kBase + 500, 1);   // out of order: not a gap, not fitted
  pb.add(kBase + 2000, 1);  // 1000 ns after the latest stamp: on time
  Profile p = pb.finish("ooo", "pcap");
  EXPECT_EQ(p.interval->gaps, 1u);
  EXPECT_EQ(p.interval->within, (std::array<uint64_t, 5>{1, 1, 1, 1, 1}));
  EXPECT_EQ(p.interval->max_ns, 0u);
}

ebpf::Counters live_counters() {
  ebpf::Counters raw;
  raw.hist[iat_bucket(2'000)] = 490;
  raw.hist[iat_bucket(902'000)] = 9;
  raw.totals.packets = 500;
  raw.totals.bytes = 30'000;
  raw.totals.first_ns = 1'000'000'000;
  raw.totals.last_ns = 1'000'000'000 + 9'098'000;
  raw.totals.filtered_out = 7;
  raw.windows[0] = {100'000, 0, 50, 50, 9};  // 9 closed windows, the 10th still open
  raw.windows[1] = {1'000'000, 0, 50, 50, 9};
  raw.count_hist[0][iat_count_bucket(50)] = 9;
  raw.count_hist[1][iat_count_bucket(50)] = 9;
  return raw;
}

TEST(LiveProfile, FromCountersMarksEstimates) {
  Profile p = profile_from_counters(live_counters(), 5'000'000'000, "live veth0 ingress");
  EXPECT_EQ(p.mode, "live");
  EXPECT_EQ(p.packets, 500u);
  EXPECT_EQ(p.filtered_out, 7u);
  EXPECT_FALSE(p.cv_exact);
  EXPECT_FALSE(p.max_exact);
  // The mean is exact even live: the intervals add up to last - first.
  EXPECT_NEAR(p.mean_iat_ns, 9'098'000.0 / 499, 1e-6);
  EXPECT_EQ(p.max_iat_ns, double(bucket_high(iat_bucket(902'000))));
  // The estimate of the CV lands near the exact one (bucket widths are 1/8 of an octave).
  ProfileBuilder pb({});
  for (auto t : burst_pattern()) pb.add(t, 60);
  double exact_cv = pb.finish("x", "pcap").cv;
  EXPECT_NEAR(p.cv, exact_cv, exact_cv * 0.1);
  // The open window is filed with the closed ones.
  EXPECT_EQ(p.windows[0].windows, 10u);
  EXPECT_EQ(p.windows[0].count_hist[iat_count_bucket(50)], 10u);
  EXPECT_EQ(p.windows[0].max_count, 50u);
  EXPECT_DOUBLE_EQ(p.windows[0].burst_factor, 500'000.0 / p.mean_rate_pps);
  auto text = render_text(p);
  EXPECT_NE(text.find("estimate from bucket midpoints"), std::string::npos);
  EXPECT_NE(text.find("filtered out 7"), std::string::npos);
}

TEST(Render, TextHistogramMergesToPowersOfTwo) {
  ProfileBuilder pb({100'000, 1'000'000});
  for (auto t : burst_pattern()) pb.add(t, 60);
  std::string text = render_text(pb.finish("pcap bursts.pcap", "pcap"));
  // 2000 ns lies in [1024, 2048), 902 us in [524288, 1048576): the bar of the fullest is full.
  EXPECT_NE(text.find("[1.02us, 2.05us)         490 |" + std::string(52, '@') + "|"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[524us, 1.05ms)            9 |@ "), std::string::npos) << text;
  // Empty rows between the two modes are printed, as bpftrace does.
  EXPECT_NE(text.find("[2.05us, 4.1us)            0 |"), std::string::npos) << text;
  EXPECT_NE(text.find("@packets_per_100us_window:"), std::string::npos);
  EXPECT_NE(text.find("[32, 64)"), std::string::npos);
  EXPECT_NE(text.find("max 50 packets -> peak 500k/s"), std::string::npos) << text;
}

TEST(Json, RoundTripKeepsEveryFigure) {
  ProfileBuilder pb({100'000, 1'000'000});
  for (auto t : burst_pattern()) pb.add(t, 60);
  Profile a = pb.finish("pcap bursts.pcap", "pcap");
  nlohmann::json j = to_json(a);
  Profile b = from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(b.hist, a.hist);
  EXPECT_EQ(b.packets, a.packets);
  EXPECT_EQ(b.source, a.source);
  EXPECT_DOUBLE_EQ(b.cv, a.cv);
  EXPECT_EQ(b.cv_exact, a.cv_exact);
  ASSERT_EQ(b.percentiles.size(), a.percentiles.size());
  for (size_t i = 0; i < a.percentiles.size(); ++i)
    EXPECT_DOUBLE_EQ(b.percentiles[i].value_ns, a.percentiles[i].value_ns);
  ASSERT_EQ(b.windows.size(), 2u);
  EXPECT_EQ(b.windows[0].count_hist, a.windows[0].count_hist);
  EXPECT_DOUBLE_EQ(b.windows[1].burst_factor, a.windows[1].burst_factor);
  // Raw buckets at full resolution, with their bounds.
  auto buckets = j["histogram"]["buckets"];
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0][0].get<uint64_t>(), bucket_low(iat_bucket(2000)));
  EXPECT_EQ(buckets[0][2].get<uint64_t>(), 490u);
}

TEST(Json, RoundTripKeepsTheIntervalFit) {
  ProfileBuilder pb({});
  pb.set_interval_ns(2'000);
  for (auto t : jittered_stream()) pb.add(t, 60);
  Profile a = pb.finish("jitter", "pcap");
  nlohmann::json j = to_json(a);
  EXPECT_DOUBLE_EQ(j["interval"]["within_256ns"].get<double>(), 0.985);
  EXPECT_EQ(j["interval"]["count_within_1000ns"].get<uint64_t>(), 999u);
  EXPECT_EQ(j["interval"]["p999_ns"].get<uint64_t>(), 700u);
  Profile b = from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(b.interval);
  EXPECT_EQ(b.interval->within, a.interval->within);
  EXPECT_EQ(b.interval->gaps, 1000u);
  EXPECT_EQ(b.interval->p99_ns, 300u);
  EXPECT_EQ(b.interval->max_ns, 5'000u);
  EXPECT_DOUBLE_EQ(b.interval->rate_offset, a.interval->rate_offset);
  // Profiles saved before the fit existed still load.
  j.erase("interval");
  EXPECT_FALSE(from_json(j).interval);
}

TEST(Json, BadInputNamesTheField) {
  EXPECT_THROW(from_json(nlohmann::json::parse(R"({"a":1})")), std::runtime_error);
  ProfileBuilder pb({});
  pb.add(kBase, 1);
  pb.add(kBase + 10, 1);
  auto j = to_json(pb.finish("x", "pcap"));
  j.erase("packets");
  try {
    from_json(j);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'packets'"), std::string::npos);
  }
}

TEST(Compare, SideBySideWithChange) {
  ProfileBuilder bursty({100'000, 1'000'000});
  for (auto t : burst_pattern()) bursty.add(t, 60);
  Profile a = bursty.finish("bursty", "pcap");
  // The same 500 packets dripped evenly over the same span.
  ProfileBuilder even({100'000, 1'000'000});
  for (uint64_t i = 0; i < 500; ++i) even.add(kBase + i * 18'232, 60);
  Profile b = even.finish("dripped", "pcap");
  std::string out = render_compare(a, b, "a.json", "b.json");
  EXPECT_NE(out.find("packets"), std::string::npos);
  EXPECT_NE(out.find("="), std::string::npos);  // same packet count
  EXPECT_NE(out.find("burst factor/100us"), std::string::npos) << out;
  EXPECT_NE(out.find("max pkts/100us"), std::string::npos);
  // 50 -> 6 packets per 100 us window: -88%, about x0.12.
  EXPECT_NE(out.find("-88.0% (x0.12)"), std::string::npos) << out;
}

TEST(Svg, DrawsTheHistogramAndTheWindows) {
  ProfileBuilder pb({100'000, 1'000'000});
  for (auto t : burst_pattern()) pb.add(t, 60);
  std::string svg = render_svg(pb.finish("pcap <bursts>.pcap", "pcap"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;bursts&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("<title>[1.92us, 2.05us): 490</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("packets per 100us window"), std::string::npos);
  EXPECT_NE(svg.find("<title>[32, 64): 10 windows</title>"), std::string::npos);
}

}  // namespace
}  // namespace dripgate::iat
