#include "dataplane/fastpath.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "dataplane/class_cache.h"
#include "dataplane/ecn.h"
#include "dataplane/group_by_class.h"
#include "dataplane/parse.h"
#include "dataplane/parse_mbuf.h"

namespace dripgate::dataplane {

namespace {
// TX attempts for one burst before the rest is dropped and counted (tx_full). A PMD whose ring
// is full frees descriptors as the NIC sends, so a few immediate retries usually suffice; more
// would hold up the timeline for everyone else.
constexpr unsigned kTxRetries = 8;

uint64_t ns_to_ticks(uint64_t ns) {
  return ns * rte_get_tsc_hz() / 1000000000ULL;
}
}  // namespace

struct Fastpath::RxOut {
  // The packets to hand on, in arrival order, and their classes' groups (split layout: unshaped
  // frames too, in the group of kPassCls). The burst is received into keep[] and compacted in
  // place. The single layout ships them from here (ship_single); the split layout copies them
  // into shaped[], partitioned by class, for its ring.
  rte_mbuf* keep[kBurst];
  unsigned n_keep = 0;
  ClassGroups<kBurst> groups;
  // The received frames' rte_pktmbuf_pkt_len, read while parse_burst has the mbuf at hand:
  // len[i] is keep[i]'s as long as nothing was taken out (n_keep == n_rx), and bytes their sum.
  uint32_t len[kBurst];
  uint64_t bytes = 0;
  // What the scheduler is told of keep[k] beside its class (EnqueueReq): its tag's tenant, 16
  // bits of its 5-tuple hash, and whether it is ECN-capable.
  uint32_t tenant[kBurst];
  uint16_t flow[kBurst];
  bool ect[kBurst];
  Handoff shaped[kBurst];
  unsigned n_shaped = 0;
  rte_mbuf* pass[kBurst];
  unsigned n_pass = 0;
  rte_mbuf* drop[kBurst];
  unsigned n_drop = 0;
  unsigned n_rx = 0;
  void reset() { n_keep = n_shaped = n_pass = n_drop = n_rx = 0; }
  // keep[0, n) are frames of no flow (non-IP): no tenant, flow 0, not ECN-capable.
  void no_flows(unsigned n) {
    std::fill_n(tenant, n, 0u);
    std::fill_n(flow, n, uint16_t{0});
    std::fill_n(ect, n, false);
  }
};

// One RX lcore's own state. Only that lcore touches it, but for the mailbox, which the main
// lcore posts to.
struct Fastpath::RxLane {
  Fastpath* fp = nullptr;
  unsigned lcore = 0;
  std::vector<uint16_t> queues;                // the RX queues it polls, of both ports
  uint16_t tx_queue = 0;                       // its own client-port TX queue (reverse path)
  unsigned next_client = 0, next_cluster = 0;  // round robin over `queues`
  rte_ring* ring = nullptr;                    // split layout: to the drip lcore
  RxStats* stats = nullptr;
  RxMailbox mailbox;
  ClassCache cache;  // the classes of the IPv4 flows it has seen lately
  // Changed only through the mailbox.
  const Classifier* classifier = nullptr;
  config::UnknownFlows unknown = config::UnknownFlows::kDefault;
};

std::vector<std::vector<uint16_t>> rx_queues_by_lcore(uint16_t rx_queues, size_t n_lcores) {
  std::vector<std::vector<uint16_t>> by(n_lcores);
  for (uint16_t q = 0; q < rx_queues; ++q) by[q % n_lcores].push_back(q);
  return by;
}

Fastpath::Fastpath(const FastpathParams& p, Scheduler& sched, FlowTable& flows,
                   const Classifier& classifier, Stats& stats)
    : p_(p), sched_(sched), flows_(flows), stats_(stats) {
  if (p_.unknown == config::UnknownFlows::kDefault &&
      (p_.default_cls < 0 || static_cast<unsigned>(p_.default_cls) >= sched_.num_classes()))
    throw std::invalid_argument("unknown_flows is 'default' but there is no class 'default'");
  if (p_.rx_lcores.empty() || stats_.rx.size() != p_.rx_lcores.size())
    throw std::invalid_argument("one RX counter block per RX lcore");
  if (p_.rx_queues < p_.rx_lcores.size())
    throw std::invalid_argument("fewer RX queues than RX lcores");
  margin_ticks_ = ns_to_ticks(150);
  prep_ticks_ = ns_to_ticks(250);
  untagged_entry_ticks_ = rte_get_tsc_hz();
  rx_cost_fixed_ = ns_to_ticks(300);
  rx_cost_per_pkt_ = ns_to_ticks(60);
  const auto queues = rx_queues_by_lcore(p_.rx_queues, p_.rx_lcores.size());
  for (size_t i = 0; i < p_.rx_lcores.size(); ++i) {
    auto lane = std::make_unique<RxLane>();
    lane->fp = this;
    lane->lcore = p_.rx_lcores[i];
    lane->queues = queues[i];
    lane->tx_queue = static_cast<uint16_t>(i);
    lane->stats = &stats_.rx[i];
    lane->classifier = &classifier;
    lane->unknown = p_.unknown;
    if (split()) {
      std::string name = fmt::format("dg_handoff_{}", lane->lcore);
      lane->ring = rte_ring_create_elem(name.c_str(), sizeof(Handoff), p_.ring_size,
                                        rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (lane->ring == nullptr)
        throw std::runtime_error(
            fmt::format("cannot create the hand-over ring: {}", rte_strerror(rte_errno)));
    }
    lanes_.push_back(std::move(lane));
  }
}

Fastpath::~Fastpath() {
  if (launched_) stop_and_wait();
  for (auto& lane : lanes_) rte_ring_free(lane->ring);
}

std::vector<RxMailbox*> Fastpath::rx_mailboxes() {
  std::vector<RxMailbox*> m;
  for (auto& lane : lanes_) m.push_back(&lane->mailbox);
  return m;
}

void Fastpath::launch() {
  auto check = [](unsigned l, const std::string& what) {
    if (l >= RTE_MAX_LCORE || !rte_lcore_is_enabled(l))
      throw std::runtime_error(fmt::format(
          "dataplane.lcores.{} = {} is not an lcore enabled in the EAL args (-l/--lcores)", what,
          l));
    if (l == rte_get_main_lcore())
      throw std::runtime_error(fmt::format(
          "dataplane.lcores.{} = {} is the main lcore, which serves the control socket; use a "
          "worker lcore",
          what, l));
  };
  // The loader checks these too; the command line's --rx-lcore/--drip-lcore are checked here.
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const std::string what = lanes_.size() > 1 ? fmt::format("rx[{}]", i) : "rx";
    check(lanes_[i]->lcore, what);
    for (size_t j = 0; j < i; ++j)
      if (lanes_[j]->lcore == lanes_[i]->lcore)
        throw std::runtime_error(
            fmt::format("dataplane.lcores.{}: lcore {} is listed twice", what, lanes_[i]->lcore));
    if (lanes_.size() > 1 && lanes_[i]->lcore == p_.drip_lcore)
      throw std::runtime_error(fmt::format(
          "dataplane.lcores.{}: with several RX lcores the drip lcore ({}) must be another one",
          what, p_.drip_lcore));
  }
  check(p_.drip_lcore, "drip");
  auto launch_one = [](lcore_function_t* fn, void* arg, unsigned l) {
    if (int rc = rte_eal_remote_launch(fn, arg, l); rc != 0)
      throw std::runtime_error(fmt::format("cannot launch lcore {}: {}", l, rte_strerror(-rc)));
  };
  if (!split()) {
    launch_one(
        [](void* a) {
          auto* l = static_cast<RxLane*>(a);
          return l->fp->run_single(*l);
        },
        lanes_[0].get(), lanes_[0]->lcore);
    launched_ = true;
    return;
  }
  // Counted before any RX lcore runs, so the drip lcore cannot see zero too early.
  rx_running_.store(static_cast<unsigned>(lanes_.size()), std::memory_order_release);
  launch_one([](void* a) { return static_cast<Fastpath*>(a)->run_drip(); }, this, p_.drip_lcore);
  launched_ = true;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    try {
      launch_one(
          [](void* a) {
            auto* l = static_cast<RxLane*>(a);
            return l->fp->run_rx(*l);
          },
          lanes_[i].get(), lanes_[i]->lcore);
    } catch (...) {
      // The lanes not launched will never end by themselves: let the drip lcore finish.
      rx_running_.fetch_sub(static_cast<unsigned>(lanes_.size() - i), std::memory_order_acq_rel);
      running_.store(false, std::memory_order_release);
      throw;
    }
  }
}

