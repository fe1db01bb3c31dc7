#include "control/admission/tenant_directory.h"

#include <algorithm>
#include <array>

namespace dripgate::control {

namespace {

template <class P>
void sort_by_id(std::vector<P>& v) {
  std::sort(v.begin(), v.end(), [](P a, P b) { return a->first < b->first; });
}

// The first in `order` (sorted by id) whose id is after `after`.
template <class P>
auto after_id(const std::vector<P>& order, std::string_view after) {
  return std::upper_bound(order.begin(), order.end(), after,
                          [](std::string_view a, P e) { return a < e->first; });
}

}  // namespace

TenantDirectory::Registered::Registered(std::string_view value) {
  const size_t space = std::min(value.find(' '), value.size());
  plan = value.substr(0, space);
  keys = parse_registry_keys(value.substr(space));
}

TenantDirectory::Base::Base(Plans p) : plans(std::move(p)) {
  order.reserve(plans.size());
  for (const auto& e : plans) {
    order.push_back(&e);
    for (const TenantKey& k : e.second.keys) owners.emplace(k.sha256, e.first);
  }
  sort_by_id(order);
}

const std::string* TenantDirectory::owner_of(const KeyDigest& d, int64_t now_s) const {
  // An index entry may be stale (a key revoked since): the tenant's keys now have the last word.
  for (const Owners* index : {&recent_owners_, &base_->owners}) {
    auto it = index->find(d);
    if (it == index->end()) continue;
    if (const std::vector<TenantKey>* keys = keys_of(it->second))
      for (const TenantKey& k : *keys)
        if (k.sha256 == d && k.valid_at(now_s)) return &it->second;
  }
  return nullptr;
}

TenantDirectory::TenantDirectory(uint64_t version, Plans plans)
    : version_(version),
      base_(std::make_shared<const Base>(std::move(plans))),
      size_(base_->plans.size()) {}

TenantDirectory::TenantDirectory(const TenantDirectory& prev, uint64_t version,
                                 const Changes& changes)
    : version_(version), size_(prev.size_) {
  for (const auto& [id, entry] : changes) {
    // What this copy says so far: prev's answer, or one of the changes before this one.
    const std::string* now = nullptr;
    if (auto it = recent_.find(id); it != recent_.end())
      now = it->second.plan.empty() ? nullptr : &it->second.plan;
    else
      now = prev.plan_of(id);
    size_ = size_ - (now ? 1 : 0) + (entry.plan.empty() ? 0 : 1);
    recent_.insert_or_assign(id, entry);
  }
  if (prev.recent_.size() + recent_.size() <= kMaxRecent) {
    base_ = prev.base_;
    for (const auto& e : prev.recent_) recent_.emplace(e);  // the newer change stays
    sort_recent();
    return;
  }
  // Fold everything into a new base.
  Plans all = prev.base_->plans;
  for (const Plans* layer : std::array<const Plans*, 2>{&prev.recent_, &recent_})
    for (const auto& [id, entry] : *layer) {
      if (entry.plan.empty())
        all.erase(id);
      else
        all.insert_or_assign(id, entry);
    }
  recent_.clear();
  base_ = std::make_shared<const Base>(std::move(all));
}

void TenantDirectory::sort_recent() {
  recent_order_.reserve(recent_.size());
  for (const auto& e : recent_) {
    recent_order_.push_back(&e);
    for (const TenantKey& k : e.second.keys) recent_owners_.emplace(k.sha256, e.first);
  }
  sort_by_id(recent_order_);
}

std::vector<TenantDirectory::Entry> TenantDirectory::page(std::string_view after,
                                                          size_t limit) const {
  // A merge of the base and the recent changes, both in id order; a recent change hides the
  // base's entry for its tenant (and shows nothing when it took the tenant out).
  auto b = after.empty() ? base_->order.begin() : after_id(base_->order, after);
  auto r = after.empty() ? recent_order_.begin() : after_id(recent_order_, after);
  std::vector<Entry> out;
  while (out.size() < limit) {
    bool base_next = b != base_->order.end();
    bool recent_next = r != recent_order_.end();
    if (!base_next && !recent_next) break;
    if (recent_next && (!base_next || (*r)->first <= (*b)->first)) {
      if (base_next && (*r)->first == (*b)->first) ++b;
      if (!(*r)->second.plan.empty()) out.emplace_back((*r)->first, (*r)->second.plan);
      ++r;
    } else {
      if (!recent_.count((*b)->first)) out.emplace_back((*b)->first, (*b)->second.plan);
      ++b;
    }
  }
  return out;
}

}  // namespace dripgate::control
