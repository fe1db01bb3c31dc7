// The requests a gate refused that wait in the daemon, up to their deadline, to be admitted when
// the gate allows, rather than answered 429 at once. A waiter waits on a gate: the Redis key of
// the bucket that refused (a tenant's bucket, a global gate), so that a gate's refill wakes the
// waiters that gate holds back and no other.
//
// Served order on a gate: strictly by band (0 first), so a lower-priority band never delays a
// higher one; within a band, round robin across tenants (one waiter a turn), so a tenant with a
// thousand waiters delays one with a single waiter by one turn, not by a thousand; FIFO within a
// tenant. A tenant joins its band's rotation at the end when its first waiter comes and leaves it
// when its last goes, so coming and going buys no earlier turn.
//
// Plain state without a clock of its own (every call that needs the time is given it) and
// without locking: one per worker thread, on that thread's loop. Bounded by Options: the
// waiters of this queue, and those of one tenant, so one tenant cannot hold every place.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/node_hash_map.h>

namespace dripgate::control {

class WaitQueue {
 public:
  // Bands of priority: a band is an index into per-gate arrays, so there are few of them.
  static constexpr uint8_t kBands = 8;

  // The memory a waiter is counted for, at most (glibc's malloc): its node (72 B and the
  // allocator's 8 B header), its slot in the id index (17 B; 39 B at the table's lowest load,
  // 7/16) and in the deadline heap (8 B; 16 B with the vector's spare capacity), and an entry of
  // its own (its tenant's FIFO and place in the rotation on its gate and band: 64 B and a 33 B
  // slot, 139 B at the lowest load; shared by a tenant's waiters on one gate and band): 274 B.
  // A tenant and a gate with waiters add their record once, however many waiters share them:
  // about 70 B and 170 B, and their name beyond 15 bytes. wait_queue_test measures 126 B a waiter
  // for 100,000 across 1,000 tenants and 4 gates, 451 B for each alone in its tenant and gate.
  static constexpr size_t kBytesPerWaiter = 288;

  struct Options {
    size_t max_waiters = 10000;            // in this queue
    size_t max_waiters_per_tenant = 1000;  // of one tenant in this queue, on all gates
  };

  // What the caller gets back for a waiter it pushed: the request is found by cookie (a
  // connection, a gRPC call); its tenant and gate are the request's own.
  struct Waiter {
    uint64_t id = 0;
    uint64_t cookie = 0;
    int64_t deadline_ms = 0;
    int64_t enqueued_ms = 0;
    uint8_t band = 0;
    bool serving = false;  // serving(): its gate is serving it
  };

  enum class Refusal : uint8_t {
    kNone,
    kQueueFull,   // max_waiters wait already
    kTenantFull,  // max_waiters_per_tenant of the tenant wait already
    kBadBand,     // band >= kBands
  };
  struct Pushed {
    uint64_t id = 0;  // 0: refused (ids start at 1 and are never reused)
    Refusal refusal = Refusal::kNone;
  };

  explicit WaitQueue(Options o) : options_(o) {}
  // Waiters and bookkeeping point at each other: a queue stays where it was built.
  WaitQueue(const WaitQueue&) = delete;
  WaitQueue& operator=(const WaitQueue&) = delete;

  // A config reload: the bounds apply to the pushes that follow; waiters beyond a lowered bound
  // keep their place.
  void set_options(Options o) { options_ = o; }

  // A waiter of tenant on gate in band until deadline_ms (one already past it is returned by the
  // next expired()).
  Pushed push(std::string_view gate, std::string_view tenant, uint8_t band, int64_t deadline_ms,
              int64_t now_ms, uint64_t cookie);
  // Removes waiter id (its client went away); false: no such waiter (popped, expired, cancelled
  // or never pushed). O(log n): the deadline heap.
  bool cancel(uint64_t id);
  // The waiter gate serves next, or null when none waits on it; valid until the queue changes.
  // Deadlines are not looked at: the caller takes expired() first.
  const Waiter* next(std::string_view gate) const;
  // The best band (lowest) among gate's waiters other than waiter id; -1: none waits there but
  // it. What the daemons sharing a global gate learn of this queue's next turn on it.
  int band_after(std::string_view gate, uint64_t id) const;
  // The tenants with waiters on gate in band: the turns this queue takes in a round of the band.
  size_t band_tenants(std::string_view gate, uint8_t band) const;
  // The latest deadline of the waiters pushed on gate since it last had none (at least that of
  // every waiter there now; one that left early may have had it); 0: none waits there. How long
  // this queue's place among the daemons' waiters on the gate is worth keeping: its next waiter
  // takes it over when the first one's deadline comes.
  int64_t last_deadline(std::string_view gate) const;
  // Removes next(gate) and returns it, or nullopt.
  std::optional<Waiter> pop(std::string_view gate);
  // Removes waiter id as served: as pop() would have, its tenant's turn in its band passes on
  // when it was that turn's first waiter, although a waiter of a higher band came meanwhile and
  // is next() now (the caller served it while it was next). false: no such waiter.
  bool served(uint64_t id);
  // Marks waiter id as being served by its gate (the caller asked whether it may pass), or no
  // longer. One that expires meanwhile passes its tenant's turn on, as served() would: a band's
  // first waiters are its oldest, the first to expire, and would otherwise keep the turn with
  // their tenant.
  void serving(uint64_t id, bool on);
  // Removes every waiter whose deadline is at or before now_ms, on every gate, and appends them
  // to out in deadline order (then push order). Walks only what expired.
  void expired(int64_t now_ms, std::vector<Waiter>& out);
  // The deadline expired() should be called at next; nullopt: nothing waits.
  std::optional<int64_t> earliest_deadline() const;

