#include "dataplane/scheduler.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace dripgate::dataplane {
namespace {

std::string rate_error(const std::string& field, double pps, double bps, uint64_t tsc_hz) {
  if (std::string e = check_rate(pps, false, tsc_hz); !e.empty()) return field + "rate_pps: " + e;
  if (std::string e = check_rate(bps, true, tsc_hz); !e.empty()) return field + "rate_bps: " + e;
  return {};
}

unsigned next_index(unsigned i, unsigned n) {
  return i + 1 == n ? 0 : i + 1;
}

}  // namespace

std::vector<std::string> Scheduler::validate(const config::Drip& drip,
                                             const std::vector<config::Class>& classes,
                                             uint64_t tsc_hz) {
  std::vector<std::string> errors;
  auto fail = [&](std::string e) { errors.push_back(std::move(e)); };
  if (tsc_hz == 0 || tsc_hz > kMaxTscHz) {
    // Every rate check below divides by it: nothing else can be judged.
    return {"tsc_hz: must be in 1..2^40, got " + std::to_string(tsc_hz)};
  }
  if (drip.batch == 0) fail("drip.batch: must be >= 1");
  if (std::string e = rate_error("drip.", drip.rate_pps, drip.rate_bps, tsc_hz); !e.empty()) {
    fail(std::move(e));
  }
  if (classes.empty()) fail("classes: at least one class is required");
  if (classes.size() > std::numeric_limits<uint32_t>::max()) fail("classes: too many");
  for (size_t i = 0; i < classes.size(); ++i) {
    const config::Class& c = classes[i];
    const std::string field = "classes." + (c.name.empty() ? std::to_string(i) : c.name) + ".";
    if (c.weight == 0) fail(field + "weight: must be >= 1");
    if (c.queue_depth == 0) fail(field + "queue_depth: must be >= 1");
    if (c.queue_depth > (1u << 30)) fail(field + "queue_depth: must be <= 2^30");
    if (c.fairness != config::Fairness::kNone &&
        (c.subqueues == 0 || c.subqueues > FairQueue::kMaxSubqueues))
      fail(field + "subqueues: must be in 1..65536");
    if (c.aqm && !(c.aqm->target_ms > 0 && c.aqm->interval_ms >= c.aqm->target_ms))
      fail(field + "aqm: target_ms must be > 0 and interval_ms >= target_ms");
    if (std::string e = rate_error(field, c.rate_pps, c.rate_bps, tsc_hz); !e.empty()) {
      fail(std::move(e));
    }
    for (size_t j = 0; j < i; ++j) {
      if (classes[j].name == c.name) fail(field + "name: duplicate");
    }
  }
  return errors;
}

Scheduler::Scheduler(const config::Drip& drip, const std::vector<config::Class>& classes,
                     uint64_t tsc_hz)
    : tsc_hz_(tsc_hz),
      batch_(drip.batch),
      max_catchup_(drip.max_catchup),
      n_(static_cast<unsigned>(classes.size())) {
  if (std::vector<std::string> errors = validate(drip, classes, tsc_hz); !errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "; ") + e;
    throw std::invalid_argument(all);
  }
  port_.set_rate(drip.rate_pps, drip.rate_bps, tsc_hz, 0);
  classes_ = std::make_unique<ClassState[]>(n_);
  for (unsigned i = 0; i < n_; ++i) {
    ClassState& s = classes_[i];
    const config::Class& c = classes[i];
    s.name = c.name;
    s.fairness = c.fairness;
    if (c.fairness == config::Fairness::kNone) {
      s.queue = ClassQueue(c.queue_depth);
    } else {
      s.fair = FairQueue(c.queue_depth, c.subqueues, c.tenant_depth, kQuantumBytes);
    }
    configure(s, c, 0);
  }
  build_bands(classes);
  tenant_drops_ = std::make_unique<std::atomic<uint64_t>[]>((size_t{kMaxTenantId} + 1) * kCauses);
}

Scheduler::~Scheduler() = default;

