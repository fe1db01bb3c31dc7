// The main of the tests that talk to real peers (redis-server, the control daemon, sockets).
// It ignores SIGPIPE as dripgate-control's main does: a write to a peer that has just gone
// away (a killed Redis master, a closed HTTP client) must come back as EPIPE to the code under
// test, not end the test binary.
#include <gtest/gtest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
