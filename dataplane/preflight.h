// `dripgate-dataplane --preflight`: what a gateway box needs before the dataplane can pace
// precisely, checked item by item from /proc and /sys, each with its state and the fix.
//
// The facts are read below a root directory ("/" on a box), so the checks run on a prepared
// tree in tests exactly as on the machine. Reading only: preflight changes nothing.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace dripgate::dataplane {

struct PreflightItem {
  enum class State { kOk, kFail, kNotApplicable };
  std::string name;  // e.g. "hugepages reserved"
  State state = State::kOk;
  std::string detail;  // what was found
  std::string fix;     // what to do about it (empty when ok)
};

// Every check, in a fixed order: hugepages reserved and mounted, the drip lcore in isolcpus
// and nohz_full and out of the default IRQ affinity, the ports (PCI devices bound to vfio-pci,
// vdevs present), invariant TSC, the CPU frequency governor of the drip CPU, the memlock limit.
// EAL lcore ids are taken as CPU ids (the `-l` form; a `--lcores` map is reported, not
// followed).
std::vector<PreflightItem> preflight(const config::Dataplane& dp, const std::string& root = "/");

// One line per item: `[ ok ] name: detail` or `[FAIL] name: detail` + `  fix: …`. Returns 0
// when nothing failed, 1 otherwise (the exit code of --preflight).
int print_preflight(const std::vector<PreflightItem>& items, std::string& out);

}  // namespace dripgate::dataplane