void Fastpath::stop_and_wait() {
  running_.store(false, std::memory_order_release);
  if (!launched_) return;
  for (auto& lane : lanes_) rte_eal_wait_lcore(lane->lcore);
  if (split()) rte_eal_wait_lcore(p_.drip_lcore);
  launched_ = false;
}

// How many packets an RX pass may take in `slack` ticks without making the next departure late.
unsigned Fastpath::budget(uint64_t slack) const {
  if (slack == UINT64_MAX) return kBurst;
  uint64_t overhead = margin_ticks_ + prep_ticks_ + rx_cost_fixed_;
  if (slack <= overhead) return 0;
  uint64_t n = (slack - overhead) / std::max<uint64_t>(rx_cost_per_pkt_, 1);
  return static_cast<unsigned>(std::min<uint64_t>(n, kBurst));
}

// Moving averages (1/16) of an RX pass's fixed and per-packet cost: a one-off preemption moves
// them a little, a slower machine moves them for good.
// A sample is capped at twice the estimate plus the margin: a pass during which the thread was
// preempted (milliseconds) must not inflate the estimate, or RX would be starved until the
// queue runs dry and the idle time would cost rate. A really slower pass still raises the
// estimate geometrically, pass by pass.
void Fastpath::note_rx_cost(uint64_t ticks, unsigned pkts) {
  if (pkts == 0) {
    const uint64_t s = std::min(ticks, 2 * rx_cost_fixed_ + margin_ticks_);
    rx_cost_fixed_ = rx_cost_fixed_ - (rx_cost_fixed_ >> 4) + (s >> 4);
    return;
  }
  const uint64_t var = ticks > rx_cost_fixed_ ? (ticks - rx_cost_fixed_) / pkts : 0;
  const uint64_t s = std::min(var, 2 * rx_cost_per_pkt_ + margin_ticks_ / 8);
  rx_cost_per_pkt_ = rx_cost_per_pkt_ - (rx_cost_per_pkt_ >> 4) + (s >> 4);
}

// A received burst, parsed: the common frames by the inline parser (their keys packed in k4[]
// in arrival order, at[i] = frame i's place there, hash4[j] = FlowTable::hash_ipv4(k4[j]),
// ect4[j] from the ECN bits), the others by parse() (at[i] = kGeneral, pp[i] and st[i]).
// cls4[j] is the class of key j before unknown_flows (a tag, a rule, or kNoMatch), tenant4[j]
// its tag's tenant (0: none); tagged[i] is the flow table's class for a general frame i, or
// kNoMatch, tenant[i] its tenant and hash[i] its 5-tuple's hash (the flow table's, as hash4's).
struct Fastpath::Burst {
  static constexpr uint8_t kGeneral = 0xFF;
  uint8_t at[kBurst];
  Ipv4Key k4[kBurst];
  uint32_t hash4[kBurst];
  uint8_t dscp4[kBurst];
  bool ect4[kBurst];
  unsigned n4;
  ParseStatus st[kBurst];
  ParsedPacket pp[kBurst];
  int cls4[kBurst];
  uint32_t tenant4[kBurst];
  int tagged[kBurst];
  uint32_t tenant[kBurst];
  uint32_t hash[kBurst];
};

