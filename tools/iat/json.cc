#include "tools/iat/json.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include <fmt/format.h>

namespace dripgate::iat {

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

}  // namespace dripgate::iat
