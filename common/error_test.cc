#include "common/error.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::common {
namespace {

TEST(ErrorStr, RendersFileLineColPathMessage) {
  EXPECT_EQ((Error{"f.yaml", 3, 7, "plans.pro.class", "bad"}).str(),
            "f.yaml:3:7: plans.pro.class: bad");
  EXPECT_EQ((Error{"f.yaml", 2, 1, "", "YAML syntax error: x"}).str(),
            "f.yaml:2:1: YAML syntax error: x");
  EXPECT_EQ((Error{"f.yaml", 0, 0, "", "cannot open: No such file or directory"}).str(),
            "f.yaml: cannot open: No such file or directory");
}

TEST(Quote, CutsLongValues) {
  EXPECT_EQ(quote("gold"), "'gold'");
  EXPECT_EQ(quote(std::string(61, 'x')), "'" + std::string(60, 'x') + "...'");
}

}  // namespace
}  // namespace dripgate::common