namespace {
// The 16 bits of a flow's hash the scheduler gets: the high ones, as the low ones index the
// ClassCache's sets and the flow table's filter.
inline uint16_t flow_bits(uint32_t hash) {
  return static_cast<uint16_t>(hash >> 16);
}
}  // namespace

unsigned Fastpath::parse_burst(rte_mbuf* const* pkts, unsigned n, Burst& b, uint32_t* frame_len,
                               uint64_t* bytes) {
  // The leading run of untagged non-IP frames first, with nothing stored per frame but its
  // length: when it is the whole burst (every frame of net_null's, say) the caller reads
  // nothing else of b. Then at[] and st[] of that run, and the rest frame by frame. A frame
  // is_non_ip_fast() takes is never one parse_ipv4_fast() takes (not the IPv4 ethertype), so
  // the order of the two tests does not matter.
  uint64_t sum = 0;
  unsigned lead = 0;
  for (; lead < n; ++lead) {
    const rte_mbuf* m = pkts[lead];
    if (!is_non_ip_fast(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m))) break;
    frame_len[lead] = rte_pktmbuf_pkt_len(m);
    sum += frame_len[lead];
  }
  b.n4 = 0;
  *bytes = sum;
  if (lead == n) return n;
  if (lead != 0) {  // a library call each, even for no byte
    std::memset(b.at, Burst::kGeneral, lead);
    std::memset(b.st, static_cast<int>(ParseStatus::kNotIp), lead);
  }
  // Frame i, the j-th common frame so far: parsed into k4[j], hashed into hash4[j].
  auto common = [&](unsigned i, unsigned j) {
    Ipv4Key key;
    const uint8_t* data = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
    if (!parse_ipv4_fast(data, rte_pktmbuf_data_len(pkts[i]), &key, &b.dscp4[j])) return false;
    // The TOS byte of the header parse_ipv4_fast took (untagged Ethernet, so at 15): its ECN.
    b.ect4[j] = ect(data[15] & 3);
    // Hashed while the key is at hand. The key is hashed from a local, held in registers,
    // and stored after: hashed from b.k4, the CRC's loads waited for the key's store to be
    // forwarded, on every packet. Its ClassCache set is not prefetched: the 128 KiB of sets
    // stay in L2, classify_burst's finds are independent loads the out-of-order core
    // overlaps, and a prefetch per packet costs more than it hides (ARCHITECTURE §5, "What a
    // packet costs").
    const uint32_t h = FlowTable::hash_ipv4(key);
    b.k4[j] = key;
    b.hash4[j] = h;
    return true;
  };
  unsigned i = lead, n4 = 0;
  if (lead == 0) {
    // A burst that starts with common frames: their at[i] is i, written only if a general
    // frame follows, since the caller reads at[] only then.
    for (; i < n; ++i) {
      const uint32_t len = rte_pktmbuf_pkt_len(pkts[i]);
      if (!common(i, i)) [[unlikely]]
        break;
      frame_len[i] = len;
      sum += len;
    }
    b.n4 = n4 = i;
    *bytes = sum;
    if (i == n) return 0;
    for (unsigned k = 0; k < n4; ++k) b.at[k] = static_cast<uint8_t>(k);
  }
  unsigned n_non_ip = lead;
  for (; i < n; ++i) {
    frame_len[i] = rte_pktmbuf_pkt_len(pkts[i]);
    sum += frame_len[i];
    if (common(i, n4)) [[likely]] {
      b.at[i] = static_cast<uint8_t>(n4++);
    } else {
      const uint8_t* data = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
      const uint32_t len = rte_pktmbuf_data_len(pkts[i]);
      b.at[i] = Burst::kGeneral;
      // pp[i] is read only for kOk: a non-IP frame needs its status alone. A frame in several
      // segments (longer than one mbuf: dataplane.mtu) is parsed across them; the inline
      // parsers above saw only its first segment, so an IPv4 frame longer than it got here.
      if (is_non_ip_fast(data, len)) {
        b.st[i] = ParseStatus::kNotIp;
        ++n_non_ip;
      } else if (pkts[i]->nb_segs == 1) [[likely]] {
        b.st[i] = parse(data, len, &b.pp[i]);
      } else {
        b.st[i] = parse_mbuf(pkts[i], &b.pp[i]);
      }
    }
  }
  b.n4 = n4;
  *bytes = sum;
  return n_non_ip;
}

