// The worker loops. Two layouts:
//  * single: one worker lcore receives from both ports, parses, classifies, enqueues into the
//    scheduler, drips toward the cluster port and forwards the reverse path;
//  * split: one or more RX lcores (RSS spreads the client port's flows over their RX queues)
//    receive, parse and classify, and each hands packets to the drip lcore through its own
//    single-producer/single-consumer rte_ring; the drip lcore owns the scheduler and is the
//    only user of the cluster port's TX queue (unshaped client->cluster frames go through the
//    rings too). Each RX lcore also forwards the reverse path from its cluster-port RX queues
//    to its own client-port TX queue.
// Per packet: no syscalls, locks, allocation or logging. Every mbuf is sent or freed, and counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/classify.h"
#include "dataplane/flow_table.h"
#include "dataplane/group_by_class.h"
#include "dataplane/mailbox.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"

struct rte_ring;
struct rte_mbuf;

namespace dripgate::dataplane {

class ClassCache;

struct FastpathParams {
  uint16_t client_port = 0;
  uint16_t cluster_port = 1;
  std::vector<unsigned> rx_lcores{1};
  unsigned drip_lcore = 1;
  uint16_t rx_queues = 1;  // per port; RX lcore i polls queues i, i + n, ... (n RX lcores)
  config::UnknownFlows unknown = config::UnknownFlows::kDefault;
  int default_cls = -1;  // for unknown_flows: default
  int non_ip_cls = -1;   // >= 0: shape non-IP frames in this class instead of passing them
  uint32_t drain_ms = 2000;
  uint32_t ring_size = 4096;  // split layout: each RX lcore's hand-over ring
};

// RX queue q of a port belongs to RX lcore q % n_lcores: the queues each lcore polls, in order.
std::vector<std::vector<uint16_t>> rx_queues_by_lcore(uint16_t rx_queues, size_t n_lcores);

class Fastpath {
 public:
  Fastpath(const FastpathParams& p, Scheduler& sched, FlowTable& flows,
           const Classifier& classifier, Stats& stats);
  ~Fastpath();
  Fastpath(const Fastpath&) = delete;
  Fastpath& operator=(const Fastpath&) = delete;

  bool split() const { return p_.rx_lcores.size() > 1 || p_.rx_lcores[0] != p_.drip_lcore; }
  // Starts the worker lcore(s); throws when an lcore cannot be launched.
  void launch();
  // Stops receiving; the drip side sends what is queued for up to drain_ms, then frees the rest
  // (counted as drops.shutdown). Returns when the workers have returned.
  void stop_and_wait();

  // Changes for the scheduler's owner (rates, a reload's scheduler part) and for the lcore that
  // classifies (a reload's rules and unknown_flows); the same lcore polls both in the single
  // layout. The classifier passed to the constructor, and each one posted later, must live
  // until the RX lcore has answered the post that replaces it.
  DripMailbox& drip_mailbox() { return drip_mailbox_; }
  // One per RX lcore, in dataplane.lcores.rx order; a reload posts to each.
  std::vector<RxMailbox*> rx_mailboxes();

  // Implementation, public for the lcore entry points.
  // One received packet on its way to the scheduler (pkt is the rte_mbuf*; cls kPassCls: send
  // unshaped). The scheduler's own record, so a burst is queued with enqueue_burst, no copy.
  using Handoff = EnqueueReq;
  static constexpr uint32_t kPassCls = UINT32_MAX;
  struct RxLane;
  int run_single(RxLane& lane);
  int run_rx(RxLane& lane);
  int run_drip();

 private:
  static constexpr unsigned kBurst = 32;

