// Stable partition of a received burst by class, for the scheduler owner and for the lcore that
// classifies. Header-only and free of DPDK so it is tested on its own.
#pragma once

#include <cstdint>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// The classes of up to kMax packets, numbered as groups in order of first appearance: add() per
// packet, then tally() once, after which count() and members() are valid. Per-class order is all
// the scheduler promises, and one run per class costs one scheduler call and one counter update
// instead of one per packet when classes interleave (as flows of several classes do on the wire).
//
// Nothing is updated per packet but the packet's group byte: a count or a write position kept
// per group and incremented per packet is a load that waits for the previous packet's store to
// the same place (about five cycles a packet, the whole loop serialised). tally() turns the
// group bytes into one bit mask per group instead (compares of all slots at once), and a
// partition walks each group's mask with a running position held in a register.
template <unsigned kMax>
class ClassGroups {
  static_assert(kMax <= 32 && kMax % 16 == 0, "a group's members are one 32-bit mask");

 public:
  ClassGroups() { reset(); }

  // Empty again, for the next burst.
  void reset() {
    std::memset(direct_, kNone, sizeof(direct_));
    std::memset(group_, kNone, sizeof(group_));
    n_ = n_pkts_ = 0;
  }
  // n packets, all of class c (n <= kMax): what reset(), n add(c) and tally() leave, without a
  // call per packet, for a burst whose class is decided once for all of it.
  void one_group(uint32_t c, unsigned n) {
    reset();
    std::memset(group_, 0, n);
    cls_[0] = c;
    if (c < kDirect) direct_[c] = 0;
    n_ = 1;
    n_pkts_ = n;
    tally();
  }

  // The group of class c, a new one after the others for a class not seen before; remembers it
  // as packet n()'s. At most kMax calls.
  uint8_t add(uint32_t c) {
    unsigned groups = n_;
    const uint8_t g = group_of(c, groups);
    n_ = groups;
    group_[n_pkts_++] = g;
    return g;
  }
  // add(class_of(i)) for i in [0, n), with the group and packet counts in registers: add() per
  // packet keeps them in the object, and each packet's group byte store (a char store, which
  // may alias anything) makes the next packet reload and store them again.
  template <typename ClassOf>
  void add_all(unsigned n, ClassOf&& class_of) {
    unsigned groups = n_;
    uint8_t* const out = group_ + n_pkts_;
    for (unsigned i = 0; i < n; ++i) out[i] = group_of(class_of(i), groups);
    n_ = groups;
    n_pkts_ += n;
  }
  // Each group's members and count. One group is every packet; several are found by comparing
  // every slot at once (the slots past n() hold kNone, no group).
  void tally() {
    if (n_ == 1) {
      mask_[0] = n_pkts_ == 32 ? ~uint32_t{0} : (uint32_t{1} << n_pkts_) - 1;
      return;
    }
    for (unsigned g = 0; g < n_; ++g) mask_[g] = equal_mask(static_cast<uint8_t>(g));
  }
  unsigned size() const { return n_; }
  unsigned n() const { return n_pkts_; }
  uint32_t cls(unsigned g) const { return cls_[g]; }
  uint8_t group(unsigned i) const { return group_[i]; }    // packet i's group
  uint32_t members(unsigned g) const { return mask_[g]; }  // bit i: packet i is in group g
  unsigned count(unsigned g) const { return static_cast<unsigned>(__builtin_popcount(mask_[g])); }
  // Calls put(g, i) for every packet i, group by group in order, each group's packets in order:
  // the stable partition.
  template <typename Put>
  void partition(Put&& put) const {
    for (unsigned g = 0; g < n_; ++g)
      for (uint32_t m = mask_[g]; m != 0; m &= m - 1)
        put(g, static_cast<unsigned>(__builtin_ctz(m)));
  }

 private:
  // The group of class c among the first `groups`, or a new one (groups grows). A direct table
  // for the small class indexes configs have (one byte load per packet), a search of the
  // groups so far for the rest (the pass-through marker).
  uint8_t group_of(uint32_t c, unsigned& groups) {
    if (c < kDirect && direct_[c] != kNone) return direct_[c];
    unsigned g = 0;
    while (g < groups && cls_[g] != c) ++g;
    if (g == groups) {
      cls_[groups++] = c;
      if (c < kDirect) direct_[c] = static_cast<uint8_t>(g);
    }
    return static_cast<uint8_t>(g);
  }
  // Bit i set where group_[i] == g: 16 slots per compare and byte mask.
  uint32_t equal_mask(uint8_t g) const {
    uint32_t m = 0;
#ifdef __SSE2__
    const __m128i want = _mm_set1_epi8(static_cast<char>(g));
    for (unsigned i = 0; i < kMax; i += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group_ + i));
      m |= static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, want))) << i;
    }
#else
    for (unsigned i = 0; i < kMax; ++i) m |= uint32_t{group_[i] == g} << i;
#endif
    return m;
  }

  static constexpr uint32_t kDirect = 64;
  static constexpr uint8_t kNone = 0xFF;
  uint8_t direct_[kDirect];
  uint8_t group_[kMax];
  uint32_t cls_[kMax];
  uint32_t mask_[kMax];
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
  unsigned pos = 0;
  groups.partition([&](unsigned, unsigned i) { tmp[pos++] = in[i]; });
  return tmp;
}

}  // namespace dripgate::dataplane
