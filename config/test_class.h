// A traffic class built in one line for tests (the config's and the scheduler's): the fields a
// test names, the others at the config's defaults.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace dripgate::config {

inline Class test_class(const std::string& name, uint32_t weight, double pps, double bps,
                        uint32_t depth, uint32_t ttl_ms) {
  Class c;
  c.name = name;
  c.weight = weight;
  c.rate_pps = pps;
  c.rate_bps = bps;
  c.queue_depth = depth;
  c.ttl_ms = ttl_ms;
  return c;
}

}  // namespace dripgate::config