// The classes of a parsed burst's IPv4 keys: the lane's ClassCache first; the keys it does not
// hold go to one bulk probe of the flow table (only keys whose hash a tagged key may have, with
// the hash computed once here), then the rules, and are remembered: a tagged flow until the tag
// expires or the table's last-seen refresh period ends, whichever comes first, so a busy one
// still refreshes its last-seen time; an untagged one (a rule's class or none) for up to
// untagged_entry_ticks_, as nothing but a change of the table or of the rules, each of which
// forgets every entry, could change its class. The general frames' tags come from one bulk
// probe of each table. A tag added meanwhile is seen from the next burst on.
void Fastpath::classify_burst(RxLane& lane, unsigned n, uint64_t now, Burst& b) {
  ClassCache& cache = lane.cache;
  cache.observe(flows_.generation());
  const bool any_tag = flows_.size() != 0;  // static rules alone, or no admitted flow yet
  const uint32_t* const hashes = b.hash4;   // computed by parse_burst
  uint8_t miss[kBurst];
  unsigned n_miss = 0;
  const ClassCache::Reader reader = cache.reader();
  for (unsigned j = 0; j < b.n4; ++j) {
    if (!reader.find(b.k4[j], b.dscp4[j], hashes[j], now, &b.cls4[j], &b.tenant4[j]))
      miss[n_miss++] = static_cast<uint8_t>(j);
  }
  if (n_miss != 0) {
    int found[kBurst];
    uint32_t tenants[kBurst];
    uint64_t expires[kBurst];
    if (any_tag) {
      Ipv4Key keys[kBurst];
      uint32_t miss_hashes[kBurst];
      for (unsigned k = 0; k < n_miss; ++k) {
        keys[k] = b.k4[miss[k]];
        miss_hashes[k] = hashes[miss[k]];
      }
      flows_.lookup_bulk_ipv4(keys, miss_hashes, n_miss, now, found, tenants, expires);
    }
    const Classifier& rules = *lane.classifier;
    const uint64_t tag_until = now + flows_.refresh_ticks();
    const uint64_t rule_until = now + untagged_entry_ticks_;
    for (unsigned k = 0; k < n_miss; ++k) {
      const unsigned j = miss[k];
      int cls = any_tag ? found[k] : FlowTable::kNoMatch;
      uint32_t tenant = 0;
      uint64_t valid_until;
      if (cls >= 0) {
        tenant = tenants[k];
        valid_until = tag_until;
        if (expires[k] != 0) valid_until = std::min(valid_until, expires[k]);
      } else {
        cls = rules.classify_ipv4(b.k4[j].src, b.k4[j].dst, b.dscp4[j]);
        valid_until = rule_until;
      }
      b.cls4[j] = cls;
      b.tenant4[j] = tenant;
      cache.put(b.k4[j], b.dscp4[j], hashes[j], cls, valid_until, tenant);
    }
  }
  if (b.n4 == n) return;
  const FiveTuple* keys[kBurst];
  unsigned idx[kBurst];
  unsigned n_keys = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (b.at[i] != Burst::kGeneral) continue;
    b.tagged[i] = FlowTable::kNoMatch;
    b.tenant[i] = 0;
    if (b.st[i] != ParseStatus::kOk) continue;
    // The flow table's own hash of the key (hash_ipv4 for IPv4, the 40-byte key's CRC for
    // IPv6), so a flow has the same hash whether it came as a common frame or not.
    const FiveTuple& t = b.pp[i].tuple;
    b.hash[i] =
        t.l3 == L3::kIpv4 ? FlowTable::hash_ipv4(to_ipv4_key(t)) : rte_hash_crc(&t, sizeof(t), 0);
    if (any_tag) {
      keys[n_keys] = &t;
      idx[n_keys++] = i;
    }
  }
  if (n_keys == 0) return;
  int found[kBurst];
  uint32_t tenants[kBurst];
  flows_.lookup_bulk(keys, n_keys, now, found, tenants);
  for (unsigned k = 0; k < n_keys; ++k) {
    b.tagged[idx[k]] = found[k];
    b.tenant[idx[k]] = tenants[k];
  }
}

// Frame i of a classified burst, kept as o.keep[k]: its tag's tenant, its flow's hash bits and
// its ECN capability, for the scheduler. A frame of no flow (non-IP) has none of them.
void Fastpath::note_flow(const Burst& b, unsigned i, RxOut& o, unsigned k) {
  uint32_t tenant = 0;
  uint16_t flow = 0;
  bool capable = false;
  if (const unsigned j = b.at[i]; j != Burst::kGeneral) {
    tenant = b.tenant4[j];
    flow = flow_bits(b.hash4[j]);
    capable = b.ect4[j];
  } else if (b.st[i] == ParseStatus::kOk) {
    tenant = b.tenant[i];
    flow = flow_bits(b.hash[i]);
    capable = ect(b.pp[i].ecn);
  }
  o.tenant[k] = tenant;
  o.flow[k] = flow;
  o.ect[k] = capable;
}

// One RX queue per call, in turn. Called once per o.reset(): the burst is received into o.keep.
void Fastpath::rx_client(RxLane& lane, unsigned max, RxOut& o, uint64_t now) {
  rte_mbuf** const pkts = o.keep;
  const uint16_t q = lane.queues[lane.next_client];
  if (++lane.next_client == lane.queues.size()) lane.next_client = 0;
  const unsigned n = rte_eth_rx_burst(p_.client_port, q, pkts, static_cast<uint16_t>(max));
  o.n_rx += n;
  if (n == 0) return;
  RxStats& st = *lane.stats;
  const Classifier* const classifier = lane.classifier;
  st.rx_client.add(n);
  const bool inline_pass = split();
  ClassGroups<kBurst>& groups = o.groups;
  // No software prefetch of the frames: the headers a PMD hands over are in cache or, from a
  // NIC writing into the LLC (DDIO), one miss away, which the out-of-order core overlaps with
  // the previous packet's work; a prefetch per packet costs more than that (ARCHITECTURE §5).
  Burst b;
  const unsigned n_non_ip = parse_burst(pkts, n, b, o.len, &o.bytes);
  if (n_non_ip == n) {
    // Non-IP frames only: one decision for the whole burst, no classification and no pass
    // over the packets. Then the burst is kept as received, in place.
    if (p_.non_ip_cls >= 0) {
      groups.one_group(static_cast<uint32_t>(p_.non_ip_cls), n);
      o.n_keep = n;
      o.no_flows(n);
    } else {
      st.pass_non_ip.add(n);
      if (inline_pass) {
        groups.one_group(kPassCls, n);
        o.n_keep = n;
        o.no_flows(n);
      } else {
        std::copy(pkts, pkts + n, o.pass);
        o.n_pass = n;
        return;
      }
    }
  } else {
    classify_burst(lane, n, now, b);
    // The packets to hand on are grouped by class (ClassGroups), so the scheduler takes one run
    // per class and `classified` is counted once per class. They stay at the front of keep[]
    // (pkts[] itself, compacted in place when some are taken out: the write position never
    // passes the read one).
    if (b.n4 == n && lane.unknown == config::UnknownFlows::kDefault) [[likely]] {
      // Common frames only (at[i] == i) and an unknown flow takes the default class: every
      // packet is kept, in its class or (kNoMatch) the default one; nothing per packet.
      static_assert(static_cast<uint32_t>(FlowTable::kNoMatch) == ClassGroups<kBurst>::kUnset);
      groups.assign(reinterpret_cast<const uint32_t*>(b.cls4), n,
                    static_cast<uint32_t>(p_.default_cls));
      o.n_keep = n;
      std::copy(b.tenant4, b.tenant4 + n, o.tenant);
      for (unsigned k = 0; k < n; ++k) o.flow[k] = flow_bits(b.hash4[k]);
      std::copy(b.ect4, b.ect4 + n, o.ect);
    } else {
      uint32_t kept_cls[kBurst];
      // The counts in locals: stores into the arrays could alias o's counters and force a
      // reload and store of each per packet.
      unsigned n_keep = 0, n_pass = 0, n_drop = 0;
      for (unsigned i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        int cls;
        ParseStatus s = ParseStatus::kOk;
        if (const unsigned j = b.at[i]; j != Burst::kGeneral) [[likely]] {
          cls = b.cls4[j];
        } else {
          cls = b.tagged[i];
          s = b.st[i];
          if (s == ParseStatus::kOk && cls < 0) cls = classifier->classify(b.pp[i]);
        }
        bool pass = false;
        if (s == ParseStatus::kOk) [[likely]] {
          if (cls < 0) {
            switch (lane.unknown) {
              case config::UnknownFlows::kDefault:
                cls = p_.default_cls;
                break;
              case config::UnknownFlows::kDrop:
                st.drop_unknown.add();
                o.drop[n_drop++] = m;
                continue;
              case config::UnknownFlows::kPass:
                st.pass_unknown.add();
                pass = true;
                break;
            }
          }
        } else if (s == ParseStatus::kNotIp) {
          cls = p_.non_ip_cls;
          if (cls < 0) {
            st.pass_non_ip.add();
            pass = true;
          }
        } else {
          st.malformed[static_cast<size_t>(s) % RxStats::kMaxCauses].add();
          o.drop[n_drop++] = m;
          continue;
        }
        if (pass && !inline_pass) {
          o.pass[n_pass++] = m;
          continue;
        }
        kept_cls[n_keep] = pass ? kPassCls : static_cast<uint32_t>(cls);
        note_flow(b, i, o, n_keep);
        pkts[n_keep++] = m;
      }
      o.n_keep = n_keep;
      o.n_pass = n_pass;
      o.n_drop = n_drop;
      if (n_keep == 0) return;
      groups.assign(kept_cls, n_keep);
    }
  }
  finish_rx(st, o, now);
}

