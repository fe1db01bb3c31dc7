// What the probe's maps hold, summed over the CPUs and copied out: the one record that the probe
// (IatProbe::snapshot) fills and the profiler (iat::profile_from_counters) reads. Header-only and
// free of libbpf, so the analysis builds without it. A new probe metric is a map field in
// iat.bpf.c (its layout in iat.h), a member here, and its read in IatProbe::snapshot().
#pragma once

#include <array>
#include <cstdint>

#include "ebpf/iat.h"

namespace dripgate::ebpf {

struct Counters {
  std::array<uint64_t, IAT_BUCKETS> hist{};  // gaps between matching packets, iat_bucket()
  iat_totals totals{};
  std::array<iat_window, IAT_WINDOWS> windows{};  // the open window is cur_start_ns/cur_count
  std::array<std::array<uint64_t, IAT_COUNT_BUCKETS>, IAT_WINDOWS> count_hist{};  // closed windows
  // Packets left out of a window because other CPUs kept winning the compare-and-swap (expected 0).
  std::array<uint64_t, IAT_WINDOWS> window_lost{};
};

}  // namespace dripgate::ebpf
