// Dataplane counters: each block is written by exactly one lcore and read by the main lcore and
// the telemetry thread. Single writer, so a counter is a relaxed load + store (a plain mov on
// x86), never a locked read-modify-write on the packet path.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataplane/latency_hist.h"

namespace dripgate::dataplane {

class Counter {
 public:
  void add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void set(uint64_t n) { v_.store(n, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Scheduler;

// Per class, beside the scheduler's own counters (enqueued, depth/TTL drops, queue length) and
// the RX lcores' `classified`.
struct alignas(64) ClassCounters {
  Counter tx_pkts;  // handed to the port (written by the drip lcore)
  Counter tx_bytes;
  Counter drop_tx;  // tx_full: released by the scheduler, refused by the port after retries
  // The latest departure's send TSC minus its slot on the timeline (two's complement: a batch
  // may leave before its slot), stored once per run of the class in a TX burst.
  Counter late_ticks;
};

// Written by one lcore doing RX (the single worker, or one RX lcore of the split layout): one
// block per RX lcore, so each counter keeps its single writer; readers add them up.
struct alignas(64) RxStats {
  static constexpr int kMaxCauses = 32;
  Counter rx_client, rx_cluster;
  Counter pass_non_ip;      // client->cluster non-IP frames, sent unshaped
  Counter pass_unknown;     // unknown_flows: pass
  Counter drop_unknown;     // unknown_flows: drop
  Counter drop_ring;        // split layout: hand-over ring full
  Counter reverse_tx;       // cluster->client, unshaped
  Counter reverse_drop_tx;  // cluster->client, the client port refused it
  std::array<Counter, kMaxCauses> malformed{};
  std::vector<Counter> classified;  // per class: assigned to it by this lcore
};

// The RX blocks added up, for readers.
struct RxTotals {
  uint64_t rx_client = 0, rx_cluster = 0, pass_non_ip = 0, pass_unknown = 0, drop_unknown = 0,
           drop_ring = 0, reverse_tx = 0, reverse_drop_tx = 0;
  std::array<uint64_t, RxStats::kMaxCauses> malformed{};
};

// Written by the drip lcore: departures and the error of each against its schedule.
struct alignas(64) DripStats {
  Counter departures;
  Counter tx_retries;
  Counter first_tsc, last_tsc;    // TSC of the first / latest departure (long-run rate)
  Counter rate_updates;           // set_rate requests applied
  Counter pass_tx, pass_drop_tx;  // unshaped client->cluster sent / refused (cluster TX owner)
  LatencyHist error;
  explicit DripStats(uint64_t tsc_hz) : error(tsc_hz) {}
};

// Everything the process counts. Class names, the scheduler's counters and the rates in force
// are read from the scheduler (readable from any thread), not copied here.
struct Stats {
  std::vector<std::string> malformed_names;  // parse causes, index = cause value
  std::vector<ClassCounters> classes;        // index = the scheduler's class index
  const Scheduler* sched = nullptr;
  std::vector<RxStats> rx;  // one per RX lcore, in dataplane.lcores.rx order
  DripStats drip;
  uint64_t tsc_hz = 0;
  uint64_t start_tsc = 0;
  // Written by the main lcore: reloads (SIGHUP) applied and refused.
  Counter reloads_applied, reloads_refused;
  // Written by the main lcore: tag requests on the control socket, by result: tagged, refused
  // because the flow table is full, refused as invalid (a field the answer names).
  struct {
    Counter ok, full, invalid;
  } tags;
  uint64_t mbufs_total = 0;
  std::atomic<int64_t> mbufs_available{-1};  // set after the ports are closed
  // The name of a tenant id (the flow tags' tenant table), for the drops by tenant; unset or
  // empty: the id is shown. Safe to call from the thread that renders stats.
  std::function<std::string(uint32_t)> tenant_name;
  // Tenants shown in `drops.by_tenant`: the most dropped, a bounded list whatever the number
  // of tenants.
  static constexpr size_t kTopTenants = 10;

  Stats(const Scheduler* sched, std::vector<std::string> causes, uint64_t hz, uint64_t start,
        unsigned rx_lcores = 1);
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  RxTotals rx_totals() const;
  uint64_t classified(unsigned cls) const;  // over the RX lcores
  uint64_t malformed_total() const;
  // Totals over the classes of the scheduler's and our own counters.
  struct Totals {
    uint64_t classified = 0, enqueued = 0, tx = 0, tx_bytes = 0, depth = 0, ttl = 0, drop_tx = 0,
             drained = 0, queue_len = 0, subqueue = 0, aqm = 0, ecn_marked = 0;
  };
  Totals totals() const;
  // Long-run departure rate from the first to the latest departure, 0 if < 2 departures.
  double departure_rate_pps() const;

  nlohmann::json class_json(unsigned cls) const;
  // The kTopTenants tenants with the most drops: [{"tenant", "depth", "ttl", "aqm"}, ...].
  nlohmann::json tenant_drops_json() const;
  nlohmann::json to_json() const;
};

// Departure-error summary: count, min/mean/max, p50/p99/p99.9, shares within ±64..1024 ns and
// the non-empty buckets.
nlohmann::json hist_json(const LatencyHist& h);

// Register /dripgate/stats and /dripgate/classes with DPDK telemetry. The Stats object (and its
// scheduler) must outlive the EAL: telemetry keeps the pointer until rte_eal_cleanup.
void register_telemetry(const Stats* stats);

}  // namespace dripgate::dataplane
