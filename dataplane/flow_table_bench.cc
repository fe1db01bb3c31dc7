// The flow table at scale: cost per lookup and memory with 1,000, 65,536 and 1,000,000 tagged
// IPv4 flows (flow_table_size up to 2^20), side by side in one run, so the price of a table far
// larger than the caches is read against a cache-resident one; and a churn run (new flows
// tagged, old ones going idle, the sweep every second) that shows the table stays bounded.
// Lookups go the fast path's way: lookup_bulk_ipv4 over bursts of 32 keys in random order, each
// round alternating the table sizes; medians over the rounds. Then tag lines of 15 flows, by
// add() and by add_many(), alternating. Prints figures; asserts nothing.
//
//   build/dataplane/flow_table_bench [rounds]
#include <rte_malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dataplane/flow_table.h"
#include "dataplane/parse.h"
#include "tests/eal_environment.h"

namespace dp = dripgate::dataplane;

namespace {

constexpr uint64_t kHz = 1000;  // the injected clock ticks in milliseconds
constexpr uint32_t kBurst = 32;

dp::FiveTuple flow(uint32_t i) {
  dp::FiveTuple t{};
  t.l3 = dp::L3::kIpv4;
  const uint32_t src = 0x0A000000u | (i & 0x00FFFFFFu);  // 10.x.y.z
  std::memcpy(t.src, &src, 4);
  const uint8_t dst[4] = {192, 0, 2, 1};
  std::memcpy(t.dst, dst, 4);
  t.sport = static_cast<uint16_t>(1024 + (i >> 24));
  t.dport = 443;
  t.proto = 17;
  return t;
}

size_t heap_bytes() {
  rte_malloc_socket_stats s{};
  rte_malloc_get_socket_stats(0, &s);
  return s.heap_allocsz_bytes;
}

struct Sized {
  uint32_t flows, entries;
  std::unique_ptr<dp::FlowTable> table;
  std::vector<dp::Ipv4Key> keys;  // the tagged flows, shuffled
  std::vector<uint32_t> hashes;
  size_t bytes = 0;
  double add_ns = 0;
  std::vector<double> hit_ns, miss_ns;
};

double ns_since(std::chrono::steady_clock::time_point t0, uint64_t n) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(n);
}

// ns per key over `passes` passes of bursts of kBurst keys.
double lookups(dp::FlowTable& t, const std::vector<dp::Ipv4Key>& keys,
               const std::vector<uint32_t>& hashes, int passes, int expect_hits) {
  int classes[kBurst];
  uint64_t hits = 0, n = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int p = 0; p < passes; ++p) {
    for (size_t i = 0; i + kBurst <= keys.size(); i += kBurst) {
      t.lookup_bulk_ipv4(&keys[i], &hashes[i], kBurst, 1, classes);
      for (int c : classes) hits += c >= 0;
      n += kBurst;
    }
  }
  double ns = ns_since(t0, n);
  if (expect_hits >= 0 && hits != (expect_hits ? n : 0))
    std::fprintf(stderr, "flow_table_bench: %lu of %lu lookups hit\n", hits, n);
  return ns;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A table of `entries` on the injected millisecond clock; the bench stops when it cannot be made.
std::unique_ptr<dp::FlowTable> make_table(const std::string& name, uint32_t entries,
                                          uint32_t idle_s) {
  dp::FlowTableParams p;
  p.name = name;
  p.entries = entries;
  p.tsc_hz = kHz;
  p.idle_timeout_s = idle_s;
  std::string error;
  auto t = dp::FlowTable::create(p, &error);
  if (!t) {
    std::fprintf(stderr, "flow_table_bench: %u entries: %s\n", entries, error.c_str());
    std::exit(1);
  }
  return t;
}

void churn() {
  // 200,000 flows a second would fill a 2^20 table in 5 s; an idle timeout of 2 s and the sweep
  // every second keep it near 2-3 s worth of flows.
  auto t = make_table("ftb_churn", 1 << 20, 2);
  uint32_t next = 0, max_size = 0, refused = 0;
  for (uint64_t ms = 0; ms < 30'000; ms += 10) {
    for (int k = 0; k < 2000; ++k)
      if (t->add(flow(next++), 0, 0, ms) != 0) ++refused;
    if (ms % 1000 == 0) t->sweep(ms);
    max_size = std::max(max_size, t->size());
  }
  std::printf(
      "churn: %u flows tagged over 30 s (200,000/s), idle timeout 2 s, sweep every 1 s: largest "
      "table %u of %u entries, %u refused, %u at the end\n",
      next, max_size, t->capacity(), refused, t->size());
}

