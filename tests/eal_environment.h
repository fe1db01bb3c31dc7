// DPDK's EAL brought up once per program as the machines that run the tests have it: no
// hugepages, no shared config, no PCI, one lcore. For tests and benchmarks that need real DPDK
// objects (rte_hash tables, mempools) but no ports. Through the dataplane's own Eal, which
// removes the runtime directory DPDK leaves behind; each process has its own (the program's
// name and pid as the file prefix), as tests run side by side.
#pragma once

#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataplane/init.h"

namespace dripgate::testing {

// The EAL's arguments; memory_mb: its heap (-m).
inline std::vector<std::string> eal_args_without_devices(const std::string& program,
                                                         int memory_mb) {
  return {program,
          "--no-huge",
          "--no-shconf",
          "-m",
          std::to_string(memory_mb),
          "--no-pci",
          "-l",
          "0",
          "--file-prefix=" + program + std::to_string(::getpid()),
          "--log-level=lib.eal:error"};
}

// The EAL for a whole gtest program (::testing::AddGlobalTestEnvironment).
class EalEnvironment : public ::testing::Environment {
 public:
  EalEnvironment(std::string program, int memory_mb)
      : program_(std::move(program)), memory_mb_(memory_mb) {}
  void SetUp() override {
    ASSERT_NO_THROW(eal_.emplace(eal_args_without_devices(program_, memory_mb_)));
  }
  void TearDown() override { eal_.reset(); }

 private:
  std::string program_;
  int memory_mb_;
  std::optional<dataplane::Eal> eal_;
};

}  // namespace dripgate::testing
