#include "tools/iat/histogram.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>

#include "tools/iat/units.h"

namespace dripgate::iat {
namespace {

struct Group {
  uint64_t low, high;  // high == 0: open-ended
  uint64_t count;
};

// Both histograms hold one value per bucket below `sub`, then `sub` linear buckets per power of
// two: merging is the same walk, only the bound of a bucket differs.
std::vector<Group> merge_pow2(std::span<const uint64_t> hist, unsigned sub,
                              uint64_t (*low)(unsigned)) {
  auto sum = [&](unsigned from, unsigned to) {
    uint64_t c = 0;
    for (unsigned b = from; b < to; ++b) c += hist[b];
    return c;
  };
  std::vector<Group> groups;
  for (unsigned lo = 0, hi = 1; lo < sub; lo = hi, hi *= 2) groups.push_back({lo, hi, sum(lo, hi)});
  for (unsigned g = sub; g < hist.size(); g += sub) {
    const bool last = g + sub >= hist.size();
    groups.push_back({low(g), last ? 0 : low(g + sub), sum(g, g + sub)});
  }
  return groups;
}

std::vector<MergedRow> labelled(const std::vector<Group>& groups, std::string (*name)(uint64_t)) {
  auto nonempty = [](const Group& g) { return g.count != 0; };
  auto first = std::find_if(groups.begin(), groups.end(), nonempty);
  if (first == groups.end()) return {};
  auto last = std::find_if(groups.rbegin(), groups.rend(), nonempty).base();
  std::vector<MergedRow> rows;
  for (auto g = first; g != last; ++g) {
    std::string label = g->high == g->low + 1 ? fmt::format("[{}]", name(g->low))
                        : g->high == 0        ? fmt::format("[{}, ...)", name(g->low))
                                       : fmt::format("[{}, {})", name(g->low), name(g->high));
    rows.push_back({label, g->count});
  }
  return rows;
}

std::string ns_name(uint64_t ns) {
  return format_ns(static_cast<double>(ns));
}
std::string count_name(uint64_t n) {
  return std::to_string(n);
}

}  // namespace

uint64_t bucket_low(unsigned b) {
  return iat_bucket_low(b);
}
uint64_t bucket_high(unsigned b) {
  return iat_bucket_low(b + 1);
}
double bucket_mid(unsigned b) {
  return (static_cast<double>(bucket_low(b)) + static_cast<double>(bucket_high(b))) / 2.0;
}
uint64_t count_bucket_low(unsigned b) {
  return iat_count_bucket_low(b);
}
uint64_t count_bucket_high(unsigned b) {
  return iat_count_bucket_low(b + 1);
}

uint64_t hist_total(const Histogram& hist) {
  uint64_t n = 0;
  for (auto c : hist) n += c;
  return n;
}

Percentile percentile_from_hist(const Histogram& hist, double q) {
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

std::string quantile_name(double q) {
  if (q == 0.5) return "p50";
  if (q == 0.9) return "p90";
  if (q == 0.99) return "p99";
  if (q == 0.999) return "p99.9";
  return fmt::format("p{:g}", q * 100);
}

std::vector<MergedRow> merged_iat_rows(const Histogram& hist) {
  return labelled(merge_pow2(hist, IAT_SUB, bucket_low), ns_name);
}

std::vector<MergedRow> merged_count_rows(const CountHistogram& hist) {
  return labelled(merge_pow2(hist, 4, count_bucket_low), count_name);
}

}  // namespace dripgate::iat
