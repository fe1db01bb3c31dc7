// The flow table on a real (hugepage-less) EAL: lookups, tags, expiry and idle sweeps with an
// injected clock, table-full behaviour, RCU-deferred reuse, and a reader thread racing a writer.
#include "dataplane/flow_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/eal_environment.h"

namespace dripgate::dataplane {
namespace {

constexpr uint64_t kHz = 1000;  // the injected clock ticks in milliseconds

FiveTuple v4_key(uint32_t i, uint16_t sport = 1000) {
  const std::string src = "10." + std::to_string((i >> 16) & 0xFF) + "." +
                          std::to_string((i >> 8) & 0xFF) + "." + std::to_string(i & 0xFF);
  auto t = dataplane::make_tuple(src, sport, "192.0.2.1", 443, 6);
  EXPECT_TRUE(t.has_value());
  return *t;
}

std::unique_ptr<FlowTable> make_table(uint32_t entries, uint32_t idle_s = 300,
                                      const char* name = "ft_test") {
  FlowTableParams p;
  p.name = name;
  p.entries = entries;
  p.tsc_hz = kHz;
  p.idle_timeout_s = idle_s;
  p.max_readers = 8;
  std::string error;
  auto t = FlowTable::create(p, &error);
  EXPECT_NE(t, nullptr) << error;
  return t;
}

// The fast path probes with hash_ipv4: it must be the table's own hash function, rte_hash_crc
// over the key's 16 bytes.
TEST(FlowTable, HashIpv4IsTheTablesHash) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    Ipv4Key k;
    const uint64_t w[2] = {rng(), rng()};
    std::memcpy(&k, w, sizeof(k));
    ASSERT_EQ(FlowTable::hash_ipv4(k), rte_hash_crc(&k, sizeof(k), 0)) << i;
  }
}

TEST(FlowTable, CreateRejectsBadParams) {
  std::string error;
  FlowTableParams p;
  p.tsc_hz = 0;
  EXPECT_EQ(FlowTable::create(p, &error), nullptr);
  EXPECT_NE(error.find("tsc_hz"), std::string::npos) << error;
  p.tsc_hz = kHz;
  p.entries = 2;
  EXPECT_EQ(FlowTable::create(p, &error), nullptr);
  EXPECT_NE(error.find("entries"), std::string::npos) << error;
  p.entries = 64;
  p.name = "a_name_that_is_far_too_long";
  EXPECT_EQ(FlowTable::create(p, &error), nullptr);
  EXPECT_NE(error.find("name"), std::string::npos) << error;
}

TEST(FlowTable, AddLookupDel) {
  auto t = make_table(1024);
  ASSERT_TRUE(t);
  const FiveTuple a = v4_key(1);
  const FiveTuple b = v4_key(2);
  EXPECT_EQ(t->lookup(a, 0), FlowTable::kNoMatch);
  EXPECT_EQ(t->add(a, 3, 0, 0), 0);
  EXPECT_EQ(t->add(b, 5, 0, 0), 0);
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->lookup(a, 1), 3);
  EXPECT_EQ(t->lookup(b, 1), 5);
  // Any field of the tuple is part of the key.
  EXPECT_EQ(t->lookup(v4_key(1, 1001), 1), FlowTable::kNoMatch);
  FiveTuple other_proto = a;
  other_proto.proto = 17;
  EXPECT_EQ(t->lookup(other_proto, 1), FlowTable::kNoMatch);

  EXPECT_TRUE(t->del(a));
  EXPECT_FALSE(t->del(a));
  EXPECT_EQ(t->lookup(a, 2), FlowTable::kNoMatch);
  EXPECT_EQ(t->lookup(b, 2), 5);
  EXPECT_EQ(t->size(), 1u);
}

TEST(FlowTable, LookupBulkMatchesLookup) {
  auto t = make_table(1024, 0);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < 150; ++i) keys.push_back(v4_key(i));
  for (uint32_t i = 0; i < 150; i += 3)
    ASSERT_EQ(t->add(keys[i], static_cast<uint16_t>(i), 0, 0), 0);
  ASSERT_EQ(t->add(keys[1], 9, 1, 0), 0);  // expires at tick 1000
  std::vector<const FiveTuple*> ptrs;
  for (const FiveTuple& k : keys) ptrs.push_back(&k);
  std::vector<int> classes(keys.size(), 12345);
  t->lookup_bulk(ptrs.data(), static_cast<uint32_t>(ptrs.size()), 1000, classes.data());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(classes[i], i % 3 == 0 ? static_cast<int>(i) : FlowTable::kNoMatch) << i;
    EXPECT_EQ(classes[i], t->lookup(keys[i], 1000)) << i;
  }
  t->lookup_bulk(ptrs.data(), 0, 1000, classes.data());  // n = 0 touches nothing
}

