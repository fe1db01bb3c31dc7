#include "dataplane/parse_mbuf.h"

#include <rte_mbuf.h>

#include "dataplane/parse_frame.h"

namespace dripgate::dataplane {

namespace {

// A frame in a chain of mbufs: bytes in place when they lie in one segment, else copied.
struct MbufFrame {
  const rte_mbuf* m;
  uint32_t len() const noexcept { return rte_pktmbuf_pkt_len(m); }
  const uint8_t* at(uint32_t off, uint32_t n, uint8_t* tmp) const noexcept {
    // Never null: the parser asks only for bytes inside pkt_len.
    return static_cast<const uint8_t*>(rte_pktmbuf_read(m, off, n, tmp));
  }
};

}  // namespace

ParseStatus parse_mbuf(const rte_mbuf* m, ParsedPacket* out) noexcept {
  return parse_detail::parse_frame(MbufFrame{m}, out);
}

}  // namespace dripgate::dataplane