// rx_client's end: `classified` per class, and the split layout's hand-over records.
void Fastpath::finish_rx(RxStats& st, RxOut& o, uint64_t now) {
  const ClassGroups<kBurst>& groups = o.groups;
  rte_mbuf** const pkts = o.keep;
  const bool inline_pass = split();
  const unsigned n_groups = groups.size();
  for (unsigned g = 0; g < n_groups; ++g) {
    if (groups.cls(g) != kPassCls) st.classified[groups.cls(g)].add(groups.count(g));
  }
  if (!inline_pass) return;  // the single layout ships them from keep[]: ship_single
  // Split layout: the hand-over records for the ring, one run per class.
  Handoff* out = o.shaped;
  o.n_shaped = o.n_keep;
  auto handoff = [&](unsigned k, uint32_t cls) {
    return cls == kPassCls ? Handoff{pkts[k], now, kPassCls, 0}
                           : Handoff{pkts[k],     now,       cls,     rte_pktmbuf_pkt_len(pkts[k]),
                                     o.tenant[k], o.flow[k], o.ect[k]};
  };
  if (n_groups == 1) {
    const uint32_t cls = groups.cls(0);
    for (unsigned k = 0; k < o.n_keep; ++k) out[k] = handoff(k, cls);
    return;
  }
  unsigned pos = 0;
  groups.partition([&](unsigned g, unsigned k) { out[pos++] = handoff(k, groups.cls(g)); });
}

// Single layout, after rx_client: what enqueue_shaped does with the hand-over records, straight
// from the kept mbufs and their groups. A class the scheduler lets bypass its queue is booked
// and sent at once, the others' packets are queued, one run per class, in the groups' order.
// Returns the TSC read that timed the departures, or 0 if it sent nothing.
uint64_t Fastpath::ship_single(RxOut& o, uint64_t now) {
  const unsigned n = o.n_keep;
  if (n == 0) return 0;
  const ClassGroups<kBurst>& groups = o.groups;
  rte_mbuf** const keep = o.keep;
  const unsigned n_groups = groups.size();
  // Every received frame kept: their lengths, read by parse_burst, are in o.len, in order.
  const bool all = n == o.n_rx;
  unsigned bypass = 0;
  while (bypass < n_groups && sched_.bypasses(groups.cls(bypass))) ++bypass;
  if (all && bypass == n_groups) [[likely]] {
    // Every class leaves at once: booked class by class, sent as received, no copy. Each
    // class's bytes from its members' lengths, the last class's by difference.
    TxRun runs[kBurst];
    uint64_t rest = o.bytes;
    for (unsigned g = 0; g < n_groups; ++g) {
      const uint32_t cls = groups.cls(g), members = groups.members(g);
      uint64_t bytes = rest;
      if (g + 1 != n_groups) {
        bytes = 0;
        for (uint32_t m = members; m != 0; m &= m - 1) bytes += o.len[__builtin_ctz(m)];
        rest -= bytes;
      }
      const unsigned k = groups.count(g);
      const uint32_t last_len = o.len[31 - __builtin_clz(members)];
      runs[g] = TxRun{cls, k, bytes, sched_.depart_now(cls, k, bytes, last_len, now)};
    }
    return transmit(keep, n, runs, n_groups, rte_rdtsc(), &groups);
  }
  // The kept frames' lengths in keep[]'s order: parse_burst's when every frame was kept, else
  // read again (frames were taken out: dropped, or passed in the single layout).
  uint32_t kept_len[kBurst];
  const uint32_t* len_of = o.len;
  if (!all) {
    for (unsigned k = 0; k < n; ++k) kept_len[k] = rte_pktmbuf_pkt_len(keep[k]);
    len_of = kept_len;
  }
  TxList tx;
  Handoff h[kBurst];
  void* refused[kBurst];
  unsigned n_refused = 0;
  for (unsigned g = 0; g < n_groups; ++g) {
    const uint32_t cls = groups.cls(g);
    const uint32_t members = groups.members(g);
    if (sched_.bypasses(cls)) {
      uint64_t bytes = 0;
      uint32_t len = 0;
      const unsigned first = tx.n;
      for (uint32_t m = members; m != 0; m &= m - 1) {
        const unsigned k = static_cast<unsigned>(__builtin_ctz(m));
        len = len_of[k];
        tx.pkts[tx.n++] = keep[k];
        bytes += len;
      }
      const unsigned k = tx.n - first;
      tx.runs[tx.n_runs++] = TxRun{cls, k, bytes, sched_.depart_now(cls, k, bytes, len, now)};
    } else {
      unsigned k = 0;
      for (uint32_t m = members; m != 0; m &= m - 1) {
        const unsigned i = static_cast<unsigned>(__builtin_ctz(m));
        h[k++] = Handoff{keep[i], now, cls, len_of[i], o.tenant[i], o.flow[i], o.ect[i]};
      }
      // Counted by the scheduler (drop_depth / drop_bad_class).
      n_refused += sched_.enqueue_burst(h, k, refused + n_refused);
    }
  }
  const uint64_t t = tx.n ? transmit(tx, rte_rdtsc()) : 0;
  free_refused(refused, n_refused);
  return t;
}

