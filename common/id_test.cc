#include "common/id.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::common {
namespace {

TEST(ValidId, AcceptsTheIdAlphabetUpTo64) {
  EXPECT_TRUE(valid_id("ws-acme"));
  EXPECT_TRUE(valid_id("A.b_c-9"));
  EXPECT_TRUE(valid_id(std::string(64, 'x')));
  EXPECT_FALSE(valid_id(""));
  EXPECT_FALSE(valid_id(std::string(65, 'x')));
  EXPECT_FALSE(valid_id("a b"));
  EXPECT_FALSE(valid_id("a:b"));
  EXPECT_FALSE(valid_id("{t:x}"));
  EXPECT_FALSE(valid_id("a/b"));
  EXPECT_FALSE(valid_id("caf\xc3\xa9"));
  EXPECT_FALSE(valid_id(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace dripgate::common
