// ECN in the IP header (RFC 3168): whether a packet is ECN-capable, and marking it Congestion
// Experienced, which AQM does instead of dropping an ECN-capable packet. The frame is read as
// parse() reads it (Ethernet, up to two VLAN tags, IPv4 or IPv6); for an IPv4 header the
// checksum is updated incrementally (RFC 1624), as a router does, not recomputed.
#pragma once

#include <cstdint>

struct rte_mbuf;

namespace dripgate::dataplane {

// The ECN field's values.
inline constexpr uint8_t kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3;

// ECT(0) or ECT(1): the sender understands CE marks. ecn is the field (the low two bits).
constexpr bool ect(uint8_t ecn) noexcept {
  return ((ecn ^ (ecn >> 1)) & 1) != 0;
}

// Sets CE in the frame at data[0, len) when it is ECN-capable (ECT(0) or ECT(1)) or already
// CE; true then. A Not-ECT packet, a non-IP frame or one too short for its IP header is left
// untouched (false): a sender that did not ask for ECN must not see CE. Reads and writes
// nothing at or past data + len.
bool mark_ce(uint8_t* data, uint32_t len) noexcept;

// mark_ce() of the mbuf's frame; the headers are in its first segment.
bool mark_ce(rte_mbuf* m) noexcept;

}  // namespace dripgate::dataplane
