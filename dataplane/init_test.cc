// The EAL as this build links it: driver plugins refused in a static build, and the drivers it
// links registered (their constructors survive the link) so that vdevs and mbuf pools work.
#include "dataplane/init.h"

#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace dripgate::dataplane {
namespace {

TEST(PluginError, StaticBuildRefusesDriverPlugins) {
  const std::string plugin = "/usr/lib/dpdk/librte_net_foo.so";
  struct Case {
    std::vector<std::string> args;
    std::string flagged;  // the argument the error quotes
  };
  for (const Case& c : {Case{{"dp", "--no-huge", "-d", plugin}, "-d"},
                        Case{{"dp", "-d" + plugin}, "-d" + plugin}}) {
    const std::string error = plugin_error(c.args, "net_null,net_ring");
    EXPECT_NE(error.find("EAL argument '" + c.flagged + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("net_null,net_ring"), std::string::npos) << error;  // what it has
    EXPECT_NE(error.find("dpdk_drivers"), std::string::npos) << error;       // and the remedy
    EXPECT_EQ(plugin_error(c.args, ""), "");  // a shared build leaves -d to the EAL
  }
  EXPECT_EQ(plugin_error({"dp", "--no-huge", "--vdev=net_null0", "--file-prefix=d"}, "net_null"),
            "");
}

TEST(Eal, LinkedDriversRegister) {
  const std::string prefix = "dg-init-test-" + std::to_string(::getpid());
  Eal eal({"init_test", "--no-huge", "--no-shconf", "-m", "64", "--no-pci", "--no-telemetry",
           "--file-prefix=" + prefix, "--vdev=net_null0", "--vdev=net_ring0", "--log-level=5"});
  EXPECT_EQ(rte_eth_dev_count_avail(), 2U);
  MbufPool pool("init_test", 1023, 0);  // the ring mempool driver's ops
  EXPECT_EQ(pool.available(), 1023U);
}

}  // namespace
}  // namespace dripgate::dataplane
