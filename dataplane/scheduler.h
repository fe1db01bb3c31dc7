// The drip scheduler: per-class queues, deficit round robin by weight, per-class rate caps and
// the port's absolute departure timeline. Plain C++ with an injected clock (TSC ticks passed in
// by the caller), no DPDK: the fast path stores rte_mbuf* as opaque pointers.
//
// Per packet: no allocation (rings are preallocated), no syscalls, locks or logging; enqueue
// is O(1), a departure costs O(number of classes) at worst (the DRR scan) and O(1) when the
// current class keeps its turn. The counters other threads read are published once per
// enqueue_burst()/poll() call and per run of same-class packets in it, not per packet.
//
// Thread model: one lcore owns the scheduler and is the only caller of enqueue, poll,
// next_departure, set_*_rate, apply and drain (a change from another thread reaches it through
// a DripMailbox, see mailbox.h). Any thread may call port_rate/class_rate, class_stats and
// port_stats, and the immutable accessors (num_classes, class_name, find_class): counters are
// relaxed atomics written by the owner with load+store (a plain mov on x86, no lock prefix); a
// reader sees each counter untorn, but different counters of one snapshot may be a few packets
// apart. The rates in force are held once, by the timelines; stats and the control socket read
// them from here.
//
// Semantics (docs/ARCHITECTURE.md, The drip):
// * WHEN: the port timeline (drip.rate_pps / rate_bps on frame + 24 B) says when the next
//   departure slot opens; a slot releases up to drip.batch packets, all scheduled at the slot's
//   time, and the timeline advances by the sum of their intervals.
// * WHICH: strict priority among classes of different `priority` (a lower number first; a
//   class is skipped only while it is not ready), and within one priority deficit round robin
//   over the classes that are ready: backlogged, head not expired, and permitted by their own
//   cap timeline. The quantum is in bytes (weight * kQuantumBytes,
//   cost = frame_len), so mixed frame sizes share by bytes. A class skipped because its cap
//   holds it gets no quantum for that round and keeps at most one quantum of deficit, so a cap
//   never turns into stored credit; what a capped class cannot use goes to the others.
// * The scheduled departure of a packet is max(port timeline, its class's cap timeline, its
//   enqueue time): time in which no packet was ready (idle, or every class capped) never
//   becomes catch-up credit. After a stall (the caller polled late) each timeline books at most
//   drip.max_catchup departures before `now` (late), then runs on schedule (see Timeline).
// * INSIDE a class: with `fairness: tenant | flow` one sub-queue per source served by DRR by
//   bytes (fair_queue.h), else one FIFO. The head a class offers is its FIFO's, or the head of
//   the sub-queue whose turn it is.
// * TTL: at dequeue, a head packet whose age now - enq_tsc exceeds the class ttl_ms is removed,
//   counted (drop_ttl) and handed back through poll()'s `expired` array so the caller frees it.
//   ttl_ms = 0 disables the TTL. Depth: enqueue into a full class fails (drop_depth), into a
//   full sub-queue (tenant_depth) fails too (drop_subqueue); the caller keeps (and frees) the
//   packet.
// * AQM: a class with `aqm` runs CoDel (codel.h) on the head it is about to send, per FIFO or
//   per sub-queue: a head dropped by it goes the way of an expired one (drop_aqm); an
//   ECN-capable one may instead leave marked (ecn_marked, Departure::ce).
// * Accounting identity, per class, once the owner is quiescent:
//     enq_packets == tx_packets + drop_ttl + drop_aqm + drained + queue_len
//   (drop_depth and drop_subqueue packets were never enqueued). Drops are also counted per
//   tenant id (tenant_drops()), for the stats' top-N.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dataplane/class_queue.h"
#include "dataplane/codel.h"
#include "dataplane/fair_queue.h"
#include "dataplane/timeline.h"

