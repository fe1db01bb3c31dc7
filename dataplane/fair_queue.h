// The queue of a class with `fairness: tenant | flow`: one sub-queue per source (a tenant, or a
// flow), served among themselves by deficit round robin by bytes, so a source that bursts into
// the class gets its share of the class's departures and no more while others wait. What
// fq_codel does for flows in Linux, with the class's own depth as the bound of them all.
//
// Memory is fixed at construction and bounded however many sources there are: a pool of
// `capacity` packet slots shared by the sub-queues (linked lists of slot indices), and
// `subqueues` sub-queue heads. A source maps to a sub-queue by its key modulo `subqueues`;
// dense tenant ids (1, 2, ...) therefore get a sub-queue each up to `subqueues` tenants, and
// beyond that, or for hashed flows, two sources may share one (as fq_codel's flows share its
// buckets).
//
// DRR as in fq_codel: a sub-queue that becomes backlogged joins the back of the active list
// with one quantum of credit; the front one sends while its credit is positive (the credit may
// go negative by less than one frame), then gets another quantum and goes to the back. A
// sub-queue that runs empty leaves the list. Shares are equal in bytes within one frame per
// round. Each sub-queue carries its own CoDel state, so AQM judges each tenant's standing
// queue on its own.
//
// Single owner, no atomics; O(1) per push and amortised O(1) per pop. Plain C++, no DPDK.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>

#include "dataplane/class_queue.h"
#include "dataplane/codel.h"

namespace dripgate::dataplane {

class FairQueue {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;
  // Most sub-queues a class may have (config: classes.*.subqueues).
  static constexpr uint32_t kMaxSubqueues = 1u << 16;

  enum class Push { kOk, kFull, kSubqueueFull };

  // An empty queue that refuses every push, until a real one is move-assigned.
  FairQueue() = default;
  // capacity: the class's depth (all sub-queues together); subqueue_depth: the most packets one
  // sub-queue may hold (0: only the class's depth bounds it); quantum: bytes per DRR round.
  FairQueue(uint32_t capacity, uint32_t subqueues, uint32_t subqueue_depth, uint32_t quantum)
      : capacity_(capacity),
        pool_size_(capacity),
        subqueue_depth_(subqueue_depth),
        quantum_(static_cast<int32_t>(quantum)),
        n_sub_(subqueues) {
    if (capacity == 0) throw std::invalid_argument("queue capacity must be at least 1");
    if (capacity > (1u << 30)) throw std::invalid_argument("queue capacity above 2^30");
    if (subqueues == 0 || subqueues > kMaxSubqueues)
      throw std::invalid_argument("subqueues must be in 1..65536");
    if ((subqueues & (subqueues - 1)) == 0 && subqueues > 1) sub_mask_ = subqueues - 1;
    slots_ = std::make_unique<Slot[]>(capacity);
    for (uint32_t i = 0; i < capacity; ++i) slots_[i].next = i + 1 == capacity ? kNil : i + 1;
    free_ = 0;
    subs_ = std::make_unique<Sub[]>(subqueues);
  }

  FairQueue(FairQueue&&) noexcept = default;
  FairQueue& operator=(FairQueue&&) noexcept = default;

  uint32_t capacity() const { return capacity_; }
  // Packet slots allocated; 0 for a default-constructed queue.
  uint32_t pool_size() const { return pool_size_; }
  uint32_t subqueues() const { return n_sub_; }
  // A new depth limit within the pool, and a new per-sub-queue limit (a live change): packets
  // already queued beyond a lower limit stay queued; only pushes see the new limit.
  void set_limits(uint32_t capacity, uint32_t subqueue_depth) {
    capacity_ = capacity;
    subqueue_depth_ = subqueue_depth;
  }
  uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Sub-queues with packets.
  uint32_t active() const { return n_active_; }