// Tagging as the control socket does it, into a 2^20 table already holding 500,000 flows: lines
// of 15 new flows (what dripgate-control sends per pass at admission rate), each line by add()
// flow by flow or by add_many(); the two ways alternate round by round on fresh keys, which are
// untagged again after each round (not timed). ns per flow tagged.
void tag_lines(int rounds) {
  constexpr uint32_t kLine = 15, kPerRound = 15 * 4096, kPrefill = 500'000;
  auto t = make_table("ftb_lines", 1 << 20, 0);
  for (uint32_t i = 0; i < kPrefill; ++i) t->add(flow(i), 1, 0, 0);
  uint32_t next = kPrefill;
  std::vector<double> one, many;
  std::vector<dp::FiveTuple> keys(kPerRound);
  for (int r = 0; r < rounds; ++r) {
    for (int way = 0; way < 2; ++way) {
      for (auto& k : keys) k = flow(next++);
      auto t0 = std::chrono::steady_clock::now();
      for (uint32_t i = 0; i < kPerRound; i += kLine) {
        if (way == 0) {
          for (uint32_t k = i; k < i + kLine; ++k) t->add(keys[k], 1, 30, 1);
        } else {
          int rc = 0;
          t->add_many(&keys[i], kLine, 1, 30, 1, &rc);
        }
      }
      (way == 0 ? one : many).push_back(ns_since(t0, kPerRound));
      if (t->size() != kPrefill + kPerRound)
        std::fprintf(stderr, "flow_table_bench: %u flows, expected %u\n", t->size(),
                     kPrefill + kPerRound);
      for (const auto& k : keys) t->del(k);
    }
  }
  std::printf(
      "tag lines of %u new flows into a 2^20 table of %u, ns per flow, medians of %d "
      "alternating rounds: add() %.1f, add_many() %.1f (ratio %.2f)\n  rounds:",
      kLine, kPrefill, rounds, median(one), median(many), median(many) / median(one));
  for (int r = 0; r < rounds; ++r) std::printf(" %.1f/%.1f", one[r], many[r]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  std::optional<dripgate::dataplane::Eal> eal;
  try {
    eal.emplace(dripgate::testing::eal_args_without_devices("flow_table_bench", 1536));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flow_table_bench: %s\n", e.what());
    return 1;
  }
  std::mt19937 rng(1);
  std::vector<Sized> sizes;
  for (uint32_t flows : {1'000u, 65'536u, 1'000'000u}) {
    Sized s;
    s.flows = flows;
    s.entries = 1024;
    while (s.entries < flows) s.entries <<= 1;
    const size_t before = heap_bytes();
    s.table = make_table("ftb_" + std::to_string(flows), s.entries, 0);
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < flows; ++i) {
      if (s.table->add(flow(i), 1, 0, 0) != 0) {
        std::fprintf(stderr, "flow_table_bench: add %u of %u refused\n", i, flows);
        return 1;
      }
    }
    s.add_ns = ns_since(t0, flows);
    s.bytes = heap_bytes() - before;
    for (uint32_t i = 0; i < flows; ++i) s.keys.push_back(dp::to_ipv4_key(flow(i)));
    std::shuffle(s.keys.begin(), s.keys.end(), rng);
    for (const auto& k : s.keys) s.hashes.push_back(dp::FlowTable::hash_ipv4(k));
    sizes.push_back(std::move(s));
  }
  // Misses: flows never tagged (another destination port), same count as the smallest table's.
  std::vector<dp::Ipv4Key> absent;
  std::vector<uint32_t> absent_h;
  for (uint32_t i = 0; i < 65'536; ++i) {
    dp::FiveTuple f = flow(i);
    f.dport = 8443;
    absent.push_back(dp::to_ipv4_key(f));
    absent_h.push_back(dp::FlowTable::hash_ipv4(absent.back()));
  }
  for (int r = 0; r < rounds; ++r) {
    for (auto& s : sizes) {
      // About 4 million lookups per figure whatever the size.
      const int passes = std::max<int>(1, static_cast<int>(4'000'000 / s.flows));
      s.hit_ns.push_back(lookups(*s.table, s.keys, s.hashes, passes, 1));
      s.miss_ns.push_back(lookups(*s.table, absent, absent_h, 60, 0));
    }
  }
  std::printf(
      "flow table, IPv4 keys, lookup_bulk_ipv4 in bursts of %u, random order, medians of "
      "%d alternating rounds (ns per lookup)\n",
      kBurst, rounds);
  std::printf("%10s %10s %10s %10s %12s %12s %12s   rounds (hit ns)\n", "flows", "entries",
              "hit ns", "miss ns", "add ns", "heap MB", "B per flow");
  for (const auto& s : sizes) {
    std::printf("%10u %10u %10.1f %10.1f %12.1f %12.1f %12.1f  ", s.flows, s.entries,
                median(s.hit_ns), median(s.miss_ns), s.add_ns, s.bytes / 1e6,
                static_cast<double>(s.bytes) / s.flows);
    for (double v : s.hit_ns) std::printf(" %.1f", v);
    std::printf("\n");
  }
  std::printf("(the 1,000-flow table is the baseline: it fits in the caches)\n");
  sizes.clear();
  tag_lines(rounds);
  churn();
  return 0;
}
