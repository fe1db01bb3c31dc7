// The floor under dp_throughput.sh's dataplane figures: a forwarder that does with each frame
// only what any shaper must, and nothing else (no class, no queue, no counter), on the same
// vdevs, lcores and mbuf pool size, measured the same way (ethdev opackets from the DPDK
// telemetry socket). Its rate over testpmd io's is the most a dataplane that looks at every
// frame can reach on that machine; dripgate's over it is what classifying and scheduling cost.
//
//   dp_floor --mode io|read|parse|lookup --seconds N -- EAL-ARGS...
//
// Port 0's frames go to port 1 through the mode's work, port 1's back to port 0 untouched:
//   io     none: testpmd io's loop, a check that this program is that baseline;
//   read   each frame's length and its ethertype test (is_non_ip_fast), what the dataplane
//          reads of a non-IP frame;
//   parse  each frame's length, its IPv4/UDP|TCP 5-tuple (parse_ipv4_fast) and the tuple's
//          hash (FlowTable::hash_ipv4), what the dataplane computes before a frame's class.
//   lookup parse, then the frame's class from the dataplane's own per-lcore ClassCache (a miss
//          puts 10.1.0.0/16 -> 0, else 1, as a stand-in for the flow table and rules): the
//          least a shaper that holds a class per flow does per frame, with no queue, group or
//          counter.
// The worker is the first worker lcore (rte-worker-N); frames a full TX ring refuses are freed.
// Not a test: figures only.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <CLI/CLI.hpp>

#include "dataplane/class_cache.h"
#include "dataplane/flow_table.h"
#include "dataplane/init.h"
#include "dataplane/parse.h"

namespace dp = dripgate::dataplane;

namespace {

enum class Mode { kIo, kRead, kParse, kLookup };
constexpr uint16_t kBurst = 32;  // the dataplane's burst and testpmd's default

struct Worker {
  Mode mode = Mode::kIo;
  std::atomic<bool> running{true};
  uint64_t sink = 0;     // the modes' results, so the compiler keeps their work
  dp::ClassCache cache;  // lookup: the dataplane's size, 2048 sets
};

// The mode's work on a burst; the result folded into one word.
uint64_t look(Worker& w, rte_mbuf* const* pkts, unsigned n) {
  const Mode mode = w.mode;
  const uint64_t now = mode == Mode::kLookup ? rte_rdtsc() : 0;  // one per burst, as dripgate
  uint64_t acc = 0;
  for (unsigned i = 0; i < n; ++i) {
    const rte_mbuf* m = pkts[i];
    const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
    const uint32_t len = rte_pktmbuf_data_len(m);
    acc += rte_pktmbuf_pkt_len(m);
    if (mode == Mode::kRead) {
      acc += dp::is_non_ip_fast(data, len);
    } else {
      dp::Ipv4Key key;
      uint8_t dscp;
      if (!dp::parse_ipv4_fast(data, len, &key, &dscp)) continue;
      const uint32_t hash = dp::FlowTable::hash_ipv4(key);
      if (mode == Mode::kParse) {
        acc += hash + dscp;
        continue;
      }
      int cls;
      if (!w.cache.find(key, dscp, hash, now, &cls)) {
        cls = (key.src & 0xFFFF) == 0x010A ? 0 : 1;  // 10.1.0.0/16 on the wire, little-endian
        w.cache.put(key, dscp, hash, cls, UINT64_MAX);
      }
      acc += static_cast<unsigned>(cls);
    }
  }
  return acc;
}

void send(uint16_t port, rte_mbuf** pkts, unsigned n) {
  const unsigned sent = rte_eth_tx_burst(port, 0, pkts, static_cast<uint16_t>(n));
  if (sent < n) rte_pktmbuf_free_bulk(pkts + sent, n - sent);
}

int run(void* arg) {
  auto& w = *static_cast<Worker*>(arg);
  rte_mbuf* pkts[kBurst];
  uint64_t acc = 0;
  while (w.running.load(std::memory_order_relaxed)) {
    unsigned n = rte_eth_rx_burst(0, 0, pkts, kBurst);
    if (n != 0) {
      if (w.mode != Mode::kIo) acc += look(w, pkts, n);
      send(1, pkts, n);
    }
    n = rte_eth_rx_burst(1, 0, pkts, kBurst);
    if (n != 0) send(0, pkts, n);
  }
  w.sink = acc;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp_floor: a forwarder that only reads what a shaper must (dp_throughput.sh)"};
  std::string mode_name = "io";
  double seconds = 10;
  std::vector<std::string> eal_args;
  app.add_option("--mode", mode_name, "io, read, parse or lookup")
      ->check(CLI::IsMember({"io", "read", "parse", "lookup"}));
  app.add_option("--seconds", seconds, "how long to forward")->check(CLI::PositiveNumber);
  app.add_option("eal", eal_args, "EAL arguments, after --");
  CLI11_PARSE(app, argc, argv);
  const Mode mode = mode_name == "read"     ? Mode::kRead
                    : mode_name == "parse"  ? Mode::kParse
                    : mode_name == "lookup" ? Mode::kLookup
                                            : Mode::kIo;

  try {
    std::vector<std::string> args{"dp_floor"};
    args.insert(args.end(), eal_args.begin(), eal_args.end());
    dp::Eal eal(args);
    if (rte_eth_dev_count_avail() != 2) {
      std::fprintf(stderr, "dp_floor: needs exactly 2 ports (--vdev), found %u\n",
                   rte_eth_dev_count_avail());
      return 2;
    }
    const unsigned lcore = rte_get_next_lcore(-1, 1, 0);
    if (lcore >= RTE_MAX_LCORE) {
      std::fprintf(stderr, "dp_floor: needs a worker lcore (-l 0-1)\n");
      return 2;
    }
    // The dataplane's pool size in the benchmarks (dp_bench_yaml's mbufs; testpmd's
    // --total-num-mbufs is 16384).
    dp::MbufPool pool("floor_mbufs", 16383, static_cast<int>(rte_socket_id()));
    dp::Port p0(0, pool.get()), p1(1, pool.get());
    Worker w;
    w.mode = mode;
    if (int rc = rte_eal_remote_launch(run, &w, lcore); rc != 0) {
      std::fprintf(stderr, "dp_floor: cannot launch lcore %u: %s\n", lcore, rte_strerror(-rc));
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    w.running.store(false, std::memory_order_relaxed);
    rte_eal_wait_lcore(lcore);
    std::printf("{\"mode\": \"%s\", \"sink\": %llu}\n", mode_name.c_str(),
                static_cast<unsigned long long>(w.sink));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_floor: %s\n", e.what());
    return 1;
  }
  return 0;
}