  Push push(const Item& it, uint32_t key) {
    if (size_ >= capacity_ || free_ == kNil) return Push::kFull;
    // A mask for a power of two (the usual choice), not a division per packet.
    const uint32_t s = sub_mask_ != 0 ? key & sub_mask_ : key % n_sub_;
    Sub& q = subs_[s];
    if (subqueue_depth_ != 0 && q.count >= subqueue_depth_) return Push::kSubqueueFull;
    const uint32_t i = free_;
    Slot& slot = slots_[i];
    free_ = slot.next;
    slot.item = it;
    slot.sub = s;
    slot.next = kNil;
    if (q.count == 0) {
      q.head = i;
      q.deficit = quantum_;
      activate(s);
    } else {
      slots_[q.tail].next = i;
    }
    q.tail = i;
    ++q.count;
    q.bytes += it.frame_len;
    ++size_;
    return Push::kOk;
  }

  // The packet DRR serves next (precondition: !empty()). Gives credit and rotates the active
  // list as DRR does, so the same head stays the front until pop() removes it.
  Item& front() { return slots_[subs_[turn()].head].item; }
  // The front's sub-queue: its bytes queued and its CoDel state (for AQM).
  uint64_t front_bytes() { return subs_[turn()].bytes; }
  Codel& front_codel() { return subs_[turn()].codel; }
  // Which sub-queue the front belongs to.
  uint32_t front_subqueue() { return turn(); }

  // Removes the front; `charge`: count its bytes against its sub-queue's credit (a departure),
  // or not (a drop: as in fq_codel, what AQM or the TTL removes is not the source's share).
  Item pop(bool charge = true) {
    const uint32_t s = turn();
    Sub& q = subs_[s];
    const uint32_t i = q.head;
    Slot& slot = slots_[i];
    const Item it = slot.item;
    q.head = slot.next;
    slot.next = free_;
    free_ = i;
    --q.count;
    q.bytes -= it.frame_len;
    --size_;
    if (charge) q.deficit -= static_cast<int32_t>(it.frame_len);
    if (q.count == 0) {
      q.head = q.tail = kNil;
      q.codel.on_empty();
      active_head_ = q.next_active;
      if (active_head_ == kNil) active_tail_ = kNil;
      --n_active_;
    }
    return it;
  }

  // Moves every packet of `from` into this queue, each into the sub-queue of its key's, in
  // `from`'s service order, whatever the limits (a reload that grows the pool).
  // Precondition: pool_size() - size() >= from.size(), and the same number of sub-queues.
  void take_all(FairQueue& from) {
    const uint32_t saved = capacity_, saved_sub = subqueue_depth_;
    capacity_ = pool_size_;
    subqueue_depth_ = 0;
    while (!from.empty()) {
      const uint32_t s = from.front_subqueue();
      push(from.pop(false), s);
    }
    capacity_ = saved;
    subqueue_depth_ = saved_sub;
  }

 private:
  struct Slot {
    Item item;
    uint32_t next;  // the next slot of its sub-queue, or of the free list
    uint32_t sub;
  };
  struct Sub {
    uint32_t head = kNil;
    uint32_t tail = kNil;
    uint32_t count = 0;
    uint32_t next_active = kNil;
    uint64_t bytes = 0;
    int32_t deficit = 0;
    Codel codel;
  };

  void activate(uint32_t s) {
    subs_[s].next_active = kNil;
    if (active_tail_ == kNil) {
      active_head_ = s;
    } else {
      subs_[active_tail_].next_active = s;
    }
    active_tail_ = s;
    ++n_active_;
  }

  // The sub-queue at the front of the active list once it has credit: DRR's turn.
  uint32_t turn() {
    for (;;) {
      Sub& q = subs_[active_head_];
      if (q.deficit > 0) return active_head_;
      q.deficit += quantum_;
      if (active_head_ != active_tail_) {
        const uint32_t s = active_head_;
        active_head_ = q.next_active;
        q.next_active = kNil;
        subs_[active_tail_].next_active = s;
        active_tail_ = s;
      }
    }
  }

  uint32_t capacity_ = 0;
  uint32_t pool_size_ = 0;
  uint32_t subqueue_depth_ = 0;
  int32_t quantum_ = 0;
  uint32_t n_sub_ = 0;
  uint32_t sub_mask_ = 0;  // n_sub_ - 1 when n_sub_ is a power of two above 1, else 0
  uint32_t size_ = 0;
  uint32_t n_active_ = 0;
  uint32_t free_ = kNil;
  uint32_t active_head_ = kNil;
  uint32_t active_tail_ = kNil;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<Sub[]> subs_;
};

}  // namespace dripgate::dataplane
