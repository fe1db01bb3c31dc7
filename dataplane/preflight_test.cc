// Preflight on prepared /proc + /sys trees (a ready gateway box, a bare VM) and on this machine.
#include "dataplane/preflight.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace dripgate::dataplane {
namespace {

namespace fs = std::filesystem;
using State = PreflightItem::State;

class Tree {
 public:
  Tree() {
    char tmpl[] = "/tmp/dg-preflight-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~Tree() { fs::remove_all(root_); }
  const std::string& root() const { return root_; }
  void file(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    std::ofstream(root_ + "/" + path) << text;
  }
  void link(const std::string& path, const std::string& target) {
    fs::create_directories(fs::path(root_ + "/" + path).parent_path());
    fs::create_symlink(target, root_ + "/" + path);
  }

 private:
  std::string root_;
};

config::Dataplane appliance() {
  config::Dataplane dp;
  dp.eal = {"-l", "0,2,3", "-a", "0000:3b:00.0", "-a", "0000:3b:00.1", "--in-memory"};
  dp.rx_lcores = {2};
  dp.drip_lcore = 3;
  return dp;
}

std::map<std::string, PreflightItem> by_name(const std::vector<PreflightItem>& items) {
  std::map<std::string, PreflightItem> out;
  for (const auto& i : items) out[i.name] = i;
  return out;
}

TEST(Preflight, AReadyBoxPassesEveryBoxItem) {
  Tree t;
  t.file("sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "2\n");
  t.file("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n");
  t.file("proc/mounts", "sysfs /sys sysfs rw 0 0\nnodev /dev/hugepages hugetlbfs rw 0 0\n");
  t.file("sys/devices/system/cpu/isolated", "2-3\n");
  t.file("sys/devices/system/cpu/nohz_full", "2-3\n");
  t.file("proc/irq/default_smp_affinity", "00000000,00000003\n");
  for (const char* pci : {"0000:3b:00.0", "0000:3b:00.1"})
    t.link(std::string("sys/bus/pci/devices/") + pci + "/driver",
           "../../../../bus/pci/drivers/vfio-pci");
  t.file("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc sse\n");
  t.file("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "performance\n");

  auto items = by_name(preflight(appliance(), t.root()));
  for (const char* name :
       {"hugepages reserved", "hugepages mounted", "drip CPU 3 in isolcpus",
        "drip CPU 3 in nohz_full", "drip CPU 3 out of irqaffinity",
        "port 0000:3b:00.0 bound to vfio-pci", "port 0000:3b:00.1 bound to vfio-pci",
        "invariant TSC", "CPU 3 frequency governor"}) {
    ASSERT_TRUE(items.count(name)) << name;
    EXPECT_EQ(items[name].state, State::kOk) << name << ": " << items[name].detail;
  }
  EXPECT_EQ(items["hugepages reserved"].detail, "2 x 1048576kB (2 GiB)");
}

TEST(Preflight, ABareVmSaysWhatIsMissingAndHowToFixIt) {
  Tree t;
  t.file("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n");
  t.file("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
  t.file("sys/devices/system/cpu/isolated", "\n");
  t.file("proc/irq/default_smp_affinity", "f\n");
  t.link("sys/bus/pci/devices/0000:3b:00.0/driver", "../../../../bus/pci/drivers/ixgbe");
  t.file("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu tsc sse\n");
  t.file("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave\n");

  auto list = preflight(appliance(), t.root());
  auto items = by_name(list);
  for (const char* name :
       {"hugepages reserved", "hugepages mounted", "drip CPU 3 in isolcpus",
        "drip CPU 3 in nohz_full", "drip CPU 3 out of irqaffinity",
        "port 0000:3b:00.0 bound to vfio-pci", "port 0000:3b:00.1 bound to vfio-pci",
        "invariant TSC", "CPU 3 frequency governor"}) {
    ASSERT_TRUE(items.count(name)) << name;
    EXPECT_EQ(items[name].state, State::kFail) << name;
    EXPECT_FALSE(items[name].fix.empty()) << name;
  }
  EXPECT_EQ(items["port 0000:3b:00.0 bound to vfio-pci"].detail, "driver ixgbe");
  EXPECT_EQ(items["port 0000:3b:00.1 bound to vfio-pci"].detail, "no such PCI device");
  EXPECT_EQ(items["drip CPU 3 in nohz_full"].detail, "the kernel has no nohz_full");
  EXPECT_NE(items["drip CPU 3 in isolcpus"].fix.find("isolcpus=3"), std::string::npos);

  std::string text;
  EXPECT_EQ(print_preflight(list, text), 1);
  EXPECT_NE(text.find("[FAIL] hugepages reserved: none\n       fix: "), std::string::npos)
      << text;
}

TEST(Preflight, VdevsAndNoHugeAreNotBoxItems) {
  Tree t;
  t.file("sys/class/net/veth-c/ifindex", "7\n");
  config::Dataplane dp;
  dp.eal = {"-l", "0-1", "--no-huge", "--vdev=net_af_packet0,iface=veth-c,qpairs=1",
            "--vdev", "net_af_packet1,iface=veth-gone", "--vdev=net_null0"};
  auto items = by_name(preflight(dp, t.root()));
  EXPECT_EQ(items["hugepages reserved"].state, State::kNotApplicable);
  EXPECT_EQ(items["vdev interface veth-c"].state, State::kOk);
  EXPECT_EQ(items["vdev interface veth-gone"].state, State::kFail);
  EXPECT_EQ(items["vdev net_null0"].state, State::kOk);
}

// On this machine: every item is consistent with what the kernel says, and the exit code with
// the items.
TEST(Preflight, ThisMachineAsItIs) {
  config::Dataplane dp;
  dp.eal = {"-l", "0-1", "--vdev=net_null0", "--vdev=net_null1"};
  dp.drip_lcore = 1;
  auto list = preflight(dp);
  auto items = by_name(list);
  std::ifstream iso("/sys/devices/system/cpu/isolated");
  std::string isolated;
  std::getline(iso, isolated);
  bool cpu1_isolated = false;  // a cpulist: "1", "0-3", "1,5", …
  std::stringstream parts(isolated);
  for (std::string part; std::getline(parts, part, ',');) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    int lo = std::stoi(part.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    cpu1_isolated |= lo <= 1 && 1 <= hi;
  }
  EXPECT_EQ(items["drip CPU 1 in isolcpus"].state == State::kOk, cpu1_isolated) << isolated;
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  EXPECT_EQ(items["memlock limit"].state == State::kOk, lim.rlim_cur == RLIM_INFINITY);
  bool any_fail = false;
  for (const auto& i : list) any_fail |= i.state == State::kFail;
  std::string text;
  EXPECT_EQ(print_preflight(list, text), any_fail ? 1 : 0) << text;
}

}  // namespace
}  // namespace dripgate::dataplane
