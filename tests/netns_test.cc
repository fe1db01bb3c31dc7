// TestNetns against the real kernel: what it creates exists and is configured, and nothing of
// it survives the destructor, a failed setup, or a dead run. Needs root (network namespaces).
#include "tests/netns.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace dripgate::testing {
namespace {

bool netns_exists(const std::string& name) {
  return run_shell("ip netns list | grep -qx '" + name + "\\( .*\\)\\?'").status == 0;
}

bool link_exists(const std::string& netns, const std::string& ifname) {
  const std::string ip = netns.empty() ? "ip" : "ip -n " + netns;
  return run_shell(ip + " link show " + ifname + " >/dev/null 2>&1").status == 0;
}

TEST(RunShell, StatusAndOutput) {
  CommandResult r = run_shell("echo hi; exit 3");
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(run_checked("echo ok"), "ok\n");
  try {
    run_checked("echo why >&2; false");
    ADD_FAILURE() << "run_checked accepted a failing command";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "echo why >&2; false: why\n");
  }
}

TEST(TestNetns, CreatesConfiguresAndRemovesEverything) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  std::string a, b, root_end, ns_end;
  {
    TestNetns net("dgnt");
    a = net.add_netns("a");
    b = net.add_netns("b");
    EXPECT_EQ(a, "dgnt" + std::to_string(::getpid()) + "a");
    ASSERT_TRUE(netns_exists(a));
    ASSERT_TRUE(netns_exists(b));
    net.add_veth({a, net.name("va"), "10.79.0.1/24", "02:00:00:79:00:01"},
                 {b, net.name("vb"), "10.79.0.2/24", ""});
    const std::string shown = run_checked("ip -n " + a + " addr show dev " + net.name("va"));
    EXPECT_NE(shown.find("inet 10.79.0.1/24"), std::string::npos) << shown;
    EXPECT_NE(shown.find("02:00:00:79:00:01"), std::string::npos) << shown;
    EXPECT_NE(shown.find("state UP"), std::string::npos) << shown;
    EXPECT_EQ(run_shell("ip netns exec " + a + " ping -c 1 -W 2 10.79.0.2 >/dev/null").status, 0);

    // One end left in the root namespace (as the dataplane test uses them).
    root_end = net.name("r");
    ns_end = net.name("n");
    net.add_veth({"", root_end, "", ""}, {b, ns_end, "", ""});
    EXPECT_TRUE(link_exists("", root_end));
    EXPECT_TRUE(link_exists(b, ns_end));
  }
  EXPECT_FALSE(netns_exists(a));
  EXPECT_FALSE(netns_exists(b));
  EXPECT_FALSE(link_exists("", root_end));
}

TEST(TestNetns, FailedSetupLeavesNothing) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  const std::string root_end = "dgnt" + std::to_string(::getpid()) + "x";
  {
    TestNetns net("dgnt");
    const std::string a = net.add_netns("a");
    // The link is made, then moving it into a namespace that does not exist fails.
    EXPECT_THROW(net.add_veth({"", root_end, "", ""}, {"dgntnosuchns", net.name("y"), "", ""}),
                 std::runtime_error);
    EXPECT_TRUE(link_exists("", root_end));
    EXPECT_THROW(net.add_veth({a, net.name("waytoolongname"), "", ""}, {a, net.name("z"), "", ""}),
                 std::invalid_argument);
    EXPECT_THROW(net.name("1"), std::invalid_argument);
  }
  EXPECT_FALSE(link_exists("", root_end));
  EXPECT_THROW(TestNetns("dg1"), std::invalid_argument);
}

TEST(TestNetns, RemovesLeftoversOfDeadRunsOnly) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  // A pid above pid_max belongs to no process; our own pid is alive.
  const std::string dead = "dgnt99999999";
  const std::string alive = "dgnt" + std::to_string(::getpid()) + "keep";
  run_checked("ip netns add " + dead + "a");
  run_checked("ip link add " + dead + "r type veth peer name " + dead + "n");
  run_checked("ip netns add " + alive);
  { TestNetns net("dgnt"); }
  EXPECT_FALSE(netns_exists(dead + "a"));
  EXPECT_FALSE(link_exists("", dead + "r"));
  EXPECT_FALSE(link_exists("", dead + "n"));
  EXPECT_TRUE(netns_exists(alive));
  run_shell("ip netns del " + alive);
}

}  // namespace
}  // namespace dripgate::testing
