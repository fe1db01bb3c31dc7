// A gtest environment that brings up DPDK's EAL once per test program, as the machines that run
// the tests have it: no hugepages, no shared config, no PCI, one lcore. For tests that need real
// DPDK objects (rte_hash tables, mempools) but no ports.
#pragma once

#include <rte_eal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dripgate::testing {

class EalEnvironment : public ::testing::Environment {
 public:
  // memory_mb: the EAL's heap (-m).
  EalEnvironment(std::string program, int memory_mb)
      : program_(std::move(program)), memory_mb_(memory_mb) {}
  void SetUp() override {
    std::vector<std::string> args = {program_,
                                     "--no-huge",
                                     "--no-shconf",
                                     "-m",
                                     std::to_string(memory_mb_),
                                     "--no-pci",
                                     "-l",
                                     "0",
                                     "--log-level=lib.eal:error"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << "rte_eal_init failed";
  }
  void TearDown() override { rte_eal_cleanup(); }

 private:
  std::string program_;
  int memory_mb_;
};

}  // namespace dripgate::testing
