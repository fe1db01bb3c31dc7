// dripgate-iat `serve`: keeps the attached probe and answers GET /metrics (tools/iat/metrics.h)
// until SIGTERM or SIGINT. Built into dripgate-iat itself, not the profiler library: it reads the
// probe (libbpf).
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dripgate::ebpf {
class IatProbe;
}

namespace dripgate::iat {

struct ServeSpec {
  std::string listen;                   // host:port
  std::string iface;                    // the `iface` label
  std::string where;                    // how the start-up line names the probe's place
  uint64_t period_ns = 10'000'000'000;  // the burst windows' sliding period
  uint64_t tick_ns = 1'000'000'000;     // how often the windows' peaks are taken
  std::vector<uint64_t> windows_ns;     // the probe's burst windows, in its order
};

// Serves until one of `stop` (blocked by the caller) arrives; returns that signal. The caller
// detaches the probe afterwards.
int serve_metrics(ebpf::IatProbe& probe, const ServeSpec& spec, const sigset_t& stop);

}  // namespace dripgate::iat