namespace dripgate::dataplane {

// DRR quantum per unit of weight, in bytes: one full standard frame (1514 B + VLAN tags), so a
// weight-1 class normally sends at least one frame per turn. Larger frames still work: the
// scheduler fast-forwards the rounds a jumbo frame needs instead of looping.
inline constexpr uint64_t kQuantumBytes = 1536;

// A packet released by poll(): send it, then record actual TX TSC - scheduled_tsc.
struct Departure {
  void* pkt;
  uint32_t frame_len;
  uint32_t cls;
  uint64_t scheduled_tsc;
  // AQM chose to mark this ECN-capable packet Congestion Experienced instead of dropping it:
  // the caller sets CE in its IP header before sending.
  bool ce = false;
};

// One packet for enqueue_burst(): the fast path's hand-over record has this layout, so a
// received burst goes to the scheduler without a copy.
struct EnqueueReq {
  void* pkt;
  uint64_t enq_tsc;
  uint32_t cls;
  uint32_t frame_len;
  // Whom the packet is fair to, inside its class (the class's `fairness` picks which): the
  // tenant id of its flow's tag (0: untagged), and a hash of its flow (16 bits of the 5-tuple
  // hash; an untagged flow counts as its own source).
  uint32_t tenant = 0;
  uint16_t flow = 0;
  // The IP header's ECN field is ECT(0) or ECT(1): AQM may mark it instead of dropping it.
  bool ect = false;
};

struct ClassStats {
  uint64_t enq_packets = 0;  // accepted into the queue
  uint64_t enq_bytes = 0;
  uint64_t tx_packets = 0;  // released by poll()
  uint64_t tx_bytes = 0;
  uint64_t drop_depth = 0;        // refused by enqueue(): queue full
  uint64_t drop_ttl = 0;          // expired at dequeue, returned by poll()
  uint64_t drained = 0;           // handed back by drain()
  uint64_t queue_len = 0;         // packets queued now
  uint64_t stall_clamps = 0;      // times the class's cap timeline hit the catch-up clamp
  uint64_t drop_subqueue = 0;     // refused by enqueue(): the source's sub-queue full
  uint64_t drop_aqm = 0;          // dropped at dequeue by AQM, returned by poll()
  uint64_t ecn_marked = 0;        // left with CE set by AQM
  uint64_t active_subqueues = 0;  // sub-queues with packets now (fair classes)
};

// Drops of one tenant (id from the flow's tag; 0: untagged flows), by cause.
struct TenantDrops {
  uint32_t tenant = 0;
  uint64_t depth = 0;  // drop_depth and drop_subqueue
  uint64_t ttl = 0;
  uint64_t aqm = 0;
  uint64_t total() const { return depth + ttl + aqm; }
};
// Tenant ids the scheduler counts drops for; a larger id counts as 0.
inline constexpr uint32_t kMaxTenantId = 65535;

struct PortStats {
  uint64_t enq_packets = 0;  // sums over the classes
  uint64_t enq_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t drop_depth = 0;
  uint64_t drop_ttl = 0;
  uint64_t drained = 0;
  uint64_t backlog = 0;
  uint64_t drop_subqueue = 0;
  uint64_t drop_aqm = 0;
  uint64_t ecn_marked = 0;
  uint64_t drop_bad_class = 0;  // enqueue() with a class index out of range
  uint64_t stall_clamps = 0;    // times the port timeline hit the catch-up clamp
};

// A live change of the scheduler's configuration (a reload): built on the main lcore by
// Scheduler::prepare(), applied by the owner between bursts with Scheduler::apply(). The same
// classes in the same order; new port rates, batch, max_catchup, weights, caps, depths, TTLs.
struct SchedulerReconfig {
  config::Drip drip;
  std::vector<config::Class> classes;
  // rings[cls]: a larger ring for a class whose new queue_depth exceeds its ring, allocated by
  // prepare(); apply() moves the queued packets into it and leaves the old ring here, so it is
  // freed with this object on the main lcore. A default (empty) queue: the ring stays. pools:
  // the same for a fair class's packet pool.
  std::vector<ClassQueue> rings;
  std::vector<FairQueue> pools;
};

class Scheduler {
 public:
  // Everything the scheduler cannot run with at this TSC frequency, one message per problem,
  // each naming its field ("classes.gold.weight: must be >= 1"); empty when it can run. What
  // depends on tsc_hz is only whether a rate is too low to fit the timeline's fixed point.
  static std::vector<std::string> validate(const config::Drip& drip,
                                           const std::vector<config::Class>& classes,
                                           uint64_t tsc_hz);