TEST(FlowTable, V4AndV6KeysWithTheSameBytesAreDistinct) {
  auto t = make_table(64);
  ASSERT_TRUE(t);
  const FiveTuple v4 = *dataplane::make_tuple("10.0.0.1", 1, "10.0.0.2", 2, 6);
  FiveTuple v6 = v4;
  v6.l3 = L3::kIpv6;
  EXPECT_EQ(t->add(v4, 1, 0, 0), 0);
  EXPECT_EQ(t->lookup(v6, 0), FlowTable::kNoMatch);
  EXPECT_EQ(t->add(v6, 2, 0, 0), 0);
  EXPECT_EQ(t->lookup(v4, 0), 1);
  EXPECT_EQ(t->lookup(v6, 0), 2);
  FiveTuple none = v4;
  none.l3 = L3::kNone;
  EXPECT_EQ(t->add(none, 1, 0, 0), -EINVAL);
}

FiveTuple v6_key(uint32_t i) {
  auto t = dataplane::make_tuple("2001:db8::" + std::to_string(i % 10000), 1000, "2001:db8::ffff",
                                 443, 17);
  EXPECT_TRUE(t.has_value());
  return *t;
}

// IPv4 and IPv6 flows sit in separate tables: one bulk lookup over both, each answer in its
// key's place, and the same answers one by one.
TEST(FlowTable, LookupBulkMixesFamilies) {
  auto t = make_table(1024, 0);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < 100; ++i) keys.push_back(i % 3 == 1 ? v6_key(i) : v4_key(i));
  for (uint32_t i = 0; i < 100; i += 2)
    ASSERT_EQ(t->add(keys[i], static_cast<uint16_t>(i), 0, 0), 0);
  std::vector<const FiveTuple*> ptrs;
  for (const FiveTuple& k : keys) ptrs.push_back(&k);
  std::vector<int> classes(keys.size(), 12345);
  t->lookup_bulk(ptrs.data(), static_cast<uint32_t>(ptrs.size()), 1, classes.data());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(classes[i], i % 2 == 0 ? static_cast<int>(i) : FlowTable::kNoMatch) << i;
    EXPECT_EQ(classes[i], t->lookup(keys[i], 1)) << i;
  }
}

// The inline parser's path: IPv4 keys in the table's form, hashed by the caller.
TEST(FlowTable, LookupBulkIpv4MatchesLookup) {
  auto t = make_table(1024, 0);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < 64; ++i) keys.push_back(v4_key(i, static_cast<uint16_t>(i)));
  for (uint32_t i = 0; i < 64; i += 4)
    ASSERT_EQ(t->add(keys[i], static_cast<uint16_t>(i), 0, 0), 0);
  ASSERT_EQ(t->add(keys[8], 9, 1, 0), 0);  // expires at tick 1000
  std::vector<Ipv4Key> k4;
  std::vector<uint32_t> hashes;
  for (const FiveTuple& k : keys) {
    k4.push_back(to_ipv4_key(k));
    hashes.push_back(FlowTable::hash_ipv4(k4.back()));
  }
  std::vector<int> classes(keys.size(), 12345);
  t->lookup_bulk_ipv4(k4.data(), hashes.data(), 64, 1000, classes.data());
  for (uint32_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(classes[i], i % 4 == 0 && i != 8 ? static_cast<int>(i) : FlowTable::kNoMatch) << i;
    EXPECT_EQ(classes[i], t->lookup(keys[i], 1000)) << i;
  }
}