// The packets the scheduler refused (it counted them: drop_depth / drop_bad_class), freed.
void Fastpath::free_refused(void* const* refused, unsigned n) {
  if (n == 0) return;
  rte_mbuf* f[kBurst];
  for (unsigned k = 0; k < n; ++k) f[k] = static_cast<rte_mbuf*>(refused[k]);
  rte_pktmbuf_free_bulk(f, n);
}

// Sends pkts on a port's TX queue with up to kTxRetries retries, counts what left in `sent` and
// frees and counts the rest in `dropped`. Only the owner of that TX queue calls it.
void Fastpath::send_counted(uint16_t port, uint16_t queue, rte_mbuf** pkts, unsigned n,
                            Counter& sent_ctr, Counter& dropped) {
  unsigned sent = 0;
  for (unsigned tries = 0; sent < n && tries <= kTxRetries; ++tries)
    sent += rte_eth_tx_burst(port, queue, pkts + sent, static_cast<uint16_t>(n - sent));
  sent_ctr.add(sent);
  if (sent < n) {
    dropped.add(n - sent);
    rte_pktmbuf_free_bulk(pkts + sent, n - sent);
  }
}

// One of the lane's cluster-port RX queues per call, in turn, to its own client-port TX queue.
unsigned Fastpath::rx_reverse(RxLane& lane, unsigned max) {
  rte_mbuf* pkts[kBurst];
  const uint16_t q = lane.queues[lane.next_cluster];
  if (++lane.next_cluster == lane.queues.size()) lane.next_cluster = 0;
  const unsigned n = rte_eth_rx_burst(p_.cluster_port, q, pkts, static_cast<uint16_t>(max));
  if (n == 0) return 0;
  RxStats& st = *lane.stats;
  st.rx_cluster.add(n);
  send_counted(p_.client_port, lane.tx_queue, pkts, n, st.reverse_tx, st.reverse_drop_tx);
  return n;
}

// Unshaped client->cluster frames; only ever called by the owner of the cluster TX queue.
void Fastpath::send_pass(rte_mbuf** pkts, unsigned n) {
  send_counted(p_.cluster_port, 0, pkts, n, stats_.drip.pass_tx, stats_.drip.pass_drop_tx);
}

// Scheduler owner: queue the classified packets, send the unshaped ones. Each class's packets
// go to the scheduler as one run (one counter update per run); a run the scheduler lets bypass
// its empty, unlimited queue leaves at once.
void Fastpath::enqueue_shaped(const Handoff* in, unsigned n) {
  Handoff tmp[kBurst];
  const Handoff* h = group_by_class<kBurst>(in, n, tmp);
  void* refused[kBurst];
  unsigned n_refused = 0;
  rte_mbuf* pass[kBurst];
  unsigned n_pass = 0;
  TxList now;
  unsigned i = 0;
  while (i < n) {
    const uint32_t cls = h[i].cls;
    if (cls == kPassCls) {
      pass[n_pass++] = static_cast<rte_mbuf*>(h[i].pkt);
      ++i;
      continue;
    }
    unsigned j = i + 1;
    while (j < n && h[j].cls == cls) ++j;
    if (sched_.bypasses(cls)) {
      uint64_t bytes = 0, max_stamp = 0;
      for (unsigned k = i; k < j; ++k) {
        now.pkts[now.n++] = static_cast<rte_mbuf*>(h[k].pkt);
        bytes += h[k].frame_len;
        max_stamp = std::max(max_stamp, h[k].enq_tsc);
      }
      const uint64_t at = sched_.depart_now(cls, j - i, bytes, h[j - 1].frame_len, max_stamp);
      now.runs[now.n_runs++] = TxRun{cls, j - i, bytes, at};
    } else {
      // Counted by the scheduler (drop_depth / drop_bad_class).
      n_refused += sched_.enqueue_burst(h + i, j - i, refused + n_refused);
    }
    i = j;
  }
  if (n_pass) send_pass(pass, n_pass);
  if (now.n) transmit(now, rte_rdtsc());
  free_refused(refused, n_refused);
}

