#include "control/gateway/wait_queue.h"

#include <absl/strings/string_view.h>

namespace dripgate::control {

namespace {

// Tables larger than this are given back when the queue empties; smaller ones are kept, so that
// a queue that often empties does not allocate them again and again.
constexpr size_t kKeptCapacity = 1024;

// Names are looked up without a copy; Debian's Abseil takes its own string_view for that, not
// std::string_view.
absl::string_view name(std::string_view s) {
  return {s.data(), s.size()};
}

// An emptied table or vector keeps its capacity: a fresh one takes its place.
template <typename T>
void release(T& t) {
  if (t.capacity() > kKeptCapacity) t = T();
}

}  // namespace

WaitQueue::Pushed WaitQueue::push(std::string_view gate, std::string_view tenant, uint8_t band,
                                  int64_t deadline_ms, int64_t now_ms, uint64_t cookie) {
  if (band >= kBands) return {0, Refusal::kBadBand};
  if (nodes_.size() >= options_.max_waiters) return {0, Refusal::kQueueFull};
  auto t = tenants_.find(name(tenant));
  if (t != tenants_.end() ? t->second >= options_.max_waiters_per_tenant
                          : options_.max_waiters_per_tenant == 0)
    return {0, Refusal::kTenantFull};
  if (t == tenants_.end()) t = tenants_.try_emplace(std::string(tenant), 0).first;
  auto g = gates_.find(name(gate));
  if (g == gates_.end()) g = gates_.try_emplace(std::string(gate)).first;
  Entry& e = entry_for(*g, *t, band);

  auto n = std::make_unique<Node>();
  n->waiter = Waiter{++last_id_, cookie, deadline_ms, now_ms, band};
  n->entry = &e;
  n->prev = e.tail;
  (e.tail ? e.tail->next : e.head) = n.get();
  e.tail = n.get();
  ++t->second;
  ++g->second.waiters;
  g->second.last_deadline = std::max(g->second.last_deadline, deadline_ms);
  ++band_waiters_[band];
  heap_.push_back(n.get());
  n->heap_at = heap_.size() - 1;
  sift_up(n->heap_at);
  const uint64_t id = n->waiter.id;
  nodes_.emplace(id, std::move(n));
  return {id, Refusal::kNone};
}

WaitQueue::Entry& WaitQueue::entry_for(Gates::value_type& gate, Tenants::value_type& tenant,
                                       uint8_t band) {
  auto [it, added] = entries_.try_emplace(EntryKey{&gate, &tenant, band});
  if (!added) return *it->second;
  it->second = std::make_unique<Entry>();
  Entry* e = it->second.get();
  e->gate = &gate;
  e->tenant = &tenant;
  e->band = band;
  // A newcomer joins the rotation at its end: just before the entry whose turn it is.
  ++gate.second.tenants[band];
  Entry*& turn = gate.second.turn[band];
  if (!turn) {
    e->prev = e->next = e;
    turn = e;
  } else {
    e->prev = turn->prev;
    e->next = turn;
    turn->prev->next = e;
    turn->prev = e;
  }
  return *e;
}

bool WaitQueue::cancel(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  erase(it->second.get());
  return true;
}

WaitQueue::Node* WaitQueue::front(const Gate& g) const {
  for (Entry* turn : g.turn)
    if (turn) return turn->head;
  return nullptr;
}

const WaitQueue::Waiter* WaitQueue::next(std::string_view gate) const {
  auto g = gates_.find(name(gate));
  if (g == gates_.end()) return nullptr;
  return &front(g->second)->waiter;
}

int WaitQueue::band_after(std::string_view gate, uint64_t id) const {
  auto g = gates_.find(name(gate));
  if (g == gates_.end()) return -1;
  auto it = nodes_.find(id);
  const Node* skip = it == nodes_.end() ? nullptr : it->second.get();
  for (uint8_t b = 0; b < kBands; ++b) {
    const Entry* e = g->second.turn[b];
    if (!e) continue;
    const Entry* own = skip ? skip->entry : nullptr;
    // The band holds another: it is not the skipped waiter's, or its rotation has another
    // tenant, or the skipped waiter's tenant has another waiter.
    if (!own || own->band != b || own->gate != &*g || e->next != e || own->head != own->tail)
      return b;
  }
  return -1;
}

size_t WaitQueue::band_tenants(std::string_view gate, uint8_t band) const {
  auto g = gates_.find(name(gate));
  return g == gates_.end() || band >= kBands ? 0 : g->second.tenants[band];
}

int64_t WaitQueue::last_deadline(std::string_view gate) const {
  auto g = gates_.find(name(gate));
  return g == gates_.end() ? 0 : g->second.last_deadline;
}

std::optional<WaitQueue::Waiter> WaitQueue::pop(std::string_view gate) {
  auto g = gates_.find(name(gate));
  if (g == gates_.end()) return std::nullopt;
  Node* n = front(g->second);
  const Waiter w = n->waiter;
  serve(n);
  return w;
}

bool WaitQueue::served(uint64_t id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  serve(it->second.get());
  return true;
}

void WaitQueue::serve(Node* n) {
  // The tenant's turn is used: the next tenant in the rotation is served next. A tenant whose
  // last waiter this is leaves the rotation in erase(), which passes the turn on the same way.
  Entry* e = n->entry;
  Entry*& turn = e->gate->second.turn[e->band];
  if (turn == e && e->head == n && n->next) turn = e->next;
  erase(n);
}

void WaitQueue::serving(uint64_t id, bool on) {
  auto it = nodes_.find(id);
  if (it != nodes_.end()) it->second->waiter.serving = on;
}

void WaitQueue::expired(int64_t now_ms, std::vector<Waiter>& out) {
  while (!heap_.empty() && heap_.front()->waiter.deadline_ms <= now_ms) {
    Node* n = heap_.front();
    out.push_back(n->waiter);
    if (n->waiter.serving)
      serve(n);
    else
      erase(n);
  }
}

std::optional<int64_t> WaitQueue::earliest_deadline() const {
  if (heap_.empty()) return std::nullopt;
  return heap_.front()->waiter.deadline_ms;
}

size_t WaitQueue::size(std::string_view gate) const {
  auto g = gates_.find(name(gate));
  return g == gates_.end() ? 0 : g->second.waiters;
}

size_t WaitQueue::tenant_size(std::string_view tenant) const {
  auto t = tenants_.find(name(tenant));
  return t == tenants_.end() ? 0 : t->second;
}

void WaitQueue::erase(Node* n) {
  Entry* e = n->entry;
  (n->prev ? n->prev->next : e->head) = n->next;
  (n->next ? n->next->prev : e->tail) = n->prev;
  heap_erase(n->heap_at);
  --band_waiters_[e->band];
  Gates::value_type* gate = e->gate;
  Tenants::value_type* tenant = e->tenant;
  if (!e->head) leave_rotation(e);
  if (--tenant->second == 0) tenants_.erase(tenant->first);
  if (--gate->second.waiters == 0) gates_.erase(gate->first);
  const uint64_t id = n->waiter.id;
  nodes_.erase(id);  // frees n
  shrink_if_empty();
}

void WaitQueue::leave_rotation(Entry* e) {
  --e->gate->second.tenants[e->band];
  Entry*& turn = e->gate->second.turn[e->band];
  if (e->next == e) {
    turn = nullptr;
  } else {
    if (turn == e) turn = e->next;
    e->prev->next = e->next;
    e->next->prev = e->prev;
  }
  entries_.erase(EntryKey{e->gate, e->tenant, e->band});
}

bool WaitQueue::earlier(const Node* a, const Node* b) {
  const Waiter &x = a->waiter, &y = b->waiter;
  return x.deadline_ms != y.deadline_ms ? x.deadline_ms < y.deadline_ms : x.id < y.id;
}

void WaitQueue::heap_place(size_t at, Node* n) {
  heap_[at] = n;
  n->heap_at = at;
}

void WaitQueue::sift_up(size_t at) {
  Node* n = heap_[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (!earlier(n, heap_[parent])) break;
    heap_place(at, heap_[parent]);
    at = parent;
  }
  heap_place(at, n);
}

void WaitQueue::sift_down(size_t at) {
  Node* n = heap_[at];
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && earlier(heap_[child + 1], heap_[child])) ++child;
    if (!earlier(heap_[child], n)) break;
    heap_place(at, heap_[child]);
    at = child;
  }
  heap_place(at, n);
}

void WaitQueue::heap_erase(size_t at) {
  Node* last = heap_.back();
  heap_.pop_back();
  if (at == heap_.size()) return;
  heap_place(at, last);
  sift_up(at);
  sift_down(last->heap_at);
}

void WaitQueue::shrink_if_empty() {
  if (!nodes_.empty()) return;
  release(nodes_);
  release(entries_);
  release(gates_);
  release(tenants_);
  release(heap_);
}

}  // namespace dripgate::control
