// Stable partition of a received burst by class, for the scheduler owner and for the lcore that
// classifies. Header-only and free of DPDK so it is tested on its own.
#pragma once

#include <cstdint>
#include <cstring>

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// The classes of up to kMax packets, numbered as groups in order of first appearance: add() per
// packet, then tally() once, after which count() and starts() (where each group begins in the
// partitioned burst) are valid. Per-class order is all the scheduler promises, and one run per
// class costs one scheduler call and one counter update instead of one per packet when classes
// interleave (as flows of several classes do on the wire).
template <unsigned kMax>
class ClassGroups {
  static_assert(kMax < 255, "group ids are bytes, 0xFF marks none");

 public:
  ClassGroups() {
    std::memset(direct_, kNone, sizeof(direct_));
    std::memset(group_, kNone, sizeof(group_));
  }

  // The group of class c, a new one after the others for a class not seen before; remembers it
  // as packet n()'s. At most kMax calls.
  uint8_t add(uint32_t c) {
    // A direct table for the small class indexes configs have (one byte load per packet), a
    // search of the groups so far for the rest (the pass-through marker).
    unsigned g;
    if (c < kDirect && direct_[c] != kNone) {
      g = direct_[c];
    } else {
      g = 0;
      while (g < n_ && cls_[g] != c) ++g;
      if (g == n_) {
        cls_[n_++] = c;
        if (c < kDirect) direct_[c] = static_cast<uint8_t>(g);
      }
    }
    group_[n_pkts_++] = static_cast<uint8_t>(g);
    return static_cast<uint8_t>(g);
  }
  // Counts each group's packets. Not in add(): a count incremented per packet is a load that
  // waits for the previous packet's store (no two packets of a burst apart, one class), about
  // five cycles a packet; one class is counted at once, several by comparing every slot (a
  // fixed count, which the compiler vectorises; the slots past n() hold kNone, no group).
  void tally() {
    if (n_ == 1) {
      count_[0] = n_pkts_;
      return;
    }
    for (unsigned g = 0; g < n_; ++g) {
      unsigned c = 0;
      for (unsigned i = 0; i < kMax; ++i) c += group_[i] == g;
      count_[g] = c;
    }
  }
  unsigned size() const { return n_; }
  unsigned n() const { return n_pkts_; }
  uint32_t cls(unsigned g) const { return cls_[g]; }
  uint8_t group(unsigned i) const { return group_[i]; }  // packet i's group
  unsigned count(unsigned g) const { return count_[g]; }
  // at[g] = where group g starts: the counts of the groups before it.
  void starts(unsigned* at) const {
    for (unsigned g = 0, sum = 0; g < n_; ++g) {
      at[g] = sum;
      sum += count_[g];
    }
  }

 private:
  static constexpr uint32_t kDirect = 64;
  static constexpr uint8_t kNone = 0xFF;
  uint8_t direct_[kDirect];
  uint8_t group_[kMax];
  uint32_t cls_[kMax];
  unsigned count_[kMax];
  unsigned n_ = 0, n_pkts_ = 0;
};

// Each class's packets in their arrival order, classes in order of first appearance. Returns
// `in` itself when the burst has one class, else `tmp` (room for n) filled. n <= kMax.
template <unsigned kMax>
const EnqueueReq* group_by_class(const EnqueueReq* in, unsigned n, EnqueueReq* tmp) {
  unsigned same = 1;  // the common case, one class, costs one compare per packet
  while (same < n && in[same].cls == in[0].cls) ++same;
  if (same >= n) return in;
  ClassGroups<kMax> groups;
  for (unsigned i = 0; i < n; ++i) groups.add(in[i].cls);
  if (groups.size() <= 1) return in;
  groups.tally();
  unsigned at[kMax];
  groups.starts(at);
  for (unsigned i = 0; i < n; ++i) tmp[at[groups.group(i)]++] = in[i];
  return tmp;
}

}  // namespace dripgate::dataplane
