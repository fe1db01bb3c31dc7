// DPDK's EAL brought up once per program as the machines that run the tests have it: no
// hugepages, no shared config, no PCI, one lcore. For tests and benchmarks that need real DPDK
// objects (rte_hash tables, mempools) but no ports.
#pragma once

#include <rte_eal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dripgate::testing {

// rte_eal_init's result (< 0: failed). memory_mb: the EAL's heap (-m).
inline int init_eal_without_devices(std::string program, int memory_mb) {
  std::vector<std::string> args = {std::move(program),         "--no-huge", "--no-shconf", "-m",
                                   std::to_string(memory_mb),  "--no-pci",  "-l",          "0",
                                   "--log-level=lib.eal:error"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return rte_eal_init(static_cast<int>(argv.size()), argv.data());
}

// The same as a gtest environment (::testing::AddGlobalTestEnvironment).
class EalEnvironment : public ::testing::Environment {
 public:
  EalEnvironment(std::string program, int memory_mb)
      : program_(std::move(program)), memory_mb_(memory_mb) {}
  void SetUp() override {
    ASSERT_GE(init_eal_without_devices(program_, memory_mb_), 0) << "rte_eal_init failed";
  }
  void TearDown() override { rte_eal_cleanup(); }

 private:
  std::string program_;
  int memory_mb_;
};

}  // namespace dripgate::testing
