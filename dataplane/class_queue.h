// A fixed-capacity FIFO of queued packets for one traffic class. The scheduler owns one per
// class; the ring is allocated once at construction so the packet path never allocates.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace dripgate::dataplane {

// One queued packet. `pkt` is opaque to the scheduler (the fast path stores an rte_mbuf*);
// frame_len is the Ethernet frame length without preamble/SFD/IFG (rte_pktmbuf_pkt_len);
// tenant: the tenant id of its flow's tag (0: none), for drops counted by tenant.
struct Item {
  // flags
  static constexpr uint8_t kEct = 1;     // ECN capable (ECT(0) or ECT(1))
  static constexpr uint8_t kJudged = 2;  // AQM has judged it as a head: it leaves
  static constexpr uint8_t kCe = 4;      // AQM marked it: set CE when it leaves

  void* pkt = nullptr;
  uint32_t frame_len = 0;
  uint16_t tenant = 0;
  uint8_t flags = 0;
  uint64_t enq_tsc = 0;
};
static_assert(sizeof(Item) == 24, "queued packets stay three words");

// Single-owner ring: no atomics, not shared between threads (the scheduler mirrors the length
// into its atomic stats for readers on other lcores).
class ClassQueue {
 public:
  // An empty queue that refuses every push, until a real one is move-assigned.
  ClassQueue() = default;
  // capacity: the depth limit; the ring is rounded up to a power of two so indexing is a mask.
  explicit ClassQueue(uint32_t capacity)
      : capacity_(capacity), mask_(std::bit_ceil(capacity == 0 ? 1u : capacity) - 1) {
    if (capacity == 0) throw std::invalid_argument("queue capacity must be at least 1");
    if (capacity > (1u << 30)) throw std::invalid_argument("queue capacity above 2^30");
    slots_ = std::make_unique<Item[]>(static_cast<size_t>(mask_) + 1);
  }

  ClassQueue(ClassQueue&&) noexcept = default;
  ClassQueue& operator=(ClassQueue&&) noexcept = default;

  uint32_t capacity() const { return capacity_; }
  // Slots in the ring (a power of two >= capacity); 0 for a default-constructed queue.
  uint32_t ring_size() const { return slots_ ? mask_ + 1 : 0; }
  // A new depth limit within the ring (a live change): items already queued beyond a lower
  // limit stay queued; only pushes see the new limit. Precondition: 1 <= c <= ring_size().
  void set_capacity(uint32_t c) { capacity_ = c; }
  // Moves every item of `from` to the back of this queue, in order, whatever the depth limit.
  // Precondition: ring_size() >= size() + from.size().
  void take_all(ClassQueue& from) {
    while (!from.empty()) {
      slots_[tail_ & mask_] = from.pop();
      ++tail_;
    }
  }
  uint32_t size() const { return tail_ - head_; }
  bool empty() const { return head_ == tail_; }
  // size() may exceed capacity() after set_capacity() lowered it: still full.
  bool full() const { return size() >= capacity_; }

  // False when full (the caller counts the tail drop and keeps ownership of the packet).
  bool push(const Item& it) {
    if (full()) return false;
    slots_[tail_ & mask_] = it;
    ++tail_;
    return true;
  }

  // Precondition: !empty().
  const Item& front() const { return slots_[head_ & mask_]; }
  Item& front() { return slots_[head_ & mask_]; }
  Item pop() {
    Item it = slots_[head_ & mask_];
    ++head_;
    return it;
  }
  // Free places below the depth limit; fill(i) is the i-th of them (i < room()), and
  // commit(k) appends the first k filled: push() for a burst without a check per item.
  uint32_t room() const { return full() ? 0 : capacity_ - size(); }
  Item& fill(uint32_t i) { return slots_[(tail_ + i) & mask_]; }
  void commit(uint32_t k) { tail_ += k; }

  // The i-th queued item from the front (i < size()), and removing the first k (k <= size()):
  // for a consumer that walks a run in local variables and commits it once.
  const Item& peek(uint32_t i) const { return slots_[(head_ + i) & mask_]; }
  void discard(uint32_t k) { head_ += k; }

 private:
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  // Free-running indices; unsigned wrap-around keeps tail_ - head_ correct.
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
  std::unique_ptr<Item[]> slots_;
};

}  // namespace dripgate::dataplane