void Scheduler::configure(ClassState& s, const config::Class& c, uint64_t now) {
  s.quantum = uint64_t{c.weight} * kQuantumBytes;
  s.ttl_ticks = static_cast<uint64_t>(Fixed{c.ttl_ms} * tsc_hz_ / 1000);
  if (c.ttl_ms != 0 && s.ttl_ticks == 0) s.ttl_ticks = 1;
  s.aqm = CodelParams{};
  if (c.aqm) {
    auto ticks = [&](double ms) {
      return std::max<uint64_t>(1, static_cast<uint64_t>(ms * static_cast<double>(tsc_hz_) / 1e3));
    };
    s.aqm.target = ticks(c.aqm->target_ms);
    s.aqm.interval = ticks(c.aqm->interval_ms);
    s.aqm.ecn = c.aqm->ecn;
  }
  // An unchanged rate is left alone rather than re-based (which would change nothing anyway).
  if (s.cap.rate_pps() != c.rate_pps || s.cap.rate_bps() != c.rate_bps)
    s.cap.set_rate(c.rate_pps, c.rate_bps, tsc_hz_, now);
}

std::vector<std::string> Scheduler::prepare(const config::Drip& drip,
                                            const std::vector<config::Class>& classes,
                                            SchedulerReconfig* out) const {
  std::vector<std::string> errors = validate(drip, classes, tsc_hz_);
  bool same = classes.size() == n_;
  for (unsigned i = 0; same && i < n_; ++i) same = classes[i].name == classes_[i].name;
  for (unsigned i = 0; same && i < n_; ++i) {
    const ClassState& c = classes_[i];
    const bool fair = c.fairness != config::Fairness::kNone;
    if (classes[i].fairness != c.fairness || (fair && classes[i].subqueues != c.fair.subqueues())) {
      errors.push_back("classes." + c.name +
                       ".fairness: a class's fairness and subqueues cannot change without a "
                       "restart");
    }
  }
  if (!same) {
    std::string was, now;
    for (unsigned i = 0; i < n_; ++i) was += (i ? ", " : "") + classes_[i].name;
    for (size_t i = 0; i < classes.size(); ++i) now += (i ? ", " : "") + classes[i].name;
    errors.push_back("classes: the classes (names, order) cannot change without a restart: " + was +
                     " -> " + now);
  }
  if (!errors.empty()) return errors;
  out->drip = drip;
  out->classes = classes;
  out->rings.clear();
  out->rings.resize(n_);
  out->pools.clear();
  out->pools.resize(n_);
  for (unsigned i = 0; i < n_; ++i) {
    // The owner changes a ring or pool only in apply(), which is not running: these reads are
    // stable.
    const ClassState& c = classes_[i];
    const config::Class& nc = classes[i];
    if (c.fairness == config::Fairness::kNone) {
      if (nc.queue_depth > c.queue.ring_size()) out->rings[i] = ClassQueue(nc.queue_depth);
    } else if (nc.queue_depth > c.fair.pool_size()) {
      out->pools[i] = FairQueue(nc.queue_depth, nc.subqueues, nc.tenant_depth, kQuantumBytes);
    }
  }
  return errors;
}

void Scheduler::apply(SchedulerReconfig& r, uint64_t now) {
  batch_ = r.drip.batch;
  max_catchup_ = r.drip.max_catchup;
  const config::DripRate port = port_rate();
  if (port.rate_pps != r.drip.rate_pps || port.rate_bps != r.drip.rate_bps)
    port_.set_rate(r.drip.rate_pps, r.drip.rate_bps, tsc_hz_, now);
  for (unsigned i = 0; i < n_; ++i) {
    ClassState& s = classes_[i];
    configure(s, r.classes[i], now);
    s.deficit = std::min(s.deficit, s.quantum);
    if (s.fairness != config::Fairness::kNone) {
      if (r.pools[i].pool_size() != 0) {
        r.pools[i].take_all(s.fair);
        std::swap(s.fair, r.pools[i]);
      }
      s.fair.set_limits(r.classes[i].queue_depth, r.classes[i].tenant_depth);
    } else if (r.rings[i].ring_size() != 0) {
      r.rings[i].take_all(s.queue);
      std::swap(s.queue, r.rings[i]);
    } else {
      s.queue.set_capacity(r.classes[i].queue_depth);
    }
  }
  build_bands(r.classes);
}