// The probe is skipped for keys whose filter bit is clear: adds, deletes, re-adds and sweeps
// keep every tagged key findable, and untagged keys stay untagged.
TEST(FlowTable, LookupBulkIpv4FollowsTagsAndUntags) {
  auto t = make_table(256, 0);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  std::vector<Ipv4Key> k4;
  std::vector<uint32_t> hashes;
  for (uint32_t i = 0; i < 64; ++i) {
    keys.push_back(v4_key(i));
    k4.push_back(to_ipv4_key(keys.back()));
    hashes.push_back(FlowTable::hash_ipv4(k4.back()));
  }
  auto check = [&](const char* stage) {
    std::vector<int> classes(64, 12345);
    t->lookup_bulk_ipv4(k4.data(), hashes.data(), 64, 1, classes.data());
    for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(classes[i], t->lookup(keys[i], 1)) << stage << i;
  };
  for (uint32_t i = 0; i < 64; i += 2) ASSERT_EQ(t->add(keys[i], 1, i % 4 == 0 ? 5 : 0, 0), 0);
  check("added ");
  for (uint32_t i = 0; i < 64; i += 6) EXPECT_TRUE(t->del(keys[i]));
  check("deleted ");
  for (uint32_t i = 0; i < 64; i += 3) ASSERT_EQ(t->add(keys[i], 2, 0, 0), 0);
  check("re-added ");
  EXPECT_GT(t->sweep(5000), 0u);
  check("swept ");
  for (uint32_t i = 0; i < 64; ++i) t->del(keys[i]);
  std::vector<int> classes(64, 12345);
  t->lookup_bulk_ipv4(k4.data(), hashes.data(), 64, 1, classes.data());
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(classes[i], FlowTable::kNoMatch) << i;
}

// What a reader that remembers classes (the RX lcore's ClassCache) relies on: every change a
// lookup could see moves the generation, and nothing else does; a hit reports the tag's expiry.
TEST(FlowTable, GenerationMovesWithEveryChangeAndExpiryIsReported) {
  auto t = make_table(64, 10);  // idle after 10 s = 10000 ticks
  ASSERT_TRUE(t);
  const FiveTuple a = v4_key(1), b = v4_key(2);
  const Ipv4Key ka = to_ipv4_key(a);
  const uint32_t ha = FlowTable::hash_ipv4(ka);
  uint64_t g = t->generation();
  auto moved = [&] {
    const uint64_t now = t->generation();
    const bool m = now != g;
    g = now;
    return m;
  };
  ASSERT_EQ(t->add(a, 1, 0, 0), 0);  // tag
  EXPECT_TRUE(moved());
  int cls = 0;
  uint64_t expires = 99;
  t->lookup_bulk_ipv4(&ka, &ha, 1, 1, &cls, nullptr, &expires);
  EXPECT_EQ(cls, 1);
  EXPECT_EQ(expires, 0u);              // no tag expiry
  EXPECT_FALSE(moved());               // lookups change nothing
  ASSERT_EQ(t->add(a, 2, 3, 100), 0);  // re-tag: another class, expiry at 100 + 3 s
  EXPECT_TRUE(moved());
  t->lookup_bulk_ipv4(&ka, &ha, 1, 200, &cls, nullptr, &expires);
  EXPECT_EQ(cls, 2);
  EXPECT_EQ(expires, 3100u);
  EXPECT_FALSE(t->del(b));  // nothing removed: no change
  EXPECT_FALSE(moved());
  EXPECT_TRUE(t->del(a));  // untag
  EXPECT_TRUE(moved());
  t->set_idle_timeout(5);
  EXPECT_FALSE(moved());
  ASSERT_EQ(t->add(b, 1, 0, 0), 0);
  EXPECT_TRUE(moved());
  EXPECT_EQ(t->sweep(1000), 0u);  // nothing idle yet: no change
  EXPECT_FALSE(moved());
  EXPECT_EQ(t->sweep(6000), 1u);  // b idled out
  EXPECT_TRUE(moved());
  EXPECT_EQ(t->refresh_ticks(), kHz / 1024);  // a cache entry lives no longer
}

