#include "common/inline_function.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <memory>
#include <vector>

namespace dripgate::common {
namespace {

// A callback in place (the engine's size) and one on the heap behave as std::function would:
// calls, copies, moves and the lifetime of what they hold.
TEST(InlineFunction, KeepsWhatItHoldsAsStdFunctionDoes) {
  using Fn = InlineFunction<void(int)>;
  int sum = 0;
  auto held = std::make_shared<int>(1);
  std::array<char, 100> big{};
  big[0] = 10;
  Fn small = [&sum, held](int x) { sum += x + *held; };
  Fn large = [&sum, held, big](int x) { sum += x + big[0]; };
  EXPECT_EQ(held.use_count(), 3);
  small(1);
  large(1);
  EXPECT_EQ(sum, 2 + 11);
  {
    Fn a = small, b = large;  // copies hold their own
    EXPECT_EQ(held.use_count(), 5);
    Fn c = std::move(a), d = std::move(b);  // moves take over
    EXPECT_FALSE(a);
    EXPECT_FALSE(b);
    EXPECT_EQ(held.use_count(), 5);
    c(0);
    d(0);
    EXPECT_EQ(sum, 13 + 1 + 10);
    c = d;  // the small one's hold goes, the large one's copy holds
    EXPECT_EQ(held.use_count(), 5);
    c(0);
    EXPECT_EQ(sum, 24 + 10);
    c = nullptr;
    EXPECT_FALSE(c);
    EXPECT_EQ(held.use_count(), 4);
  }
  EXPECT_EQ(held.use_count(), 3);
  std::vector<Fn> many(10, small);
  EXPECT_EQ(held.use_count(), 13);
  many.clear();
  EXPECT_EQ(held.use_count(), 3);
  std::function<void(int)> empty;
  EXPECT_FALSE(Fn(empty));
  EXPECT_FALSE(Fn());
  std::function<void(int)> wrapped = small;
  EXPECT_TRUE(Fn(wrapped));
}

}  // namespace
}  // namespace dripgate::common
