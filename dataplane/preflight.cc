#include "dataplane/preflight.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace dripgate::dataplane {
namespace {

namespace fs = std::filesystem;
using State = PreflightItem::State;

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  std::string v = s.str();
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

std::optional<long> to_long(std::string_view s, int base = 10) {
  long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A kernel cpulist ("0-3,8,10-11") as a set; an empty string is the empty set.
std::set<unsigned> cpulist(std::string_view s) {
  std::set<unsigned> out;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view part = s.substr(0, comma);
    auto dash = part.find('-');
    auto lo = to_long(part.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : to_long(part.substr(dash + 1));
    if (lo && hi)
      for (long c = *lo; c <= *hi && c < 4096; ++c) out.insert(static_cast<unsigned>(c));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// The value of an EAL option given as `-o V`, `-o=V`, `--opt V` or `--opt=V`, every occurrence.
std::vector<std::string> eal_values(const std::vector<std::string>& eal,
                                    std::initializer_list<std::string_view> names) {
  std::vector<std::string> out;
  for (size_t i = 0; i < eal.size(); ++i) {
    for (auto name : names) {
      const std::string& a = eal[i];
      if (a == name && i + 1 < eal.size()) out.push_back(eal[i + 1]);
      if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=')
        out.push_back(a.substr(name.size() + 1));
    }
  }
  return out;
}

bool eal_has(const std::vector<std::string>& eal, std::string_view flag) {
  return std::find(eal.begin(), eal.end(), flag) != eal.end();
}

PreflightItem item(std::string name, bool ok, std::string detail, std::string fix) {
  return {std::move(name), ok ? State::kOk : State::kFail, std::move(detail),
          ok ? std::string() : std::move(fix)};
}

PreflightItem not_applicable(std::string name, std::string detail) {
  return {std::move(name), State::kNotApplicable, std::move(detail), {}};
}

void check_hugepages(const config::Dataplane& dp, const fs::path& root,
                     std::vector<PreflightItem>& out) {
  if (eal_has(dp.eal, "--no-huge")) {
    out.push_back(not_applicable("hugepages reserved", "the EAL runs with --no-huge"));
    out.push_back(not_applicable("hugepages mounted", "the EAL runs with --no-huge"));
    return;
  }
  std::string found;
  long total_kb = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "sys/kernel/mm/hugepages", ec)) {
    auto n = read_file(e.path() / "nr_hugepages");
    std::string size = e.path().filename().string().substr(sizeof("hugepages-") - 1);
    if (!n || *n == "0") continue;
    found += (found.empty() ? "" : ", ") + *n + " x " + size;
    total_kb += to_long(*n).value_or(0) * to_long(size.substr(0, size.size() - 2)).value_or(0);
  }
  out.push_back(
      item("hugepages reserved", total_kb > 0,
           found.empty() ? "none" : found + " (" + std::to_string(total_kb >> 20) + " GiB)",
           "reserve them at boot: default_hugepagesz=1G hugepagesz=1G hugepages=2 on "
           "the kernel command line (or dpdk-hugepages.py --setup 2G)"));
  bool mounted = false;
  if (auto mounts = read_file(root / "proc/mounts"))
    mounted = mounts->find(" hugetlbfs ") != std::string::npos;
  out.push_back(item("hugepages mounted", mounted, mounted ? "hugetlbfs" : "no hugetlbfs mount",
                     "mount -t hugetlbfs nodev /dev/hugepages (systemd's dev-hugepages.mount)"));
}

void check_drip_cpu(const config::Dataplane& dp, const fs::path& root,
                    std::vector<PreflightItem>& out) {
  const unsigned cpu = dp.drip_lcore;
  const std::string c = std::to_string(cpu);
  if (!eal_values(dp.eal, {"--lcores"}).empty()) {
    out.push_back(not_applicable(
        "drip CPU isolated", "--lcores maps lcores to CPUs: check lcore " + c + "'s CPU by hand"));
    return;
  }
  auto isolated = cpulist(read_file(root / "sys/devices/system/cpu/isolated").value_or(""));
  out.push_back(item("drip CPU " + c + " in isolcpus", isolated.count(cpu) > 0,
                     isolated.empty()
                         ? "no CPU is isolated"
                         : "isolated: " + *read_file(root / "sys/devices/system/cpu/isolated"),
                     "add isolcpus=" + c + " to the kernel command line: no other task on it"));
  auto nohz = read_file(root / "sys/devices/system/cpu/nohz_full");
  auto nohz_set = cpulist(nohz.value_or(""));
  out.push_back(item("drip CPU " + c + " in nohz_full", nohz_set.count(cpu) > 0,
                     !nohz           ? "the kernel has no nohz_full"
                     : nohz->empty() ? "nohz_full is empty"
                                     : "nohz_full: " + *nohz,
                     "add nohz_full=" + c + " rcu_nocbs=" + c +
                         " (a kernel with CONFIG_NO_HZ_FULL): the timer tick stops interrupting "
                         "the drip"));
  auto mask = read_file(root / "proc/irq/default_smp_affinity");
  bool out_of_irqs = false;
  if (mask) {
    // A hex bitmap in 32-bit groups separated by commas, most significant first.
    std::string hex;
    for (char ch : *mask)
      if (ch != ',') hex += ch;
    size_t digit = cpu / 4;
    out_of_irqs =
        digit >= hex.size() ||
        !((to_long(std::string(1, hex[hex.size() - 1 - digit]), 16).value_or(15) >> (cpu % 4)) & 1);
  }
  // The housekeeping CPUs: every online one but the drip's.
  auto online = cpulist(read_file(root / "sys/devices/system/cpu/online").value_or(""));
  online.erase(cpu);
  std::string others;
  for (unsigned o : online) others += (others.empty() ? "" : ",") + std::to_string(o);
  if (others.empty()) others = "<housekeeping CPUs>";
  out.push_back(
      item("drip CPU " + c + " out of irqaffinity", out_of_irqs,
           mask ? "default IRQ affinity mask " + *mask : "no /proc/irq/default_smp_affinity",
           "add irqaffinity=" + others +
               " to the kernel command line: device interrupts stay off the drip CPU"));
}

void check_ports(const config::Dataplane& dp, const fs::path& root,
                 std::vector<PreflightItem>& out) {
  auto pci = eal_values(dp.eal, {"-a", "--allow", "-w"});
  for (const auto& addr : pci) {
    std::error_code ec;
    auto driver = fs::read_symlink(root / "sys/bus/pci/devices" / addr / "driver", ec);
    std::string name = ec ? "" : driver.filename().string();
    bool exists = fs::exists(root / "sys/bus/pci/devices" / addr);
    out.push_back(item("port " + addr + " bound to vfio-pci", name == "vfio-pci",
                       !exists        ? "no such PCI device"
                       : name.empty() ? "no driver"
                                      : "driver " + name,
                       "modprobe vfio-pci; dpdk-devbind.py -b vfio-pci " + addr));
  }
  for (const auto& vdev : eal_values(dp.eal, {"--vdev"})) {
    auto at = vdev.find("iface=");
    if (at == std::string::npos) {
      out.push_back(item("vdev " + vdev.substr(0, vdev.find(',')), true, "virtual device", ""));
      continue;
    }
    std::string iface = vdev.substr(at + 6, vdev.find(',', at) - at - 6);
    bool present = fs::exists(root / "sys/class/net" / iface);
    out.push_back(item("vdev interface " + iface, present,
                       present ? "present" : "no such interface",
                       "create " + iface + " (ip link) before the dataplane starts"));
  }
  if (pci.empty() && eal_values(dp.eal, {"--vdev"}).empty())
    out.push_back(item("ports", false, "the EAL arguments name no -a PCI device and no --vdev",
                       "add -a <PCI address> for the client and the cluster port"));
}

void check_cpu(const config::Dataplane& dp, const fs::path& root, std::vector<PreflightItem>& out) {
  std::string flags;
  if (auto info = read_file(root / "proc/cpuinfo")) {
    auto at = info->find("\nflags");
    if (at != std::string::npos) flags = info->substr(at, info->find('\n', at + 1) - at) + " ";
  }
  bool invariant = flags.find(" constant_tsc ") != std::string::npos &&
                   flags.find(" nonstop_tsc ") != std::string::npos;
  out.push_back(item("invariant TSC", invariant,
                     invariant ? "constant_tsc nonstop_tsc" : "constant_tsc/nonstop_tsc missing",
                     "a CPU (or hypervisor) with an invariant TSC: the drip's clock must not "
                     "change speed"));
  const std::string c = std::to_string(dp.drip_lcore);
  auto gov = read_file(root / ("sys/devices/system/cpu/cpu" + c) / "cpufreq/scaling_governor");
  if (!gov)
    out.push_back(not_applicable("CPU " + c + " frequency governor",
                                 "no cpufreq (a fixed frequency, or a VM)"));
  else
    out.push_back(item("CPU " + c + " frequency governor", *gov == "performance", *gov,
                       "cpupower -c " + c + " frequency-set -g performance"));
}

void check_memlock(std::vector<PreflightItem>& out) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  bool unlimited = lim.rlim_cur == RLIM_INFINITY;
  out.push_back(item("memlock limit", unlimited,
                     unlimited ? "unlimited" : std::to_string(lim.rlim_cur >> 10) + " KiB",
                     "LimitMEMLOCK=infinity in the unit (or ulimit -l unlimited): DPDK pins its "
                     "memory"));
}

}  // namespace

std::vector<PreflightItem> preflight(const config::Dataplane& dp, const std::string& root) {
  std::vector<PreflightItem> out;
  check_hugepages(dp, root, out);
  check_drip_cpu(dp, root, out);
  check_ports(dp, root, out);
  check_cpu(dp, root, out);
  check_memlock(out);
  return out;
}

int print_preflight(const std::vector<PreflightItem>& items, std::string& out) {
  int rc = 0;
  for (const auto& i : items) {
    const char* tag = i.state == State::kOk     ? "[ ok ] "
                      : i.state == State::kFail ? "[FAIL] "
                                                : "[ -- ] ";
    out += tag + i.name + ": " + i.detail + "\n";
    if (i.state == State::kFail) {
      out += "       fix: " + i.fix + "\n";
      rc = 1;
    }
  }
  return rc;
}

}  // namespace dripgate::dataplane