// More tagged keys share one filter bit than its count holds: the bit stays set for good, so
// none of them is ever missed, whichever are deleted.
TEST(FlowTable, FilterBitSharedByManyKeysNeverMissesOne) {
  auto t = make_table(512, 0);  // 4096 filter bits
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  const uint32_t want = FlowTable::hash_ipv4(to_ipv4_key(v4_key(0, 1))) & 4095;
  for (uint32_t i = 0; keys.size() < 300 && i < (1u << 24); ++i) {
    const FiveTuple k = v4_key(i >> 12, static_cast<uint16_t>(i & 4095));
    if ((FlowTable::hash_ipv4(to_ipv4_key(k)) & 4095) == want) keys.push_back(k);
  }
  ASSERT_EQ(keys.size(), 300u);
  size_t added = 0;
  for (const FiveTuple& k : keys) added += t->add(k, 3, 0, 0) == 0;
  ASSERT_GT(added, 260u);  // past the count's 255
  auto probe = [&](const FiveTuple& k) {
    const Ipv4Key k4 = to_ipv4_key(k);
    const uint32_t h = FlowTable::hash_ipv4(k4);
    int cls = 12345;
    t->lookup_bulk_ipv4(&k4, &h, 1, 1, &cls);
    return cls;
  };
  for (const FiveTuple& k : keys) EXPECT_EQ(probe(k), t->lookup(k, 1));
  for (size_t i = 0; i + 1 < keys.size(); ++i) t->del(keys[i]);
  ASSERT_EQ(t->add(keys[0], 4, 0, 0), 0);
  EXPECT_EQ(probe(keys[0]), 4);
  EXPECT_EQ(probe(keys.back()), t->lookup(keys.back(), 1));
}

// flow_table_size bounds the flows of both families together; a sweep walks both tables.
TEST(FlowTable, FamiliesShareTheSizeAndTheSweep) {
  auto t = make_table(16, 0);
  ASSERT_TRUE(t);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 5, 0), 0);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_EQ(t->add(v6_key(i), 2, i < 4 ? 5 : 0, 0), 0);
  EXPECT_EQ(t->size(), 16u);
  EXPECT_EQ(t->add(v4_key(100), 1, 0, 0), -ENOSPC);
  EXPECT_EQ(t->add(v6_key(100), 1, 0, 0), -ENOSPC);
  EXPECT_EQ(t->add(v6_key(0), 3, 5, 0), 0);  // a re-tag takes no room
  EXPECT_EQ(t->lookup(v6_key(0), 1), 3);
  EXPECT_EQ(t->sweep(5000), 12u);  // the 8 v4 and 4 v6 tags expire
  EXPECT_EQ(t->size(), 4u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_FALSE(t->get(v4_key(i))) << i;
    EXPECT_EQ(t->get(v6_key(i)).has_value(), i >= 4) << i;
  }
  EXPECT_EQ(t->add(v4_key(100), 1, 0, 0), 0);
}

// A tag line's flows in one call: the same tags as add() one by one (both families, more keys
// than one bulk probe holds, a key already tagged, a key twice), and a refusal stops the batch
// at its index with the ones before kept.
TEST(FlowTable, AddManyIsAddInOrder) {
  auto t = make_table(256, 0);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->add(v4_key(4), 1, 0, 10), 0);  // a tag the line re-tags
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < 100; ++i) keys.push_back(i % 3 == 0 ? v6_key(i) : v4_key(i));
  keys.push_back(v4_key(5));  // twice in one line: the second is a re-tag
  int rc = -1;
  EXPECT_EQ(t->add_many(keys.data(), keys.size(), 2, 30, 1000, &rc), keys.size());
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(t->size(), 100u);
  for (const FiveTuple& k : keys) {
    const auto e = t->get(k);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->cls, 2);
    EXPECT_EQ(e->expires, 1000u + 30 * kHz);
    EXPECT_EQ(e->last_seen, 1000u);
  }
  // Full at 256: 156 more fit, the 157th is refused, the ones after are not tried.
  keys.clear();
  for (uint32_t i = 1000; i < 1200; ++i) keys.push_back(v4_key(i));
  EXPECT_EQ(t->add_many(keys.data(), keys.size(), 1, 0, 2000, &rc), 156u);
  EXPECT_EQ(rc, -ENOSPC);
  EXPECT_EQ(t->size(), 256u);
  EXPECT_TRUE(t->get(keys[155]));
  EXPECT_FALSE(t->get(keys[156]));
  EXPECT_FALSE(t->get(keys[157]));
}

