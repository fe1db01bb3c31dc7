// Stable partition of a received burst by class, for the scheduler owner. Header-only and free of
// DPDK so it is tested on its own.
#pragma once

#include <cstdint>
#include <cstring>

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// Each class's packets in their arrival order, classes in order of first appearance. Per-class
// order is all the scheduler promises, and one run per class costs one scheduler call and one
// counter update instead of one per packet when classes interleave (as flows of several classes
// do on the wire). Returns `in` itself when the burst has one class, else `tmp` (room for n)
// filled. n <= kMax.
template <unsigned kMax>
const EnqueueReq* group_by_class(const EnqueueReq* in, unsigned n, EnqueueReq* tmp) {
  static_assert(kMax < 255, "group ids are bytes, 0xFF marks none");
  unsigned same = 1;  // the common case, one class, costs one compare per packet
  while (same < n && in[same].cls == in[0].cls) ++same;
  if (same >= n) return in;
  // Group of a class: a direct table for the small class indexes configs have (one byte load
  // per packet), a search of the groups so far for the rest (the pass-through marker).
  constexpr uint32_t kDirect = 64;
  constexpr uint8_t kNone = 0xFF;
  uint8_t direct[kDirect];
  std::memset(direct, kNone, sizeof(direct));
  uint32_t cls[kMax];
  unsigned count[kMax];
  uint8_t group[kMax];
  unsigned n_groups = 0;
  for (unsigned i = 0; i < n; ++i) {
    const uint32_t c = in[i].cls;
    unsigned g;
    if (c < kDirect && direct[c] != kNone) {
      g = direct[c];
    } else {
      g = 0;
      while (g < n_groups && cls[g] != c) ++g;
      if (g == n_groups) {
        cls[n_groups] = c;
        count[n_groups++] = 0;
        if (c < kDirect) direct[c] = static_cast<uint8_t>(g);
      }
    }
    group[i] = static_cast<uint8_t>(g);
    ++count[g];
  }
  if (n_groups <= 1) return in;
  unsigned at[kMax];
  for (unsigned j = 0, sum = 0; j < n_groups; ++j) {
    at[j] = sum;
    sum += count[j];
  }
  for (unsigned i = 0; i < n; ++i) tmp[at[group[i]]++] = in[i];
  return tmp;
}

}  // namespace dripgate::dataplane