  size_t size() const { return nodes_.size(); }
  size_t size(std::string_view gate) const;
  size_t band_size(uint8_t band) const { return band < kBands ? band_waiters_[band] : 0; }
  size_t tenant_size(std::string_view tenant) const;
  size_t tenants() const { return tenants_.size(); }  // with waiters
  size_t gates() const { return gates_.size(); }      // with waiters

 private:
  struct Entry;
  // Per gate, each band's rotation of tenant entries, as the entry whose turn it is (null: the
  // band is empty).
  struct Gate {
    size_t waiters = 0;
    std::array<Entry*, kBands> turn{};
    std::array<uint32_t, kBands> tenants{};  // in each band's rotation
    int64_t last_deadline = 0;               // last_deadline()
  };
  // Records keyed by name and freed with their last waiter; node maps, so that entries point at
  // them: a name is kept once, never copied per waiter.
  using Gates = absl::node_hash_map<std::string, Gate>;
  using Tenants = absl::node_hash_map<std::string, size_t>;  // name -> waiters

  struct Node {
    Waiter waiter;
    Entry* entry = nullptr;
    Node* prev = nullptr;  // the entry's FIFO
    Node* next = nullptr;
    size_t heap_at = 0;  // index in heap_
  };
  // One tenant's waiters on one gate in one band: a FIFO, and a place in the band's rotation (a
  // circular list, so that a turn passes on and a newcomer joins before the turn in O(1)).
  struct Entry {
    Node* head = nullptr;
    Node* tail = nullptr;
    Entry* prev = nullptr;
    Entry* next = nullptr;
    Gates::value_type* gate = nullptr;
    Tenants::value_type* tenant = nullptr;
    uint8_t band = 0;
  };
  static_assert(sizeof(Node) <= 72 && sizeof(Entry) <= 56, "what kBytesPerWaiter counts");
  struct EntryKey {
    const Gates::value_type* gate;
    const Tenants::value_type* tenant;
    uint8_t band;
    bool operator==(const EntryKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const EntryKey& k) {
      return H::combine(std::move(h), k.gate, k.tenant, k.band);
    }
  };

  Node* front(const Gate& g) const;
  void serve(Node* n);
  Entry& entry_for(Gates::value_type& gate, Tenants::value_type& tenant, uint8_t band);
  // Unlinks n from everything, frees what it leaves empty, then n.
  void erase(Node* n);
  void leave_rotation(Entry* e);
  // The deadline heap: a binary heap whose nodes know their index, so that a cancel or a pop
  // takes its waiter out in O(log n). A heap of (deadline, id) with lazy deletion would keep
  // every popped waiter's entry until its deadline; a std::multimap would cost an allocation of
  // 48 B per waiter.
  static bool earlier(const Node* a, const Node* b);
  void heap_place(size_t at, Node* n);
  void sift_up(size_t at);
  void sift_down(size_t at);
  void heap_erase(size_t at);
  // Gives the tables' and the heap's capacity back once the queue is empty, so that a burst of
  // waiters leaves nothing behind.
  void shrink_if_empty();

  Options options_;
  uint64_t last_id_ = 0;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Node>> nodes_;  // by id: owns the waiters
  absl::flat_hash_map<EntryKey, std::unique_ptr<Entry>> entries_;
  Gates gates_;
  Tenants tenants_;
  std::vector<Node*> heap_;
  std::array<size_t, kBands> band_waiters_{};
};

}  // namespace dripgate::control