TEST(FlowTable, RetagReplacesClassAndExpiry) {
  auto t = make_table(64);
  ASSERT_TRUE(t);
  const FiveTuple a = v4_key(7);
  ASSERT_EQ(t->add(a, 1, 10, 0), 0);
  ASSERT_EQ(t->add(a, 2, 20, 5000), 0);
  EXPECT_EQ(t->size(), 1u);
  EXPECT_EQ(t->lookup(a, 5001), 2);
  const auto e = t->get(a);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cls, 2);
  EXPECT_EQ(e->expires, 25000u);
}

// A tag's tenant comes back from every lookup form with its class; a re-tag replaces it, an
// untag or an expiry leaves none.
TEST(FlowTable, TagsCarryTheirTenant) {
  auto t = make_table(1024, 0);
  ASSERT_TRUE(t);
  const FiveTuple a = v4_key(1), b = v4_key(2), c = v4_key(3);
  const FiveTuple v6 = *dataplane::make_tuple("2001:db8::1", 5, "2001:db8::2", 443, 6);
  ASSERT_EQ(t->add(a, 1, 0, 0, 7), 0);
  ASSERT_EQ(t->add(b, 2, 0, 0), 0);  // no tenant
  ASSERT_EQ(t->add(v6, 3, 0, 0, 9), 0);
  uint32_t tenant = 12345;
  EXPECT_EQ(t->lookup(a, 1, &tenant), 1);
  EXPECT_EQ(tenant, 7u);
  EXPECT_EQ(t->lookup(b, 1, &tenant), 2);
  EXPECT_EQ(tenant, 0u);
  EXPECT_EQ(t->lookup(v6, 1, &tenant), 3);
  EXPECT_EQ(tenant, 9u);
  EXPECT_EQ(t->lookup(c, 1, &tenant), FlowTable::kNoMatch);
  EXPECT_EQ(tenant, 0u);
  EXPECT_EQ(t->get(a)->tenant, 7u);

  const FiveTuple* ptrs[] = {&a, &b, &c, &v6};
  int classes[4];
  uint32_t tenants[4] = {99, 99, 99, 99};
  t->lookup_bulk(ptrs, 4, 1, classes, tenants);
  EXPECT_EQ(std::vector<int>(classes, classes + 4), (std::vector<int>{1, 2, -1, 3}));
  EXPECT_EQ(std::vector<uint32_t>(tenants, tenants + 4), (std::vector<uint32_t>{7, 0, 0, 9}));

  const Ipv4Key k4[] = {to_ipv4_key(a), to_ipv4_key(b), to_ipv4_key(c)};
  const uint32_t h4[] = {FlowTable::hash_ipv4(k4[0]), FlowTable::hash_ipv4(k4[1]),
                         FlowTable::hash_ipv4(k4[2])};
  uint32_t t4[3] = {99, 99, 99};
  t->lookup_bulk_ipv4(k4, h4, 3, 1, classes, t4);
  EXPECT_EQ(std::vector<int>(classes, classes + 3), (std::vector<int>{1, 2, -1}));
  EXPECT_EQ(std::vector<uint32_t>(t4, t4 + 3), (std::vector<uint32_t>{7, 0, 0}));

  // Re-tagged for another tenant, then with an expiry: the tenant goes with the tag.
  ASSERT_EQ(t->add(a, 1, 0, 10, 8), 0);
  EXPECT_EQ(t->lookup(a, 11, &tenant), 1);
  EXPECT_EQ(tenant, 8u);
  ASSERT_EQ(t->add(a, 4, 1, 20), 0);  // expires at 1020, no tenant now
  EXPECT_EQ(t->lookup(a, 21, &tenant), 4);
  EXPECT_EQ(tenant, 0u);
  ASSERT_EQ(t->add(a, 4, 1, 20, 8), 0);
  tenant = 99;
  EXPECT_EQ(t->lookup(a, 1020, &tenant), FlowTable::kNoMatch);  // expired
  EXPECT_EQ(tenant, 0u);
  t4[0] = 99;
  t->lookup_bulk_ipv4(k4, h4, 1, 1020, classes, t4);
  EXPECT_EQ(t4[0], 0u);
  // Untagged: no tenant either.
  EXPECT_TRUE(t->del(v6));
  tenant = 99;
  EXPECT_EQ(t->lookup(v6, 30, &tenant), FlowTable::kNoMatch);
  EXPECT_EQ(tenant, 0u);
}

