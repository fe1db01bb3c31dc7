// The circuit breaker's states on an injected clock.
#include "control/gateway/breaker.h"

#include <gtest/gtest.h>

namespace dripgate::control {
namespace {

using State = Breaker::State;

TEST(Breaker, OpensAfterFailuresInARowOnly) {
  Breaker b({.failures = 3, .open_ms = 1000, .probes = 2});
  EXPECT_TRUE(b.allow(0));
  b.failed(0, false);
  b.failed(1, false);
  b.succeeded();  // an answer in between: the count starts again
  b.failed(2, false);
  b.failed(3, false);
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_TRUE(b.allow(4));
  b.failed(4, false);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_FALSE(b.allow(5));
  EXPECT_FALSE(b.allow(1003));
}

TEST(Breaker, ALostConnectionOpensAtOnce) {
  Breaker b({.failures = 3, .open_ms = 1000, .probes = 2});
  b.failed(0, true);
  EXPECT_EQ(b.state(), State::kOpen);
}

TEST(Breaker, ProbesOneAtATimeAndClosesAfterProbesInARow) {
  Breaker b({.failures = 1, .open_ms = 1000, .probes = 2});
  b.failed(0, false);
  ASSERT_EQ(b.state(), State::kOpen);
  EXPECT_FALSE(b.allow(999));
  EXPECT_TRUE(b.allow(1000));  // the probe
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_FALSE(b.allow(1001));  // one at a time
  b.succeeded();
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_TRUE(b.allow(1002));
  b.succeeded();
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_TRUE(b.allow(1003));
  EXPECT_TRUE(b.allow(1003));
}

TEST(Breaker, AFailedProbeOpensItAgainForAnotherWhile) {
  Breaker b({.failures = 1, .open_ms = 1000, .probes = 2});
  b.failed(0, false);
  ASSERT_TRUE(b.allow(1000));
  b.failed(1010, false);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_FALSE(b.allow(2009));
  EXPECT_TRUE(b.allow(2010));
  EXPECT_EQ(b.state(), State::kHalfOpen);
}

TEST(Breaker, ALateAnswerWhileOpenChangesNothing) {
  Breaker b({.failures = 1, .open_ms = 1000, .probes = 1});
  b.failed(0, false);
  b.succeeded();  // a call sent before it opened
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_FALSE(b.allow(10));
}

}  // namespace
}  // namespace dripgate::control
