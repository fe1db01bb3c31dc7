// The inter-arrival probe (iat.bpf.c) as one RAII object: opens the skeleton, writes the settings
// into rodata, loads, attaches through bpf_adapter.h, reads the maps into Counters, and detaches
// and destroys on destruction. Errors are std::runtime_error with the errno text.
#pragma once

#include <array>
#include <cstdint>

#include "ebpf/bpf_adapter.h"
#include "ebpf/iat.h"
#include "ebpf/iat_counters.h"
#include "ebpf/iat_filter.h"

struct iat;  // the bpftool skeleton (iat.skel.h), private to iat_probe.cc

namespace dripgate::ebpf {

struct Options {
  Filter filter;
  // Burst window widths; 0 disables a window.
  std::array<uint64_t, IAT_WINDOWS> windows_ns{100'000, 1'000'000};
  // tc only: arrival time from skb->tstamp when nonzero (bpf_ktime_get_ns otherwise). For
  // BPF_PROG_TEST_RUN fixtures, which pass __sk_buff.tstamp through; leave off on live traffic.
  bool use_skb_tstamp = false;
  // tc filter identity on the clsact hook; the probe removes only the filter at this handle and
  // priority, and only while it still runs our program.
  uint32_t tc_handle = 0xd1a7;
  uint32_t tc_priority = 1;
};

class IatProbe {
 public:
  // Opens the skeleton, writes the settings into rodata and loads (verifies) the programs.
  explicit IatProbe(const Options& options);
  ~IatProbe();  // detach(), then destroy the skeleton
  IatProbe(const IatProbe&) = delete;
  IatProbe& operator=(const IatProbe&) = delete;

  // The tc program on the clsact hook of `at` (see Attachments::attach_tc).
  void attach_tc(const Interface& at, Direction dir);
  // The XDP program on `at` (see Attachments::attach_xdp).
  void attach_xdp(const Interface& at, uint32_t flags = 0);
  // Removes what this probe added, in reverse order. Never throws. Idempotent.
  void detach() noexcept;

  Counters snapshot() const;
  // Each window's most packets since the previous call (or the load), and starts the next such
  // period: the probe's max_count is exchanged for 0, so no window's count is lost between two
  // calls. A window open across a call counts in both periods. `live` never calls it.
  std::array<uint64_t, IAT_WINDOWS> take_window_peaks();

  int tc_prog_fd() const;
  int xdp_prog_fd() const;
  uint32_t tc_prog_id() const;
  uint32_t xdp_prog_id() const;
  const Options& options() const { return options_; }

 private:
  Options options_;
  ::iat* skel_ = nullptr;  // global: dripgate::iat is the profiler's namespace
  Attachments attachments_;
};

}  // namespace dripgate::ebpf