  // Throws std::invalid_argument with validate()'s messages (joined by "; ") when there are
  // any. Allocates every queue here, never later.
  Scheduler(const config::Drip& drip, const std::vector<config::Class>& classes, uint64_t tsc_hz);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  unsigned num_classes() const { return n_; }
  const std::string& class_name(unsigned cls) const { return classes_[cls].name; }
  // Index of the class with that name, or -1.
  int find_class(std::string_view name) const;
  uint64_t tsc_hz() const { return tsc_hz_; }

  // Queues a packet stamped enq_tsc (TTL and idle detection count from it), from `tenant` and
  // `flow` (EnqueueReq), ECN capable or not. False = refused: the class queue is full
  // (drop_depth), the source's sub-queue is (drop_subqueue), or cls is out of range
  // (drop_bad_class); the caller still owns the packet. O(1).
  [[nodiscard]] bool enqueue(unsigned cls, void* pkt, uint32_t frame_len, uint64_t enq_tsc,
                             uint32_t tenant = 0, uint16_t flow = 0, bool ect = false) {
    const EnqueueReq r{pkt, enq_tsc, cls, frame_len, tenant, flow, ect};
    void* refused = nullptr;
    return enqueue_burst(&r, 1, &refused) == 0;
  }

  // enqueue() for n packets, in order, with the same results and counts; the refused packets
  // (queue full or class out of range) go to refused[] (room for n), and their count is
  // returned. Counters are published once per run of same-class packets.
  unsigned enqueue_burst(const EnqueueReq* in, unsigned n, void** refused);

  // The empty-queue bypass (what Linux's TCQ_F_CAN_BYPASS does for an empty qdisc): when
  // neither the port nor class `cls` is rate limited and the class has nothing queued, packets
  // would be scheduled at their own enqueue stamps and released by the very next poll(); here
  // they are released at once instead, without the queue copy and the DRR pick. With unlimited
  // rates every ready packet leaves at once anyway, so DRR order among classes has no effect
  // when nothing waits; this only skips work.
  // n packets of `bytes` in all, the last of last_len bytes and the latest stamped max_stamp:
  // counts them as enqueued and released, books both timelines as n departures would, and
  // returns when they are scheduled: max(max_stamp, the timelines' last booking).
  // Precondition: bypasses(cls).
  uint64_t depart_now(unsigned cls, uint64_t n, uint64_t bytes, uint32_t last_len,
                      uint64_t max_stamp);
  bool bypasses(unsigned cls) const {
    return cls < n_ && !port_.limited() && !classes_[cls].cap.limited() && queued(cls) == 0;
  }

  // Releases the packets due at `now`: up to max_out into out (in departure order, each with
  // its scheduled TSC), and moves up to max_expired TTL-expired packets into expired
  // (*n_expired = how many; the caller frees them). A class whose expired head finds no room
  // in `expired` waits for the next poll. Returns the number of departures.
  unsigned poll(uint64_t now, Departure* out, unsigned max_out, Item* expired, unsigned max_expired,
                unsigned* n_expired);

  // When something may next be due: the TSC from which poll() can release a packet, <= now
  // when it can release one now; UINT64_MAX when nothing is queued. For the spin loop: when
  // the returned time is in the future the caller can spin (or do RX work) until then.
  uint64_t next_departure() const;