// Scheduler owner: send what is due at `now`, free what expired.
void Fastpath::drip_due(uint64_t now) {
  Departure deps[kBurst];
  Item expired[kBurst];
  unsigned n_exp = 0;
  const unsigned n = sched_.poll(now, deps, kBurst, expired, kBurst, &n_exp);
  if (n_exp) {
    rte_mbuf* f[kBurst];
    for (unsigned i = 0; i < n_exp; ++i) f[i] = static_cast<rte_mbuf*>(expired[i].pkt);
    rte_pktmbuf_free_bulk(f, n_exp);  // counted by the scheduler (drop_ttl)
  }
  if (n == 0) return;
  TxList l;
  l.n = n;
  TxRun* run = nullptr;
  for (unsigned i = 0; i < n; ++i) {
    const Departure& d = deps[i];
    l.pkts[i] = static_cast<rte_mbuf*>(d.pkt);
    // AQM chose to mark rather than drop: the packet leaves with CE set.
    if (d.ce) [[unlikely]]
      mark_ce(l.pkts[i]);
    if (run == nullptr || d.cls != run->cls || d.scheduled_tsc != run->scheduled_tsc) {
      run = &l.runs[l.n_runs++];
      *run = TxRun{d.cls, 0, 0, d.scheduled_tsc};
    }
    ++run->n;
    run->bytes += d.frame_len;
  }
  // Polled up to prep_ticks_ ahead: the departure is ready, now wait for its exact time. A tight
  // loop (PAUSE can take ~50 ns) bounded by prep_ticks_. The TSC read that ends the wait is
  // the first attempt's send time: nothing runs between it and the TX call, and a TSC read
  // costs as much as a few packets' bookkeeping.
  const uint64_t at = std::min(deps[0].scheduled_tsc, now);
  uint64_t t = rte_rdtsc();
  while (t < at) t = rte_rdtsc();
  transmit(l, t);
}

// Scheduler owner: sends l on the cluster port, the first attempt at TSC t, and records each
// departure's error (send TSC - scheduled) and counts it, per run. What the port still refuses
// after kTxRetries is freed and counted (drop_tx).
uint64_t Fastpath::transmit(TxList& l, uint64_t t) {
  return transmit(l.pkts, l.n, l.runs, l.n_runs, t);
}

// transmit() of n mbufs in pkts[], in runs[0, n_runs) (their counts add up to n).
uint64_t Fastpath::transmit(rte_mbuf** pkts, unsigned n, const TxRun* runs, unsigned n_runs,
                            uint64_t t, const ClassGroups<kBurst>* order) {
  const uint64_t t0 = t;
  unsigned sent = rte_eth_tx_burst(p_.cluster_port, 0, pkts, static_cast<uint16_t>(n));
  const unsigned sent0 = sent;  // left at t0; the rest (retries) by t
  for (unsigned tries = 1; sent < n && tries <= kTxRetries; ++tries) {
    stats_.drip.tx_retries.add();
    t = rte_rdtsc();
    sent += rte_eth_tx_burst(p_.cluster_port, 0, pkts + sent, static_cast<uint16_t>(n - sent));
  }
  unsigned pos = 0;
  for (unsigned r = 0; r < n_runs; ++r) {
    const TxRun& run = runs[r];
    ClassCounters& cs = stats_.classes[run.cls];
    // The run's packets in pkts[]: group r's members, or the next run.n.
    const uint32_t members = order != nullptr ? order->members(r) : low_bits(run.n) << pos;
    pos += run.n;
    if ((members & ~low_bits(sent0)) == 0) [[likely]] {
      stats_.drip.error.record_ticks_n(static_cast<int64_t>(t0 - run.scheduled_tsc), run.n);
      cs.late_ticks.set(t0 - run.scheduled_tsc);
      cs.tx_pkts.add(run.n);
      cs.tx_bytes.add(run.bytes);
    } else {  // the TX ring was full: packet by packet
      for (uint32_t m = members; m != 0; m &= m - 1) {
        const unsigned i = static_cast<unsigned>(__builtin_ctz(m));
        if (i >= sent) {
          cs.drop_tx.add();
          rte_pktmbuf_free(pkts[i]);
          continue;
        }
        stats_.drip.error.record_ticks(
            static_cast<int64_t>((i < sent0 ? t0 : t) - run.scheduled_tsc));
        cs.late_ticks.set((i < sent0 ? t0 : t) - run.scheduled_tsc);
        cs.tx_pkts.add();
        cs.tx_bytes.add(rte_pktmbuf_pkt_len(pkts[i]));
      }
    }
  }
  if (sent) {
    if (stats_.drip.first_tsc.get() == 0) stats_.drip.first_tsc.set(t0);
    stats_.drip.last_tsc.set(t);
    stats_.drip.departures.add(sent);
  }
  return t;
}

bool Fastpath::check_drip_mailbox() {
  return drip_mailbox_.poll([this](const DripChange& r) {
    MailboxResult res = apply_drip_change(sched_, r, rte_rdtsc());
    if (res.ok && r.reconfig == nullptr) stats_.drip.rate_updates.add();
    return res;
  });
}

// Between bursts: no classify() is running, so the old classifier is no longer referenced once
// this answers, and the main lcore may free it.
bool Fastpath::check_rx_mailbox(RxLane& lane) {
  return lane.mailbox.poll([this, &lane](const RxChange& r) {
    if (r.classifier == nullptr ||
        (r.unknown == config::UnknownFlows::kDefault && p_.default_cls < 0))
      return MailboxResult{false, "unknown_flows is 'default' but there is no class 'default'"};
    lane.classifier = r.classifier;
    lane.unknown = r.unknown;
    lane.cache.invalidate();  // it holds the old rules' classes
    return MailboxResult{true, {}};
  });
}

// Scheduler owner, after RX has stopped: keep the timeline for up to drain_ms, then free what
// is left (the scheduler counts it as drained = drops.shutdown).
void Fastpath::drain_and_free() {
  const uint64_t deadline = rte_rdtsc() + p_.drain_ms * (rte_get_tsc_hz() / 1000);
  while (sched_.backlog() != 0) {
    const uint64_t now = rte_rdtsc();
    if (now >= deadline) break;
    check_drip_mailbox();
    if (sched_.next_departure() <= now) {
      drip_due(now);
    } else {
      rte_pause();
    }
  }
  sched_.drain([](const Item& it) { rte_pktmbuf_free(static_cast<rte_mbuf*>(it.pkt)); });
}

