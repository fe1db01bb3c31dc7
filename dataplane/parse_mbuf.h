// parse() for a frame held in a chain of mbufs (a jumbo frame received into 2 KiB segments):
// its headers may cross a segment boundary. The fast path takes a frame here only when it
// spans several segments; a one-segment frame goes to parse() on its data.
#pragma once

#include "dataplane/parse.h"

struct rte_mbuf;

namespace dripgate::dataplane {

// As parse(rte_pktmbuf_mtod(m), rte_pktmbuf_pkt_len(m), out) would on the frame made
// contiguous: the same status and fields, without copying the frame. A header that straddles
// two segments is copied onto the stack (rte_pktmbuf_read); nothing is allocated.
ParseStatus parse_mbuf(const rte_mbuf* m, ParsedPacket* out) noexcept;

}  // namespace dripgate::dataplane
