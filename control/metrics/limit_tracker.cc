#include "control/metrics/limit_tracker.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace dripgate::control {

namespace {

struct Entry {
  std::string tenant;  // its capacity kept at kMaxTenantBytes: a copy allocates nothing
  double remaining = 0, limit = 0;
  int64_t at_ms = 0;
  bool used = false;
  double ratio() const { return limit > 0 ? remaining / limit : 1; }
};

int quota_index(std::string_view quota) {
  for (size_t i = 0; i < LimitTracker::kQuotas.size(); ++i)
    if (LimitTracker::kQuotas[i] == quota) return static_cast<int>(i);
  return -1;
}

}  // namespace

class LimitTracker::Table {
 public:
  Table() {
    for (auto& q : entries_)
      for (Entry& e : q) e.tenant.reserve(kMaxTenantBytes);
  }

  void note(int q, std::string_view tenant, double remaining, double limit, int64_t now_ms) {
    std::lock_guard lock(mu_);
    auto& slots = entries_[static_cast<size_t>(q)];
    // A slot's claim to stay: its ratio (0..1, clamped by note()); a free or stale one has none.
    auto keep = [now_ms](const Entry& e) {
      return e.used && now_ms - e.at_ms <= kMaxAgeMs ? e.ratio() : 2.0;
    };
    Entry* mine = nullptr;
    Entry* victim = &slots[0];
    for (Entry& e : slots) {
      if (e.used && e.tenant == tenant) {
        mine = &e;
        break;
      }
      if (keep(e) > keep(*victim)) victim = &e;
    }
    if (!mine) {
      if (remaining / limit >= keep(*victim)) return;
      mine = victim;
      mine->tenant.assign(tenant);
      mine->used = true;
    }
    mine->remaining = remaining;
    mine->limit = limit;
    mine->at_ms = now_ms;
  }

  // Appends this table's live readings as rows.
  void read(int64_t now_ms, std::vector<Row>& out) const {
    std::lock_guard lock(mu_);
    for (size_t q = 0; q < entries_.size(); ++q)
      for (const Entry& e : entries_[q])
        if (e.used && now_ms - e.at_ms <= kMaxAgeMs)
          out.push_back(Row{std::string(kQuotas[q]), e.tenant, e.remaining, e.limit, e.at_ms});
  }

 private:
  mutable std::mutex mu_;
  std::array<std::array<Entry, kTop>, kQuotas.size()> entries_;
};

LimitTracker::LimitTracker() = default;
LimitTracker::~LimitTracker() = default;

LimitTracker::Slot::Slot(LimitTracker& tracker)
    : tracker_(tracker), table_(std::make_shared<Table>()) {
  std::lock_guard lock(tracker_.mu_);
  tracker_.tables_.push_back(table_);
}

LimitTracker::Slot::~Slot() {
  std::lock_guard lock(tracker_.mu_);
  std::erase(tracker_.tables_, table_);
}

void LimitTracker::Slot::note(std::string_view tenant, std::string_view quota, double remaining,
                              double limit, int64_t now_ms) {
  if (!(limit > 0) || tenant.empty() || tenant.size() > kMaxTenantBytes) return;
  const int q = quota_index(quota);
  if (q < 0) return;
  table_->note(q, tenant, std::clamp(remaining, 0.0, limit), limit, now_ms);
}

std::vector<LimitTracker::Row> LimitTracker::lowest(int64_t now_ms) const {
  std::vector<Row> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : tables_) t->read(now_ms, all);
  }
  // A tenant seen by several tables: its latest reading.
  std::map<std::pair<std::string, std::string>, Row> latest;
  for (Row& r : all) {
    auto [it, fresh] = latest.try_emplace({r.quota, r.tenant}, r);
    if (!fresh && r.at_ms > it->second.at_ms) it->second = std::move(r);
  }
  std::vector<Row> out;
  for (std::string_view quota : kQuotas) {
    std::vector<Row> rows;
    for (auto& [key, r] : latest)
      if (key.first == quota) rows.push_back(r);
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return std::make_tuple(a.ratio(), a.tenant) < std::make_tuple(b.ratio(), b.tenant);
    });
    if (rows.size() > kTop) rows.resize(kTop);
    for (Row& r : rows) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dripgate::control