// add_many gives every flow of a line the line's tenant.
TEST(FlowTable, AddManyTagsEveryFlowForTheTenant) {
  auto t = make_table(1024, 0);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < 20; ++i) keys.push_back(v4_key(i));
  int rc = -1;
  ASSERT_EQ(t->add_many(keys.data(), keys.size(), 2, 0, 0, &rc, 42), keys.size());
  EXPECT_EQ(rc, 0);
  for (const FiveTuple& k : keys) {
    uint32_t tenant = 0;
    EXPECT_EQ(t->lookup(k, 1, &tenant), 2);
    EXPECT_EQ(tenant, 42u);
  }
}

TEST(FlowTable, TagExpiry) {
  auto t = make_table(64, 0);
  ASSERT_TRUE(t);
  const FiveTuple a = v4_key(1);
  const FiveTuple forever = v4_key(2);
  ASSERT_EQ(t->add(a, 4, 5, 1000), 0);  // expires at 6000
  ASSERT_EQ(t->add(forever, 4, 0, 1000), 0);
  EXPECT_EQ(t->lookup(a, 5999), 4);
  EXPECT_EQ(t->lookup(a, 6000), FlowTable::kNoMatch);  // expired before any sweep
  EXPECT_EQ(t->sweep(5999), 0u);
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->sweep(6000), 1u);
  EXPECT_EQ(t->size(), 1u);
  EXPECT_FALSE(t->get(a));
  EXPECT_EQ(t->sweep(1'000'000'000), 0u);  // no tag expiry, no idle timeout
  EXPECT_EQ(t->lookup(forever, 1'000'000'000), 4);
}

TEST(FlowTable, IdleSweepSparesFlowsThatWereSeen) {
  auto t = make_table(1024, 10);  // idle after 10 s = 10000 ticks
  ASSERT_TRUE(t);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 0, 0), 0);
  for (uint32_t i = 0; i < 100; i += 2) ASSERT_EQ(t->lookup(v4_key(i), 8000), 1);
  EXPECT_EQ(t->sweep(9999), 0u);
  EXPECT_EQ(t->sweep(10000), 50u);  // the odd ones, last seen at 0
  EXPECT_EQ(t->size(), 50u);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(t->lookup(v4_key(i), 10001), i % 2 == 0 ? 1 : FlowTable::kNoMatch) << i;
  }
  EXPECT_EQ(t->get(v4_key(0))->last_seen, 10001u);
  EXPECT_EQ(t->sweep(20000), 0u);
  EXPECT_EQ(t->sweep(20001), 50u);
  EXPECT_EQ(t->size(), 0u);
}

