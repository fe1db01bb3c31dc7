#include "dataplane/tenants.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

namespace dripgate::dataplane {
namespace {

TEST(TenantTable, InternsNamesIntoDenseIdsFromOne) {
  TenantTable t;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.intern("acme"), 1u);
  EXPECT_EQ(t.intern("globex"), 2u);
  EXPECT_EQ(t.intern("acme"), 1u);  // known: the same id
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.name(1), "acme");
  EXPECT_EQ(t.name(2), "globex");
  EXPECT_EQ(t.name(TenantTable::kNone), "");
  EXPECT_EQ(t.name(3), "");  // not handed out
  EXPECT_EQ(t.untracked(), 0u);
}

TEST(TenantTable, RefusesWhatIsNotAnId) {
  TenantTable t;
  EXPECT_EQ(t.intern(""), TenantTable::kNone);
  EXPECT_EQ(t.intern("a b"), TenantTable::kNone);
  EXPECT_EQ(t.intern("{t:x}"), TenantTable::kNone);
  EXPECT_EQ(t.intern(std::string(65, 'a')), TenantTable::kNone);
  EXPECT_EQ(t.intern(std::string(64, 'a')), 1u);
  EXPECT_EQ(t.name(1), std::string(64, 'a'));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.untracked(), 0u);  // refused, not untracked
}

TEST(TenantTable, BeyondTheBoundTagsGetNoTenantAndAreCounted) {
  TenantTable t(2);
  EXPECT_EQ(t.intern("a"), 1u);
  EXPECT_EQ(t.intern("b"), 2u);
  EXPECT_EQ(t.intern("c"), TenantTable::kNone);
  EXPECT_EQ(t.intern("c"), TenantTable::kNone);
  EXPECT_EQ(t.intern("a"), 1u);  // the known ones keep theirs
  EXPECT_EQ(t.untracked(), 2u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.capacity(), 2u);
}

TEST(TenantTable, TheBoundIsAtMostSixteenBits) {
  TenantTable t(1u << 20);
  EXPECT_EQ(t.capacity(), TenantTable::kMaxTenants);
}

TEST(TenantTable, FillsEveryChunkUpToTheDefaultBound) {
  TenantTable t;
  for (uint32_t i = 1; i <= TenantTable::kMaxTenants; ++i)
    ASSERT_EQ(t.intern("t" + std::to_string(i)), i);
  EXPECT_EQ(t.intern("one-more"), TenantTable::kNone);
  EXPECT_EQ(t.name(TenantTable::kMaxTenants), "t65535");
  EXPECT_EQ(t.name(1024), "t1024");
  EXPECT_EQ(t.untracked(), 1u);
}

// A reader on another thread sees, for every id below size(), the whole name written for it.
TEST(TenantTable, ReadersOnOtherThreadsSeeWholeNames) {
  TenantTable t;
  constexpr uint32_t kN = 5000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> checked{0}, wrong{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire) || checked.load() == 0) {
      const uint32_t n = t.size();
      for (uint32_t id = n > 64 ? n - 64 : 1; id <= n; ++id) {
        if (t.name(id) != "tenant-" + std::to_string(id)) wrong.fetch_add(1);
        checked.fetch_add(1);
      }
    }
  });
  for (uint32_t i = 1; i <= kN; ++i) ASSERT_EQ(t.intern("tenant-" + std::to_string(i)), i);
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(checked.load(), 0u);
}

}  // namespace
}  // namespace dripgate::dataplane
