#include "dataplane/ecn.h"

#include <rte_mbuf.h>

namespace dripgate::dataplane {

namespace {

constexpr uint32_t kEth = 14;

// RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m'), in one's complement arithmetic on 16-bit words.
uint16_t checksum_update(uint16_t hc, uint16_t m, uint16_t m_new) noexcept {
  uint32_t sum =
      static_cast<uint16_t>(~hc) + static_cast<uint32_t>(static_cast<uint16_t>(~m)) + m_new;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

bool mark_ce(uint8_t* data, uint32_t len) noexcept {
  if (len < kEth) return false;
  uint32_t off = 12;
  uint16_t type = static_cast<uint16_t>((data[off] << 8) | data[off + 1]);
  for (int tags = 0; (type == 0x8100 || type == 0x88A8) && tags < 2; ++tags) {
    off += 4;
    if (len < off + 2) return false;
    type = static_cast<uint16_t>((data[off] << 8) | data[off + 1]);
  }
  uint8_t* ip = data + off + 2;
  const uint32_t room = len - (off + 2);
  if (type == 0x0800) {
    if (room < 20 || (ip[0] >> 4) != 4) return false;
    const uint8_t tos = ip[1];
    if ((tos & 3) == kNotEct) return false;
    if ((tos & 3) == kCe) return true;
    // The 16-bit word holding version/IHL and TOS, before and after, in network order.
    const uint16_t before = static_cast<uint16_t>((ip[0] << 8) | tos);
    const uint16_t after = static_cast<uint16_t>(before | kCe);
    const uint16_t hc = static_cast<uint16_t>((ip[10] << 8) | ip[11]);
    const uint16_t hc_new = checksum_update(hc, before, after);
    ip[1] = static_cast<uint8_t>(tos | kCe);
    ip[10] = static_cast<uint8_t>(hc_new >> 8);
    ip[11] = static_cast<uint8_t>(hc_new);
    return true;
  }
  if (type == 0x86DD) {
    // Traffic class: the low nibble of byte 0 and the high nibble of byte 1; ECN is its low two
    // bits, bits 5..4 of byte 1.
    if (room < 40 || (ip[0] >> 4) != 6) return false;
    const uint8_t ecn = (ip[1] >> 4) & 3;
    if (ecn == kNotEct) return false;
    ip[1] = static_cast<uint8_t>(ip[1] | (kCe << 4));
    return true;
  }
  return false;
}

bool mark_ce(rte_mbuf* m) noexcept {
  return mark_ce(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_data_len(m));
}

}  // namespace dripgate::dataplane
