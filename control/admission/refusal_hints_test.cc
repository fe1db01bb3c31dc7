// RefusalHints on an injected clock: a hint holds until its time and no longer than kMaxMs,
// names one tenant only, goes when the tenant admits, and two tenants in one slot take turns.
#include "control/admission/refusal_hints.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace dripgate::control {
namespace {

TEST(RefusalHints, HoldUntilTheirTimeForTheirTenantOnly) {
  auto h = std::make_unique<RefusalHints>();
  EXPECT_FALSE(h->refusing("acme", 0));
  h->note("acme", 1000, 1250);
  EXPECT_TRUE(h->refusing("acme", 1000));
  EXPECT_TRUE(h->refusing("acme", 1249));
  EXPECT_FALSE(h->refusing("acme", 1250));
  EXPECT_FALSE(h->refusing("globex", 1100));
}

TEST(RefusalHints, LastAtMostTheirBound) {
  auto h = std::make_unique<RefusalHints>();
  h->note("acme", 0, 31LL * 86400 * 1000);  // a quota refused until the month ends
  EXPECT_TRUE(h->refusing("acme", RefusalHints::kMaxMs - 1));
  EXPECT_FALSE(h->refusing("acme", RefusalHints::kMaxMs));
}

TEST(RefusalHints, GoWhenTheTenantAdmits) {
  auto h = std::make_unique<RefusalHints>();
  h->note("acme", 0, 500);
  h->note("globex", 0, 500);
  h->note("acme", 10, 10);  // admitted with tokens left
  EXPECT_FALSE(h->refusing("acme", 20));
  EXPECT_TRUE(h->refusing("globex", 20));
}

TEST(RefusalHints, TenantsThatMeetInASlotTakeTurns) {
  auto h = std::make_unique<RefusalHints>();
  // Two names in one slot, found by trying: the table has 4,096.
  std::string a = "t0", b;
  const size_t want = std::hash<std::string_view>{}(a) % 4096;
  for (int i = 1; b.empty(); ++i) {
    std::string n = "t" + std::to_string(i);
    if (std::hash<std::string_view>{}(n) % 4096 == want) b = n;
  }
  h->note(a, 0, 500);
  h->note(b, 0, 500);
  EXPECT_FALSE(h->refusing(a, 10));  // forgotten: its requests go out at once, as without hints
  EXPECT_TRUE(h->refusing(b, 10));
  h->note(a, 10, 10);  // a admitted: b's hint is not a's to clear
  EXPECT_TRUE(h->refusing(b, 20));
}

}  // namespace
}  // namespace dripgate::control