  // Change rates at time `now` (0 = unlimited). Applied at once; queued packets stay; the
  // timeline stays continuous: the next departure is re-based on the last one at the new rate,
  // not earlier than now (see Timeline::set_rate). False, with *why set, for a negative,
  // non-finite or too small rate or an unknown class; nothing changes then.
  bool set_port_rate(double pps, double bps, uint64_t now, std::string* why = nullptr);
  bool set_class_rate(unsigned cls, double pps, double bps, uint64_t now,
                      std::string* why = nullptr);
  // Any thread but the owner, while no change is in flight (the main lcore): checks a new
  // configuration against this scheduler (validate() at its TSC rate, and the same class names
  // in the same order) and allocates into *out what apply() needs. Returns the problems, each
  // naming its field; *out may be applied only when there are none.
  std::vector<std::string> prepare(const config::Drip& drip,
                                   const std::vector<config::Class>& classes,
                                   SchedulerReconfig* out) const;
  // Owner, between bursts: applies a prepared change at TSC `now`; nothing queued is dropped
  // or reordered. Rates re-base their timelines as set_*_rate does (no burst); weights count
  // from the next DRR turn (a deficit above the new quantum is cut to it); a TTL applies to
  // every packet dequeued from now on (ages count from the enqueue stamps); a lower
  // queue_depth refuses new arrivals (drop_depth) until the queue is below it, and the
  // packets already queued beyond it stay. O(classes), plus one copy of a class's queued
  // packets when it moves to a larger ring.
  void apply(SchedulerReconfig& r, uint64_t now);

  // The rates in force (any thread): the config's until a set_*_rate changes them.
  config::DripRate port_rate() const { return {port_.rate_pps(), port_.rate_bps()}; }
  config::DripRate class_rate(unsigned cls) const {
    return {classes_[cls].cap.rate_pps(), classes_[cls].cap.rate_bps()};
  }

  // Removes every queued packet (shutdown, or a port going away), calling fn(const Item&) for
  // each so the caller frees it; counted as `drained`. Returns the count. The destructor does
  // not free queued packets (they are opaque here): drain before destroying.
  template <typename Fn>
  uint64_t drain(Fn&& fn) {
    uint64_t n = 0;
    for (unsigned i = 0; i < n_; ++i) {
      ClassState& c = classes_[i];
      while (queued(i) != 0) {
        const Item it = pop_head(c, false);
        bump(c.stats.drained);
        publish_len(c);
        --backlog_;
        ++n;
        fn(it);
      }
      c.deficit = 0;
    }
    for (Band& b : bands_) b.in_turn = false;
    return n;
  }

  uint64_t backlog() const { return backlog_; }  // owner only; others: port_stats().backlog
  // cls < num_classes() (as for class_name and class_rate).
  ClassStats class_stats(unsigned cls) const;
  PortStats port_stats() const;
  // Any thread: the n tenants with the most drops, most first (ties: lower id first); tenants
  // without drops are left out.
  std::vector<TenantDrops> top_tenant_drops(size_t n) const;

 private:
  struct Counters {
    std::atomic<uint64_t> enq_packets{0}, enq_bytes{0}, tx_packets{0}, tx_bytes{0}, drop_depth{0},
        drop_ttl{0}, drained{0}, queue_len{0}, stall_clamps{0}, drop_subqueue{0}, drop_aqm{0},
        ecn_marked{0}, active_subqueues{0};
  };
  struct ClassState {
    std::string name;
    uint64_t quantum = 0;    // bytes per DRR turn
    uint64_t ttl_ticks = 0;  // 0: no TTL
    uint64_t deficit = 0;
    config::Fairness fairness = config::Fairness::kNone;
    ClassQueue queue;  // fairness: none
    FairQueue fair;    // fairness: tenant | flow
    CodelParams aqm;   // target 0: no AQM
    Codel codel;       // the FIFO's (a fair class's sub-queues hold their own)
    Timeline cap;
    Counters stats;
  };
  // Classes of one priority, served by DRR among themselves: order_[begin, end), the DRR
  // position pos (order_[begin + pos] has the turn when in_turn, or gets it next).
  struct Band {
    unsigned begin = 0;
    unsigned end = 0;
    unsigned pos = 0;
    bool in_turn = false;
  };
  enum DropCause : unsigned { kCauseDepth, kCauseTtl, kCauseAqm, kCauses };
  // Where poll() puts expired packets.
  struct ExpiredSink {
    Item* out;
    unsigned max;
    unsigned n;
  };

