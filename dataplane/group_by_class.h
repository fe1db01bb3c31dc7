// Stable partition of a received burst by class, for the scheduler owner and for the lcore that
// classifies. Header-only and free of DPDK so it is tested on its own.
#pragma once

#include <cstdint>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// Bits [0, n) of a burst's 32-bit mask (bit i: packet i), n <= 32.
inline uint32_t low_bits(unsigned n) {
  return n >= 32 ? ~uint32_t{0} : (uint32_t{1} << n) - 1;
}

// The classes of up to kMax packets as groups, one per class, numbered in order of first
// appearance, each with its members as one bit mask: per-class order is all the scheduler
// promises, and one run per class costs one scheduler call and one counter update instead of
// one per packet when classes interleave (as flows of several classes do on the wire).
//
// Built from an array of the packets' classes, one pass over it per class (four packets per
// compare): a burst has few classes, and nothing is kept per packet. A count or position kept
// per group and bumped per packet is a load that waits for the previous packet's store to the
// same place (the loop serialised); a class-to-group table looked up per packet is a
// dependent load per packet.
template <unsigned kMax>
class ClassGroups {
  static_assert(kMax <= 32 && kMax % 4 == 0, "a group's members are one 32-bit mask");

 public:
  // The groups of n packets (n <= kMax) whose classes are cls[0, n), where the value
  // kUnset stands for class `unset_as` (by default itself, a group like any other: the value
  // of the pass-through marker and of a lookup's no-match); cls has room for kMax (what lies
  // past n is read and ignored).
  static constexpr uint32_t kUnset = UINT32_MAX;
  void assign(const uint32_t* cls, unsigned n, uint32_t unset_as = kUnset) {
    n_ = 0;
    n_pkts_ = n;
    for (uint32_t left = low_bits(n); left != 0;) {
      uint32_t c = cls[__builtin_ctz(left)];
      if (c == kUnset) c = unset_as;
      uint32_t m = equal_mask(cls, c);
      if (c == unset_as && c != kUnset) m |= equal_mask(cls, kUnset);
      m &= left;
      cls_[n_] = c;
      mask_[n_++] = m;
      left &= ~m;
    }
  }
  // n packets, all of class c (n <= kMax): what assign() leaves for n copies of c, without
  // looking at them, for a burst whose class is decided once for all of it.
  void one_group(uint32_t c, unsigned n) {
    n_pkts_ = n;
    n_ = n != 0;
    cls_[0] = c;
    mask_[0] = low_bits(n);
  }

  unsigned size() const { return n_; }
  unsigned n() const { return n_pkts_; }
  uint32_t cls(unsigned g) const { return cls_[g]; }
  uint32_t members(unsigned g) const { return mask_[g]; }  // bit i: packet i is in group g
  unsigned count(unsigned g) const { return static_cast<unsigned>(__builtin_popcount(mask_[g])); }
  // Packet i's group (i < n()).
  unsigned group(unsigned i) const {
    unsigned g = 0;
    while ((mask_[g] >> i & 1) == 0) ++g;
    return g;
  }
  // Calls put(g, i) for every packet i, group by group in order, each group's packets in order:
  // the stable partition.
  template <typename Put>
  void partition(Put&& put) const {
    for (unsigned g = 0; g < n_; ++g)
      for (uint32_t m = mask_[g]; m != 0; m &= m - 1)
        put(g, static_cast<unsigned>(__builtin_ctz(m)));
  }

 private:
  // Bit i set where cls[i] == c, for i < kMax.
  static uint32_t equal_mask(const uint32_t* cls, uint32_t c) {
    uint32_t m = 0;
#ifdef __SSE2__
    const __m128i want = _mm_set1_epi32(static_cast<int>(c));
    for (unsigned i = 0; i < kMax; i += 4) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cls + i));
      const __m128 eq = _mm_castsi128_ps(_mm_cmpeq_epi32(v, want));
      m |= static_cast<uint32_t>(_mm_movemask_ps(eq)) << i;
    }
#else
    for (unsigned i = 0; i < kMax; ++i) m |= uint32_t{cls[i] == c} << i;
#endif
    return m;
  }

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
  uint32_t cls[kMax];
  for (unsigned i = 0; i < n; ++i) cls[i] = in[i].cls;
  ClassGroups<kMax> groups;
  groups.assign(cls, n);
  unsigned pos = 0;
  groups.partition([&](unsigned, unsigned i) { tmp[pos++] = in[i]; });
  return tmp;
}

}  // namespace dripgate::dataplane
