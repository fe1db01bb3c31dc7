// When a tenant's own gates are known to refuse, for a while, as this thread's engine learnt from
// the answers of the tenant's slot. An admission is one script call per hash slot, all sent at
// once: the tenant's and each global gate's. A request its tenant's gates refuse would still take
// from the global gates and give it back (gates.lua, then ungates.lua): two calls and a 60 s
// marker in a global gate's slot, which every tenant shares and so is the fleet's hottest, for a
// request that was never going to pass. While a hint holds, the engine asks the tenant's slot
// first and the global gates only once it admitted, so a refused request costs them nothing.
//
// A hint only orders the calls; it never decides. A wrong one (a bucket refilled by another
// daemon's undo) costs an admitted request one round trip more, never a wrong answer, so the
// table may forget: it is direct-mapped by the tenant's name, and two tenants that meet in a
// slot take turns.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace dripgate::control {

class RefusalHints {
 public:
  // A hint lasts at most this long: longer knowledge (a quota refused until the month ends)
  // would outlive what changes it unseen (a settle that gives tokens back, a reload).
  static constexpr int64_t kMaxMs = 1000;

  // Whether tenant's own gates are known to refuse at now_ms (a steady clock's ms).
  bool refusing(std::string_view tenant, int64_t now_ms) const {
    const Entry& e = slot(tenant);
    return now_ms < e.until_ms && e.tenant == tenant;
  }
  // Tenant's gates refuse until until_ms (at most kMaxMs after now_ms); until_ms <= now_ms:
  // they admit now, the hint goes.
  void note(std::string_view tenant, int64_t now_ms, int64_t until_ms) {
    Entry& e = slot(tenant);
    if (until_ms <= now_ms) {
      if (e.tenant == tenant) e.until_ms = 0;
      return;
    }
    e.tenant.assign(tenant);
    e.until_ms = std::min(until_ms, now_ms + kMaxMs);
  }

 private:
  struct Entry {
    std::string tenant;
    int64_t until_ms = 0;
  };
  // 40 B each: 160 KiB per engine thread.
  static constexpr size_t kSlots = 4096;
  Entry& slot(std::string_view tenant) {
    return slots_[std::hash<std::string_view>{}(tenant) % kSlots];
  }
  const Entry& slot(std::string_view tenant) const {
    return slots_[std::hash<std::string_view>{}(tenant) % kSlots];
  }
  std::array<Entry, kSlots> slots_{};
};

}  // namespace dripgate::control