  static void bump(std::atomic<uint64_t>& a, uint64_t d = 1) {
    a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  // quantum, TTL, AQM and cap of one class from its config (construction and apply()).
  void configure(ClassState& s, const config::Class& c, uint64_t now);
  // The priority bands from the classes' priorities (construction and apply()).
  void build_bands(const std::vector<config::Class>& classes);
  uint32_t queued(unsigned cls) const {
    const ClassState& c = classes_[cls];
    return c.fairness == config::Fairness::kNone ? c.queue.size() : c.fair.size();
  }
  static Item& head(ClassState& c) {
    return c.fairness == config::Fairness::kNone ? c.queue.front() : c.fair.front();
  }
  // Removes the head; `sent`: it departs (a fair class charges its sub-queue's credit).
  Item pop_head(ClassState& c, bool sent) {
    if (c.fairness != config::Fairness::kNone) return c.fair.pop(sent);
    const Item it = c.queue.pop();
    if (c.queue.empty()) c.codel.on_empty();
    return it;
  }
  void publish_len(ClassState& c) {
    if (c.fairness == config::Fairness::kNone) {
      c.stats.queue_len.store(c.queue.size(), std::memory_order_relaxed);
    } else {
      c.stats.queue_len.store(c.fair.size(), std::memory_order_relaxed);
      c.stats.active_subqueues.store(c.fair.active(), std::memory_order_relaxed);
    }
  }
  // Moves class c's head into the sink as a drop of `cause`; false when the sink is full.
  bool drop_head(ClassState& c, ExpiredSink& sink, DropCause cause);
  static uint16_t tenant_id(uint32_t tenant) {
    return tenant <= kMaxTenantId ? static_cast<uint16_t>(tenant) : 0;
  }
  static Item item_of(const EnqueueReq& r) {
    return Item{r.pkt, r.frame_len, tenant_id(r.tenant), r.ect ? Item::kEct : uint8_t{0},
                r.enq_tsc};
  }
  void count_tenant_drop(uint16_t tenant, DropCause cause, uint64_t n = 1) {
    bump(tenant_drops_[size_t{tenant} * kCauses + cause], n);
  }
  bool ready(unsigned cls, uint64_t now, ExpiredSink& sink);
  int pick(uint64_t now, ExpiredSink& sink);
  int pick_in_band(Band& b, uint64_t now, ExpiredSink& sink);
  int pick_next_turn(Band& b, uint64_t now, ExpiredSink& sink);
  Departure take(unsigned cls, uint64_t now, bool first_in_slot, Fixed* slot);
  void publish_tx(const Departure* out, unsigned n);
  unsigned take_unlimited_run(uint64_t now, Departure* out, unsigned max, Fixed slot);
  uint64_t renew_sole_turn(unsigned cls, uint64_t deficit, uint32_t len);

  uint64_t tsc_hz_;
  uint32_t batch_;
  uint32_t max_catchup_;
  unsigned n_;
  std::unique_ptr<ClassState[]> classes_;
  Timeline port_;
  uint64_t backlog_ = 0;
  // Class indexes by (priority, index), and the bands of equal priority over it, highest
  // priority first; cur_band_: the band of the last pick.
  std::vector<unsigned> order_;
  std::vector<Band> bands_;
  unsigned cur_band_ = 0;
  std::atomic<uint64_t> drop_bad_class_{0};
  std::atomic<uint64_t> port_clamps_{0};
  // Drops per tenant id (0..kMaxTenantId) and cause, at [tenant * kCauses + cause].
  std::unique_ptr<std::atomic<uint64_t>[]> tenant_drops_;
};

}  // namespace dripgate::dataplane