// The main lcore's sweep: a pass spread over steps, each walking its share of the flows held, so
// that every stale flow of both families is gone within one period's steps (plus the step that
// finds a table's end), and no step walks much more than its share.
TEST(FlowTable, SweepStepsCoverBothTablesWithinAPeriod) {
  EXPECT_EQ(make_table(64, 0, "ft_p0")->sweep_period_ms(), 10'000u);    // no idle timeout
  EXPECT_EQ(make_table(64, 4, "ft_p4")->sweep_period_ms(), 1'000u);     // at least 1 s
  EXPECT_EQ(make_table(64, 300, "ft_p3")->sweep_period_ms(), 10'000u);  // at most 10 s
  auto t = make_table(4096, 20);  // idle after 20 s; a pass in 2.5 s, 25 steps
  ASSERT_TRUE(t);
  ASSERT_EQ(t->sweep_period_ms(), 2'500u);
  const uint32_t steps = t->sweep_period_ms() / FlowTable::kSweepStepMs;
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 0, 0), 0);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(t->add(v6_key(i), 1, 0, 0), 0);
  for (uint32_t i = 0; i < 1000; i += 2) ASSERT_EQ(t->lookup(v4_key(i), 15'000), 1);
  size_t removed = 0;
  uint32_t calls = 0;
  for (; calls < 4 * steps && removed < 600; ++calls) {
    const size_t r = t->sweep_step(20'000);
    EXPECT_LE(r, 1000 / steps + 1) << "step " << calls << " walked more than its share";
    removed += r;
  }
  EXPECT_EQ(removed, 600u);  // the 500 odd IPv4 flows and the 100 IPv6 ones
  EXPECT_LE(calls, 2 * (steps + 1));
  EXPECT_EQ(t->size(), 500u);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_EQ(t->get(v4_key(i)).has_value(), i % 2 == 0) << i;
}

// A tag that finds the table full takes back the slots of expired and idle flows first (the
// steps may not have reached them yet), at most ten times a second.
TEST(FlowTable, ATagThatFindsTheTableFullSweepsItFirst) {
  auto t = make_table(16, 0);
  ASSERT_TRUE(t);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 0, 0), 0);   // forever
  for (uint32_t i = 8; i < 16; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 1, 0), 0);  // until 1000
  EXPECT_EQ(t->add(v4_key(100), 1, 0, 500), -ENOSPC);  // swept at 500: nothing expired
  EXPECT_EQ(t->add(v4_key(100), 1, 0, 1050), 0);       // swept at 1050: 8 expired
  EXPECT_EQ(t->size(), 9u);
  for (uint32_t i = 101; i < 108; ++i) ASSERT_EQ(t->add(v4_key(i), 1, 1, 1050), 0);  // until 2050
  EXPECT_EQ(t->add(v4_key(200), 1, 0, 2000), -ENOSPC);  // swept at 2000: nothing expired
  EXPECT_EQ(t->add(v4_key(200), 1, 0, 2060), -ENOSPC);  // 7 expired, but swept 60 ms ago
  EXPECT_EQ(t->add(v4_key(200), 1, 0, 2100), 0);        // 100 ms later: swept
  EXPECT_EQ(t->size(), 10u);
}

TEST(FlowTable, FullTableAndSlotRecycling) {
  auto t = make_table(64);
  ASSERT_TRUE(t);
  uint32_t added = 0;
  int rc = 0;
  for (uint32_t i = 0; i < 1000 && rc == 0; ++i) {
    rc = t->add(v4_key(i), 1, 0, 0);
    if (rc == 0) ++added;
  }
  EXPECT_EQ(rc, -ENOSPC);
  // The refusal names the setting to raise, and how much of it is in use.
  EXPECT_EQ(t->add_error(rc), "flow table full: " + std::to_string(added) +
                                  " flows tagged, dataplane.flow_table_size = 64 (raising it "
                                  "needs a restart)");
  EXPECT_EQ(t->add_error(-EINVAL), "cannot tag the flow: Invalid argument");
  EXPECT_GE(added, 32u);  // cuckoo hashing fills most of the table before refusing
  EXPECT_LE(added, 65u);
  EXPECT_EQ(t->size(), added);
  for (uint32_t i = 0; i < added; ++i) EXPECT_TRUE(t->del(v4_key(i)));
  EXPECT_EQ(t->size(), 0u);
  // No reader is registered, so every deleted slot is reusable at once; churn far past the
  // capacity must never run out of key slots or values.
  for (uint32_t round = 0; round < 50; ++round) {
    for (uint32_t i = 0; i < 16; ++i) ASSERT_EQ(t->add(v4_key(round * 16 + i), 2, 0, 0), 0);
    for (uint32_t i = 0; i < 16; ++i) ASSERT_EQ(t->add(v4_key(round * 16 + i), 3, 0, 0), 0);
    for (uint32_t i = 0; i < 16; ++i) ASSERT_TRUE(t->del(v4_key(round * 16 + i)));
  }
  EXPECT_EQ(t->size(), 0u);
}

// A registered reader that has not reported quiescent pins every deleted entry: its memory is
// not reused, so once the deleted keys hold all slots, adds fail; one quiescent() frees them.
TEST(FlowTable, DeletedEntriesWaitForReaders) {
  auto t = make_table(16);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->register_reader(3), 0);
  uint32_t next = 0;
  int rc = 0;
  uint32_t cycles = 0;
  for (; cycles < 200 && rc == 0; ++cycles) {
    const FiveTuple k = v4_key(next++);
    rc = t->add(k, 1, 0, 0);
    if (rc == 0) {
      EXPECT_TRUE(t->del(k));
    }
  }
  EXPECT_EQ(rc, -ENOSPC) << "deleted slots were reused while a reader could still hold them";
  EXPECT_LE(cycles, 20u);
  EXPECT_EQ(t->size(), 0u);
  t->quiescent(3);
  EXPECT_EQ(t->add(v4_key(next++), 1, 0, 0), 0);
  t->unregister_reader(3);
}

// One reader thread looks up keys while one writer thread tags, re-tags and deletes them. The
// class encodes its key (class / kGenerations == key index), so a read of freed or reused memory
// shows up as a class belonging to another key.
TEST(FlowTable, ConcurrentReaderNeverSeesAnotherKeysValue) {
  constexpr uint32_t kKeys = 48;
  constexpr uint32_t kGenerations = 64;
  constexpr uint32_t kWriterOps = 50'000;
  auto t = make_table(64);
  ASSERT_TRUE(t);
  std::vector<FiveTuple> keys;
  for (uint32_t i = 0; i < kKeys; ++i) keys.push_back(v4_key(i));

  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> hits{0}, misses{0}, bad{0};
  constexpr unsigned kReaderId = 1;
  ASSERT_EQ(t->register_reader(kReaderId), 0);
  std::thread reader([&] {
    uint32_t i = 0;
    uint64_t h = 0, m = 0, b = 0;
    while (!done.load(std::memory_order_acquire)) {
      for (int burst = 0; burst < 32; ++burst, ++i) {
        const uint32_t k = (i * 7) % kKeys;
        uint32_t tenant = 12345;
        const int c = t->lookup(keys[k], 1, &tenant);
        if (c == FlowTable::kNoMatch) {
          ++m;
          if (tenant != 0) ++b;
        } else if (static_cast<uint32_t>(c) / kGenerations != k ||
                   tenant != static_cast<uint32_t>(c) + 1) {
          // Another key's class, or a class and tenant of two different tags.
          ++b;
        } else {
          ++h;
        }
      }
      t->quiescent(kReaderId);
      started.store(true, std::memory_order_release);
    }
    hits = h;
    misses = m;
    bad = b;
  });

  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
  std::mt19937 rng(12345);
  std::vector<bool> present(kKeys, false);
  uint32_t failed_adds = 0;
  for (uint32_t op = 0; op < kWriterOps; ++op) {
    const uint32_t k = rng() % kKeys;
    if (present[k] && rng() % 3 == 0) {
      ASSERT_TRUE(t->del(keys[k]));
      present[k] = false;
    } else {
      const uint16_t cls = static_cast<uint16_t>(k * kGenerations + rng() % kGenerations);
      const int rc = t->add(keys[k], cls, 0, 0, cls + 1u);
      if (rc == 0) {
        present[k] = true;
      } else {
        // Deleted entries still pinned by the reader fill the table; let the reader run.
        ASSERT_EQ(rc, -ENOSPC);
        ++failed_adds;
        std::this_thread::yield();
      }
    }
    if (op % 1024 == 0) t->sweep(0);  // also reclaims replaced values
  }
  done.store(true, std::memory_order_release);
  reader.join();
  t->unregister_reader(kReaderId);

  EXPECT_EQ(bad.load(), 0u) << "lookups returned another key's class (read of freed memory)";
  EXPECT_GT(hits.load(), 0u);
  std::printf("reader: %lu hits, %lu misses; writer: %u ops, %u adds refused (table full)\n",
              static_cast<unsigned long>(hits.load()), static_cast<unsigned long>(misses.load()),
              kWriterOps, failed_adds);
  uint32_t expected = 0;
  for (uint32_t k = 0; k < kKeys; ++k) {
    expected += present[k];
    EXPECT_EQ(t->get(keys[k]).has_value(), present[k]) << k;
  }
  EXPECT_EQ(t->size(), expected);
}

TEST(FlowTable, RegisterReaderRejectsOutOfRangeIds) {
  auto t = make_table(64);
  ASSERT_TRUE(t);
  EXPECT_NE(t->register_reader(8), 0);  // max_readers is 8
  EXPECT_EQ(t->register_reader(7), 0);
  t->unregister_reader(7);
}

TEST(FlowTable, TwoTablesCoexist) {
  auto a = make_table(64, 300, "ft_a");
  auto b = make_table(64, 300, "ft_a");  // same name: made unique internally
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  ASSERT_EQ(a->add(v4_key(1), 1, 0, 0), 0);
  EXPECT_EQ(b->lookup(v4_key(1), 0), FlowTable::kNoMatch);
}

}  // namespace
}  // namespace dripgate::dataplane

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(
      new dripgate::testing::EalEnvironment("flow_table_test", 256));
  return RUN_ALL_TESTS();
}
