#include "dataplane/class_cache.h"

#include <gtest/gtest.h>

#include <cstring>

namespace dripgate::dataplane {
namespace {

Ipv4Key key(uint32_t src, uint16_t sport = 1000) {
  Ipv4Key k;
  std::memset(&k, 0, sizeof(k));
  k.src = src;
  k.dst = 0x01020304;
  k.sport = sport;
  k.dport = 443;
  k.proto = 6;
  return k;
}

TEST(ClassCache, RemembersPerKeyAndDscpUntilValidUntil) {
  ClassCache c(4);
  int cls = -7;
  EXPECT_FALSE(c.find(key(1), 0, 5, 100, &cls));  // nothing cached yet
  c.put(key(1), 0, 5, 3, 200);
  ASSERT_TRUE(c.find(key(1), 0, 5, 100, &cls));
  EXPECT_EQ(cls, 3);
  ASSERT_TRUE(c.find(key(1), 0, 5, 199, &cls));
  EXPECT_FALSE(c.find(key(1), 0, 5, 200, &cls));        // valid_until is exclusive
  EXPECT_FALSE(c.find(key(1), 10, 5, 100, &cls));       // another DSCP: rules may differ
  EXPECT_FALSE(c.find(key(1, 1001), 0, 5, 100, &cls));  // another port, same set
  c.put(key(1), 10, 5, -1, 200);                        // kNoMatch is remembered too
  ASSERT_TRUE(c.find(key(1), 10, 5, 100, &cls));
  EXPECT_EQ(cls, -1);
  ASSERT_TRUE(c.find(key(1), 0, 5, 100, &cls));  // both ways of the set hold
  EXPECT_EQ(cls, 3);
}

TEST(ClassCache, TwoWaysPerSetTheOldestIsReplaced) {
  ClassCache c(4);
  int cls = 0;
  c.put(key(1), 0, 7, 1, 1000);
  c.put(key(2), 0, 7 + 16, 2, 1000);  // same set (16 sets)
  c.put(key(3), 0, 7, 3, 1000);
  EXPECT_FALSE(c.find(key(1), 0, 7, 0, &cls));
  ASSERT_TRUE(c.find(key(2), 0, 7 + 16, 0, &cls));
  EXPECT_EQ(cls, 2);
  ASSERT_TRUE(c.find(key(3), 0, 7, 0, &cls));
  EXPECT_EQ(cls, 3);
}

// A new flow table generation (a tag, untag or sweep) and a new classifier (a reload) each
// forget every entry; the same generation again forgets nothing.
TEST(ClassCache, NewGenerationOrNewRulesForgetEverything) {
  ClassCache c(4);
  int cls = 0;
  c.observe(4);
  c.put(key(1), 0, 1, 2, 1000);
  c.observe(4);
  EXPECT_TRUE(c.find(key(1), 0, 1, 0, &cls));
  c.observe(5);
  EXPECT_FALSE(c.find(key(1), 0, 1, 0, &cls));
  c.put(key(1), 0, 1, 2, 1000);
  EXPECT_TRUE(c.find(key(1), 0, 1, 0, &cls));
  c.invalidate();
  EXPECT_FALSE(c.find(key(1), 0, 1, 0, &cls));
  c.put(key(1), 0, 1, 0, 1000);
  ASSERT_TRUE(c.find(key(1), 0, 1, 0, &cls));
  EXPECT_EQ(cls, 0);
}

// An entry keeps its tag's tenant beside the class, up to the largest id; a rule's class or no
// match carries none.
TEST(ClassCache, KeepsTheTenantWithTheClass) {
  ClassCache c(4);
  int cls = 0;
  uint32_t tenant = 99;
  c.put(key(1), 0, 1, 3, 1000, 7);
  ASSERT_TRUE(c.find(key(1), 0, 1, 0, &cls, &tenant));
  EXPECT_EQ(cls, 3);
  EXPECT_EQ(tenant, 7u);
  c.put(key(2), 0, 2, 5, 1000, TenantTable::kMaxTenants);
  ASSERT_TRUE(c.find(key(2), 0, 2, 0, &cls, &tenant));
  EXPECT_EQ(cls, 5);
  EXPECT_EQ(tenant, TenantTable::kMaxTenants);
  c.put(key(3), 0, 3, -1, 1000);
  ASSERT_TRUE(c.find(key(3), 0, 3, 0, &cls, &tenant));
  EXPECT_EQ(cls, -1);
  EXPECT_EQ(tenant, 0u);
  ASSERT_TRUE(c.find(key(1), 0, 1, 0, &cls));  // the tenant is optional to read
  EXPECT_EQ(cls, 3);
}

// A fresh cache holds nothing, whatever the key (an all-zero key included).
TEST(ClassCache, FreshCacheMatchesNothing) {
  ClassCache c(2);
  Ipv4Key zero;
  std::memset(&zero, 0, sizeof(zero));
  int cls = 0;
  for (uint32_t h = 0; h < 8; ++h) {
    EXPECT_FALSE(c.find(zero, 0, h, 0, &cls));
    EXPECT_FALSE(c.find(key(h), 0, h, 0, &cls));
  }
}

}  // namespace
}  // namespace dripgate::dataplane
