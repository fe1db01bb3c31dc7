// Hash slots against values Redis itself gives (CLUSTER KEYSLOT) and the CRC16 check value.
#include "control/redis/slot.h"

#include <gtest/gtest.h>

namespace dripgate::control {
namespace {

TEST(Crc16, XmodemCheckValue) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);
  EXPECT_EQ(crc16(""), 0);
}

TEST(HashSlot, KnownKeys) {
  // CLUSTER KEYSLOT on Redis 7.0.
  EXPECT_EQ(hash_slot("foo"), 12182);
  EXPECT_EQ(hash_slot("bar"), 5061);
  EXPECT_EQ(hash_slot(""), 0);
  EXPECT_EQ(hash_slot("123456789"), 0x31C3);
}

TEST(HashSlot, HashTagsShareASlot) {
  EXPECT_EQ(hash_slot("{user1000}.following"), hash_slot("{user1000}.followers"));
  EXPECT_EQ(hash_slot("{user1000}.following"), hash_slot("user1000"));
  EXPECT_EQ(hash_slot("dg:{t:acme}:bucket"), hash_slot("t:acme"));
}

TEST(HashSlot, TagRules) {
  // Only the first '{' counts, up to the first '}' after it.
  EXPECT_EQ(hash_tag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(hash_tag("foo{{bar}}zap"), "{bar");
  // An empty or unclosed tag: the whole key is hashed.
  EXPECT_EQ(hash_tag("foo{}{bar}"), "foo{}{bar}");
  EXPECT_EQ(hash_tag("foo{bar"), "foo{bar");
  EXPECT_EQ(hash_tag("{}"), "{}");
  EXPECT_EQ(hash_slot("foo{}{bar}"), crc16("foo{}{bar}") & 16383);
}

}  // namespace
}  // namespace dripgate::control