int Fastpath::run_single(RxLane& lane) {
  const unsigned lcore = rte_lcore_id();
  flows_.register_reader(lcore);
  RxOut out;
  OpenPass pass;
  // The TSC read that timed the last pass's departures, when nothing queued waits and only an
  // empty poll followed it: the next turn's now, one TSC read (a VM exit on some hypervisors)
  // fewer per burst at unlimited rates. It makes the next burst's arrival look older by that poll,
  // no more; a mailbox request that ran since, or anything queued, takes a fresh read.
  uint64_t sent_at = 0;
  while (running_.load(std::memory_order_relaxed)) {
    const bool applied = check_drip_mailbox() | check_rx_mailbox(lane);
    const uint64_t now = sent_at != 0 && !applied ? sent_at : rte_rdtsc();
    sent_at = 0;
    close_pass(pass, now);
    const uint64_t nd = sched_.next_departure();
    unsigned max;
    if (nd <= now + prep_ticks_) {
      // Due, or due within prep_ticks_: prepare it now, drip_due waits for the exact time.
      const uint64_t at = std::max(now, nd);
      const uint64_t before = stats_.drip.departures.get();
      drip_due(at);
      if (stats_.drip.departures.get() != before || sched_.next_departure() > at) continue;
      max = kBurst;  // due but nothing released (all capped): do not starve RX
    } else {
      max = budget(nd == UINT64_MAX ? UINT64_MAX : nd - now);
    }
    if (max == 0) {
      flows_.quiescent(lcore);
      while (rte_rdtsc() + prep_ticks_ < nd) rte_pause();
      continue;
    }
    out.reset();
    rx_client(lane, max, out, now);
    flows_.quiescent(lcore);
    const uint64_t t = ship_single(out, now);
    if (out.n_pass) send_pass(out.pass, out.n_pass);
    if (out.n_drop) rte_pktmbuf_free_bulk(out.drop, out.n_drop);
    const unsigned reversed = rx_reverse(lane, max);
    pass = OpenPass{now, out.n_rx, true};
    if (reversed == 0 && sched_.next_departure() == UINT64_MAX) sent_at = t;
    // What was just queued is often due at once (always at unlimited rate): send it in this
    // pass rather than the next, which would spend a mailbox check, a TSC read and two
    // next_departure() calls to reach the same drip_due(). Only then is the TSC read here,
    // closing the pass before the departures; else the next turn's read closes it.
    if (out.n_keep != 0 && sched_.next_departure() != UINT64_MAX) {
      const uint64_t after = rte_rdtsc();
      close_pass(pass, after);
      if (sched_.next_departure() <= after) drip_due(after);
    }
  }
  flows_.quiescent(lcore);
  flows_.unregister_reader(lcore);
  drain_and_free();
  return 0;
}

int Fastpath::run_rx(RxLane& lane) {
  const unsigned lcore = rte_lcore_id();
  flows_.register_reader(lcore);
  RxOut out;
  while (running_.load(std::memory_order_relaxed)) {
    check_rx_mailbox(lane);
    const uint64_t now = rte_rdtsc();
    out.reset();
    rx_client(lane, kBurst, out, now);
    flows_.quiescent(lcore);
    if (out.n_shaped) {
      const unsigned q = rte_ring_sp_enqueue_burst_elem(lane.ring, out.shaped, sizeof(Handoff),
                                                        out.n_shaped, nullptr);
      for (unsigned i = q; i < out.n_shaped; ++i)
        out.drop[out.n_drop++] = static_cast<rte_mbuf*>(out.shaped[i].pkt);
      lane.stats->drop_ring.add(out.n_shaped - q);
    }
    if (out.n_drop) rte_pktmbuf_free_bulk(out.drop, out.n_drop);
    rx_reverse(lane, kBurst);
  }
  flows_.quiescent(lcore);
  flows_.unregister_reader(lcore);
  rx_running_.fetch_sub(1, std::memory_order_acq_rel);
  return 0;
}

int Fastpath::run_drip() {
  Handoff h[kBurst];
  OpenPass pass;
  for (;;) {
    check_drip_mailbox();
    const uint64_t now = rte_rdtsc();
    close_pass(pass, now);
    const uint64_t nd = sched_.next_departure();
    const bool due = nd <= now + prep_ticks_;
    if (due) {
      const uint64_t at = std::max(now, nd);
      const uint64_t before = stats_.drip.departures.get();
      drip_due(at);
      if (stats_.drip.departures.get() != before || sched_.next_departure() > at) continue;
    }
    const unsigned max = due ? kBurst : budget(nd == UINT64_MAX ? UINT64_MAX : nd - now);
    if (max == 0) {
      while (rte_rdtsc() + prep_ticks_ < nd) rte_pause();
      continue;
    }
    // Read before the rings: once it is zero, whatever the RX lcores handed over is in them.
    const bool rx_finished = rx_running_.load(std::memory_order_acquire) == 0;
    // One ring per pass, the first non-empty one from next_lane_ on, which then moves past it:
    // under overload every RX lcore gets its turn.
    unsigned n = 0;
    for (size_t k = 0; k < lanes_.size() && n == 0; ++k) {
      RxLane& lane = *lanes_[next_lane_];
      if (++next_lane_ == lanes_.size()) next_lane_ = 0;
      n = rte_ring_sc_dequeue_burst_elem(lane.ring, h, sizeof(Handoff), max, nullptr);
    }
    if (n) {
      enqueue_shaped(h, n);
      pass = OpenPass{now, n, true};
    } else if (rx_finished) {
      break;  // RX has stopped and everything it handed over is in the scheduler
    }
  }
  drain_and_free();
  return 0;
}

}  // namespace dripgate::dataplane