  struct RxOut;  // where one received burst goes
  struct Burst;  // one received burst, parsed and looked up
  // Departures on their way to the cluster port: the mbufs as rte_eth_tx_burst takes them, and
  // runs of one class and one scheduled time, so the accounting is per run, not per packet.
  struct TxRun {
    uint32_t cls;
    uint32_t n;
    uint64_t bytes;
    uint64_t scheduled_tsc;
  };
  struct TxList {
    rte_mbuf* pkts[kBurst];
    TxRun runs[kBurst];
    unsigned n = 0;
    unsigned n_runs = 0;
  };
  unsigned budget(uint64_t slack) const;
  // Returns how many of the frames is_non_ip_fast() took; frame_len[i] is frame i's
  // rte_pktmbuf_pkt_len, *bytes their sum.
  unsigned parse_burst(rte_mbuf* const* pkts, unsigned n, Burst& b, uint32_t* frame_len,
                       uint64_t* bytes);
  void classify_burst(RxLane& lane, unsigned n, uint64_t now, Burst& b);
  static void note_flow(const Burst& b, unsigned i, RxOut& o, unsigned k);
  void rx_client(RxLane& lane, unsigned max, RxOut& out, uint64_t now);
  void finish_rx(RxStats& st, RxOut& o, uint64_t now);
  unsigned rx_reverse(RxLane& lane, unsigned max);
  void send_counted(uint16_t port, uint16_t queue, rte_mbuf** pkts, unsigned n, Counter& sent,
                    Counter& dropped);
  void send_pass(rte_mbuf** pkts, unsigned n);
  // Split layout, drip lcore: the records of one ring dequeue.
  void enqueue_shaped(const Handoff* in, unsigned n);
  // Single layout: rx_client's kept packets, to the scheduler or (bypass) the port.
  uint64_t ship_single(RxOut& o, uint64_t now);
  static void free_refused(void* const* refused, unsigned n);
  void drip_due(uint64_t now);
  // Both return the last TSC read (t, or a retry's).
  uint64_t transmit(TxList& l, uint64_t t);
  // order: runs[r] is group r of it, its members anywhere in pkts (arrival order); else each
  // run is the next run.n of pkts.
  uint64_t transmit(rte_mbuf** pkts, unsigned n, const TxRun* runs, unsigned n_runs, uint64_t t,
                    const ClassGroups<kBurst>* order = nullptr);
  bool check_drip_mailbox();
  bool check_rx_mailbox(RxLane& lane);
  void drain_and_free();
  void note_rx_cost(uint64_t ticks, unsigned pkts);
  // An RX pass whose cost is not yet noted: it is closed by the TSC read that starts the next
  // loop turn, which the loop makes anyway, instead of a read of its own at the pass's end (a
  // TSC read is dear on a virtual machine, where it may trap to the hypervisor).
  struct OpenPass {
    uint64_t start = 0;
    unsigned pkts = 0;
    bool open = false;
  };
  void close_pass(OpenPass& pass, uint64_t now) {
    if (!pass.open) return;
    pass.open = false;
    note_rx_cost(now - pass.start, pass.pkts);
  }

  FastpathParams p_;
  Scheduler& sched_;
  FlowTable& flows_;
  Stats& stats_;
  DripMailbox drip_mailbox_;
  std::vector<std::unique_ptr<RxLane>> lanes_;
  bool launched_ = false;

  alignas(64) std::atomic<bool> running_{true};
  std::atomic<unsigned> rx_running_{0};  // RX lcores launched and not yet returned
  unsigned next_lane_ = 0;               // drip lcore: the ring it dequeues from first
  // Drip-owner state: the cost of an RX pass per packet (ticks), a decaying maximum, so the
  // worker only receives when the next departure is far enough away.
  uint64_t rx_cost_per_pkt_ = 0;
  uint64_t rx_cost_fixed_ = 0;
  uint64_t margin_ticks_ = 0;
  // How far ahead of its time a departure is polled from the scheduler, so that only the TX call
  // separates the end of the spin from the packet leaving.
  uint64_t prep_ticks_ = 0;
  // How long a ClassCache entry of an untagged IPv4 flow stands (ticks, one second): its class
  // changes only with the flow table or the rules, which forget every entry anyway; the bound
  // keeps each entry far younger than 2^32 of the cache's epochs (at most one per burst).
  uint64_t untagged_entry_ticks_ = 0;
};

}  // namespace dripgate::dataplane