void Scheduler::build_bands(const std::vector<config::Class>& classes) {
  order_.resize(n_);
  for (unsigned i = 0; i < n_; ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [&](unsigned a, unsigned b) {
    return classes[a].priority < classes[b].priority;
  });
  bands_.clear();
  for (unsigned i = 0; i < n_; ++i) {
    if (i == 0 || classes[order_[i]].priority != classes[order_[i - 1]].priority)
      bands_.push_back(Band{i, i, 0, false});
    bands_.back().end = i + 1;
  }
  cur_band_ = 0;
}

int Scheduler::find_class(std::string_view name) const {
  for (unsigned i = 0; i < n_; ++i) {
    if (classes_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool Scheduler::drop_head(ClassState& c, ExpiredSink& sink, DropCause cause) {
  if (sink.n == sink.max) return false;
  const Item it = pop_head(c, false);
  sink.out[sink.n++] = it;
  --backlog_;
  bump(cause == kCauseTtl ? c.stats.drop_ttl : c.stats.drop_aqm);
  count_tenant_drop(it.tenant, cause);
  publish_len(c);
  return true;
}

// ready, pick and take run once per departure: inlined into poll(), only the DRR scan that
// starts a new turn (pick_next_turn) stays a call.
[[gnu::always_inline]] inline bool Scheduler::ready(unsigned cls, uint64_t now, ExpiredSink& sink) {
  ClassState& c = classes_[cls];
  while (queued(cls) != 0) {
    Item& h = head(c);
    // A stamp from the future (another lcore's TSC read after ours) has age 0.
    const uint64_t age = now > h.enq_tsc ? now - h.enq_tsc : 0;
    if (c.ttl_ticks != 0 && age > c.ttl_ticks) {
      if (!drop_head(c, sink, kCauseTtl)) return false;
      continue;
    }
    if (!c.cap.permits(now)) return false;
    if (c.aqm.target == 0 || (h.flags & Item::kJudged) != 0) return true;
    // The head would leave now: CoDel judges it once (its queue is the FIFO, or its sub-queue).
    const bool fair = c.fairness != config::Fairness::kNone;
    Codel& codel = fair ? c.fair.front_codel() : c.codel;
    const uint64_t bytes = fair ? c.fair.front_bytes() : uint64_t{c.queue.size()} * h.frame_len;
    switch (codel.on_dequeue(c.aqm, now, age, bytes, (h.flags & Item::kEct) != 0)) {
      case Codel::Verdict::kDrop:
        if (!drop_head(c, sink, kCauseAqm)) return false;
        continue;
      case Codel::Verdict::kMark:
        h.flags |= Item::kJudged | Item::kCe;
        return true;
      case Codel::Verdict::kKeep:
        h.flags |= Item::kJudged;
        return true;
    }
  }
  return false;
}

// Strict priority over the bands, DRR within the first band with a ready class, one packet
// per call. Returns the class whose head may leave (its deficit already charged), or -1 when
// no class is ready.
[[gnu::always_inline]] inline int Scheduler::pick(uint64_t now, ExpiredSink& sink) {
  for (unsigned b = 0; b < bands_.size(); ++b) {
    const int cls = pick_in_band(bands_[b], now, sink);
    if (cls >= 0) {
      cur_band_ = b;
      return cls;
    }
  }
  return -1;
}

[[gnu::always_inline]] inline int Scheduler::pick_in_band(Band& b, uint64_t now,
                                                          ExpiredSink& sink) {
  if (b.in_turn) {
    const unsigned cls = order_[b.begin + b.pos];
    ClassState& c = classes_[cls];
    if (ready(cls, now, sink)) {
      const uint32_t len = head(c).frame_len;
      if (c.deficit >= len) {
        c.deficit -= len;
        return static_cast<int>(cls);
      }
    } else if (queued(cls) != 0) {
      // Held back by its cap: the unused part of this turn is not saved up beyond one
      // quantum, or lifting the cap later would let the class monopolise the port.
      c.deficit = std::min(c.deficit, c.quantum);
    }
    if (queued(cls) == 0) c.deficit = 0;
    b.in_turn = false;
    b.pos = next_index(b.pos, b.end - b.begin);
  }
  return pick_next_turn(b, now, sink);
}

// The DRR scan of band b from its position for the next class to get a turn (pick_in_band()
// without a current turn).
int Scheduler::pick_next_turn(Band& b, uint64_t now, ExpiredSink& sink) {
  const unsigned size = b.end - b.begin;
  for (int pass = 0; pass < 2; ++pass) {
    bool any = false;
    uint64_t min_rounds = std::numeric_limits<uint64_t>::max();
    for (unsigned k = 0; k < size; ++k) {
      const unsigned cls = order_[b.begin + b.pos];
      ClassState& c = classes_[cls];
      if (ready(cls, now, sink)) {
        any = true;
        c.deficit += c.quantum;
        const uint32_t len = head(c).frame_len;
        if (c.deficit >= len) {
          c.deficit -= len;
          b.in_turn = true;
          return static_cast<int>(cls);
        }
        min_rounds = std::min(min_rounds, (len - c.deficit + c.quantum - 1) / c.quantum);
      } else if (queued(cls) == 0) {
        c.deficit = 0;
      }
      b.pos = next_index(b.pos, size);
    }
    if (!any) return -1;
    // No ready class could afford its head (frames larger than its quantum). Run the
    // min_rounds - 1 further rounds in which none could either at once; in the next pass the
    // first class in round order that reaches its head wins, as in plain DRR.
    for (unsigned i = b.begin; i < b.end; ++i) {
      const unsigned cls = order_[i];
      if (ready(cls, now, sink)) classes_[cls].deficit += (min_rounds - 1) * classes_[cls].quantum;
    }
  }
  return -1;  // not reached: the second pass always finds a class
}

// tx_packets, tx_bytes and queue_len are published by publish_tx() at the end of poll().
[[gnu::always_inline]] inline Departure Scheduler::take(unsigned cls, uint64_t now,
                                                        bool first_in_slot, Fixed* slot) {
  ClassState& c = classes_[cls];
  const Item it = pop_head(c, true);
  --backlog_;

  bool clamped = false;
  const Fixed class_base =
      c.cap.depart(to_fixed(it.enq_tsc), now, it.frame_len, max_catchup_, &clamped);
  if (clamped) bump(c.stats.stall_clamps);
  Fixed at;
  if (first_in_slot) {
    bool port_clamped = false;
    at = port_.depart(class_base, now, it.frame_len, max_catchup_, &port_clamped);
    if (port_clamped) bump(port_clamps_);
    *slot = at;
  } else {
    port_.advance(it.frame_len);
    at = std::max(*slot, class_base);
  }
  return Departure{it.pkt, it.frame_len, cls, floor_ticks(at), (it.flags & Item::kCe) != 0};
}

unsigned Scheduler::poll(uint64_t now, Departure* out, unsigned max_out, Item* expired,
                         unsigned max_expired, unsigned* n_expired) {
  ExpiredSink sink{expired, expired != nullptr ? max_expired : 0, 0};
  unsigned n = 0;
  while (n < max_out && backlog_ != 0 && port_.permits(now)) {
    const int first = pick(now, sink);
    if (first < 0) break;
    Fixed slot = 0;
    out[n++] = take(static_cast<unsigned>(first), now, true, &slot);
    for (uint32_t b = 1; b < batch_ && n < max_out && backlog_ != 0; ++b) {
      if (bands_[cur_band_].in_turn && !port_.limited()) {
        const unsigned k =
            take_unlimited_run(now, out + n, std::min(batch_ - b, max_out - n), slot);
        if (k != 0) {
          n += k;
          b += k - 1;
          continue;
        }
      }
      const int more = pick(now, sink);
      if (more < 0) break;
      out[n++] = take(static_cast<unsigned>(more), now, false, &slot);
    }
  }
  if (n != 0) publish_tx(out, n);
  if (n_expired != nullptr) *n_expired = sink.n;
  return n;
}

// The rest of a batch slot from the class in turn when neither the port nor the class is rate
// limited: what pick() + take(first_in_slot = false) would do packet by packet, without the
// timeline bookkeeping per packet (an unlimited timeline only tracks the latest booking, so it
// is updated once for the run). Stops, leaving the general path to handle it, at an empty
// queue, an expired head or a head the deficit cannot pay for. Returns the departures made.
unsigned Scheduler::take_unlimited_run(uint64_t now, Departure* out, unsigned max, Fixed slot) {
  const Band& band = bands_[cur_band_];
  const unsigned cls = order_[band.begin + band.pos];
  ClassState& c = classes_[cls];
  // AQM judges each head as it is about to leave: not in a run.
  if (c.cap.limited() || c.aqm.target != 0) return 0;
  // Locals, not the class's fields: stores into out[] could alias them and force a memory
  // round trip per packet. Per packet the work is in whole ticks: the scheduled time
  // floor(max(slot, class timeline, stamps so far)) is max(floor(slot), floor(timeline),
  // stamps so far), as stamps are whole ticks; the fixed-point timeline is booked once, after.
  const Fixed cap_next0 = c.cap.next();
  uint64_t at = std::max(floor_ticks(slot), floor_ticks(cap_next0));
  uint64_t max_stamp = 0;
  uint64_t deficit = c.deficit;
  // Expired (age now - stamp > ttl, a stamp from the future has age 0) is stamp < oldest_ok.
  const uint64_t ttl = c.ttl_ticks;
  const uint64_t oldest_ok = ttl != 0 && now > ttl ? now - ttl : 0;
  uint32_t last_len = 0;
  unsigned k = 0;
  // The only backlogged class (all the backlog is its own): the DRR scan that would end its
  // turn finds every other class empty and gives the turn straight back with the rounds its
  // head needs, so do that here without leaving the run (see renew_sole_turn).
  const bool sole = backlog_ == queued(cls);
  // Departure k from head h, or false (h stays) where the general path must take over.
  auto leave = [&](const Item& h) {
    if (h.enq_tsc < oldest_ok) return false;
    if (deficit < h.frame_len) [[unlikely]] {
      if (!sole) return false;
      deficit = renew_sole_turn(cls, deficit, h.frame_len);
    }
    deficit -= h.frame_len;
    max_stamp = std::max(max_stamp, h.enq_tsc);
    at = std::max(at, h.enq_tsc);
    out[k] = Departure{h.pkt, h.frame_len, cls, at, false};
    last_len = h.frame_len;
    return true;
  };
  if (c.fairness == config::Fairness::kNone) {
    // The ring's order: walk it and remove the run at once.
    const unsigned avail = std::min<unsigned>(c.queue.size(), max);
    for (; k < avail && leave(c.queue.peek(k)); ++k) {
    }
    c.queue.discard(k);
  } else {
    // The sub-queues' DRR order: each head is the one front() names after the last pop.
    const unsigned avail = std::min<unsigned>(c.fair.size(), max);
    for (; k < avail && leave(c.fair.front()); ++k) c.fair.pop(true);
  }
  c.deficit = deficit;
  if (k != 0) {
    backlog_ -= k;
    // Same state as k departures one by one: the class timeline booked at the running maximum
    // of the enqueue stamps, the port advanced within the slot (unlimited: no clamp possible).
    bool clamped = false;
    c.cap.depart(std::max(cap_next0, to_fixed(max_stamp)), now, last_len, max_catchup_, &clamped);
    port_.advance(last_len);
  }
  return k;
}

// What ending class cls's turn and the DRR scan (pick() then pick_next_turn()) do when cls is
// the only backlogged class, is ready and its head (len bytes) exceeds its deficit: every other
// class is passed over empty (deficit reset to 0), cls gets the turn back with as many quanta
// as the head needs (pick_next_turn's fast-forward included) and cur_ / in_turn_ end where
// they were (no other band has a ready class: all the backlog is cls's). Returns cls's new deficit,
// before the head is charged.
[[gnu::noinline]] uint64_t Scheduler::renew_sole_turn(unsigned cls, uint64_t deficit,
                                                      uint32_t len) {
  for (unsigned j = 0; j < n_; ++j) {
    if (j != cls) classes_[j].deficit = 0;
  }
  const uint64_t q = classes_[cls].quantum;
  return deficit + (len - deficit + q - 1) / q * q;
}

// One load+store per counter and run of same-class departures instead of per packet.
void Scheduler::publish_tx(const Departure* out, unsigned n) {
  unsigned i = 0;
  while (i < n) {
    const uint32_t cls = out[i].cls;
    uint64_t pkts = 0, bytes = 0;
    for (; i < n && out[i].cls == cls; ++i) {
      ++pkts;
      bytes += out[i].frame_len;
    }
    uint64_t marked = 0;
    for (unsigned j = i - pkts; j < i; ++j) marked += out[j].ce;
    ClassState& c = classes_[cls];
    bump(c.stats.tx_packets, pkts);
    bump(c.stats.tx_bytes, bytes);
    if (marked != 0) bump(c.stats.ecn_marked, marked);
    publish_len(c);
  }
}

unsigned Scheduler::enqueue_burst(const EnqueueReq* in, unsigned n, void** refused) {
  unsigned n_refused = 0;
  unsigned i = 0;
  while (i < n) {
    const uint32_t cls = in[i].cls;
    if (cls >= n_) [[unlikely]] {
      bump(drop_bad_class_);
      refused[n_refused++] = in[i].pkt;
      ++i;
      continue;
    }
    ClassState& c = classes_[cls];
    unsigned end = i + 1;
    while (end < n && in[end].cls == cls) ++end;
    uint64_t pkts = 0, bytes = 0, full = 0, sub_full = 0;
    if (c.fairness == config::Fairness::kNone) {
      // No packet leaves during the burst: the first `room` of the run fit, the rest are tail
      // drops, as with enqueue() one by one.
      const unsigned take = std::min<unsigned>(end - i, c.queue.room());
      for (unsigned k = 0; k < take; ++k) {
        const EnqueueReq& r = in[i + k];
        c.queue.fill(k) = item_of(r);
        bytes += r.frame_len;
      }
      c.queue.commit(take);
      pkts = take;
      full = end - i - take;
      for (unsigned k = i + take; k < end; ++k) {
        refused[n_refused++] = in[k].pkt;
        count_tenant_drop(tenant_id(in[k].tenant), kCauseDepth);
      }
    } else {
      const bool by_tenant = c.fairness == config::Fairness::kTenant;
      for (unsigned k = i; k < end; ++k) {
        const EnqueueReq& r = in[k];
        // A tenant's sub-queue by its id; an untagged flow (or every flow, by flow) by its
        // hash, kept apart from the dense tenant ids by starting at the top of the key space.
        const uint32_t key = by_tenant && r.tenant != 0 ? r.tenant : ~uint32_t{r.flow};
        const FairQueue::Push res = c.fair.push(item_of(r), key);
        if (res == FairQueue::Push::kOk) {
          ++pkts;
          bytes += r.frame_len;
          continue;
        }
        ++(res == FairQueue::Push::kFull ? full : sub_full);
        refused[n_refused++] = r.pkt;
        count_tenant_drop(tenant_id(r.tenant), kCauseDepth);
      }
    }
    i = end;
    if (full != 0) bump(c.stats.drop_depth, full);
    if (sub_full != 0) bump(c.stats.drop_subqueue, sub_full);
    if (pkts != 0) {
      bump(c.stats.enq_packets, pkts);
      bump(c.stats.enq_bytes, bytes);
      publish_len(c);
      backlog_ += pkts;
    }
  }
  return n_refused;
}

uint64_t Scheduler::depart_now(unsigned cls, uint64_t n, uint64_t bytes, uint32_t last_len,
                               uint64_t max_stamp) {
  ClassState& c = classes_[cls];
  const uint64_t at = std::max({port_.next_tsc(), c.cap.next_tsc(), max_stamp});
  bool clamped = false;  // unlimited timelines never clamp
  const Fixed base = c.cap.depart(to_fixed(at), at, last_len, max_catchup_, &clamped);
  port_.depart(base, at, last_len, max_catchup_, &clamped);
  bump(c.stats.enq_packets, n);
  bump(c.stats.enq_bytes, bytes);
  bump(c.stats.tx_packets, n);
  bump(c.stats.tx_bytes, bytes);
  return at;
}

uint64_t Scheduler::next_departure() const {
  if (backlog_ == 0) return std::numeric_limits<uint64_t>::max();
  uint64_t cls_min = std::numeric_limits<uint64_t>::max();
  for (unsigned i = 0; i < n_; ++i) {
    const ClassState& c = classes_[i];
    if (queued(i) == 0) continue;
    if (!c.cap.limited()) {  // nothing can be earlier: stop the scan
      cls_min = 0;
      break;
    }
    cls_min = std::min(cls_min, c.cap.next_tsc());
  }
  return std::max(port_.limited() ? port_.next_tsc() : 0, cls_min);
}

bool Scheduler::set_port_rate(double pps, double bps, uint64_t now, std::string* why) {
  if (std::string e = rate_error("", pps, bps, tsc_hz_); !e.empty()) {
    if (why != nullptr) *why = e;
    return false;
  }
  port_.set_rate(pps, bps, tsc_hz_, now);
  return true;
}

bool Scheduler::set_class_rate(unsigned cls, double pps, double bps, uint64_t now,
                               std::string* why) {
  if (cls >= n_) {
    if (why != nullptr) *why = "no class with index " + std::to_string(cls);
    return false;
  }
  if (std::string e = rate_error("", pps, bps, tsc_hz_); !e.empty()) {
    if (why != nullptr) *why = e;
    return false;
  }
  classes_[cls].cap.set_rate(pps, bps, tsc_hz_, now);
  return true;
}

ClassStats Scheduler::class_stats(unsigned cls) const {
  const Counters& c = classes_[cls].stats;
  constexpr auto r = std::memory_order_relaxed;
  return ClassStats{c.enq_packets.load(r),     c.enq_bytes.load(r),  c.tx_packets.load(r),
                    c.tx_bytes.load(r),        c.drop_depth.load(r), c.drop_ttl.load(r),
                    c.drained.load(r),         c.queue_len.load(r),  c.stall_clamps.load(r),
                    c.drop_subqueue.load(r),   c.drop_aqm.load(r),   c.ecn_marked.load(r),
                    c.active_subqueues.load(r)};
}

PortStats Scheduler::port_stats() const {
  PortStats p;
  for (unsigned i = 0; i < n_; ++i) {
    const ClassStats c = class_stats(i);
    p.enq_packets += c.enq_packets;
    p.enq_bytes += c.enq_bytes;
    p.tx_packets += c.tx_packets;
    p.tx_bytes += c.tx_bytes;
    p.drop_depth += c.drop_depth;
    p.drop_ttl += c.drop_ttl;
    p.drained += c.drained;
    p.backlog += c.queue_len;
    p.drop_subqueue += c.drop_subqueue;
    p.drop_aqm += c.drop_aqm;
    p.ecn_marked += c.ecn_marked;
  }
  p.drop_bad_class = drop_bad_class_.load(std::memory_order_relaxed);
  p.stall_clamps = port_clamps_.load(std::memory_order_relaxed);
  return p;
}

std::vector<TenantDrops> Scheduler::top_tenant_drops(size_t n) const {
  std::vector<TenantDrops> all;
  constexpr auto r = std::memory_order_relaxed;
  for (uint32_t t = 0; t <= kMaxTenantId; ++t) {
    const std::atomic<uint64_t>* d = &tenant_drops_[size_t{t} * kCauses];
    TenantDrops td{t, d[kCauseDepth].load(r), d[kCauseTtl].load(r), d[kCauseAqm].load(r)};
    if (td.total() != 0) all.push_back(td);
  }
  const size_t keep = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep), all.end(),
                    [](const TenantDrops& a, const TenantDrops& b) {
                      return a.total() != b.total() ? a.total() > b.total() : a.tenant < b.tenant;
                    });
  all.resize(keep);
  return all;
}

}  // namespace dripgate::dataplane
