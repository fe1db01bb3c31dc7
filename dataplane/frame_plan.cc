#include "dataplane/frame_plan.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace dripgate::dataplane {

namespace {

bool is_af_packet(const PortLimits& p) {
  return p.driver == "net_af_packet";
}

// net_pcap receives a frame longer than one mbuf into a chain and sends chains (it copies them
// out) without offering either offload.
bool chains(const PortLimits& p) {
  const bool pcap = p.driver == "net_pcap";
  return (p.rx_scatter || pcap) && (p.tx_multi_seg || pcap);
}

// The ethdev's own check of rxmode.mtu (eth_dev_validate_mtu): the MTU against max_mtu, and
// the MTU plus the device's overhead (18 B unless max_rx_pktlen and max_mtu say otherwise)
// against max_rx_pktlen.
std::string ethdev_error(uint32_t mtu, const PortLimits& p) {
  const uint32_t overhead =
      p.max_mtu != UINT16_MAX && p.max_rx_pktlen > p.max_mtu ? p.max_rx_pktlen - p.max_mtu : 18;
  if (mtu <= p.max_mtu && mtu + overhead <= p.max_rx_pktlen) return {};
  return fmt::format(
      "dataplane.mtu: {} is more than port {} ({}) takes: MTU at most {}, frames at most {} B", mtu,
      p.id, p.driver, std::min<uint32_t>(p.max_mtu, p.max_rx_pktlen - overhead), p.max_rx_pktlen);
}

}  // namespace

FramePlan plan_frames(uint32_t mtu, const std::vector<PortLimits>& ports) {
  FramePlan plan;
  const uint32_t frame = mtu + kFrameOverhead;
  // The data room a frame needs when it must fit one mbuf.
  uint32_t whole = std::max(frame, kDefaultDataRoom);
  bool all_chain = true;
  for (const PortLimits& p : ports) {
    PortFrames f;
    f.mtu = static_cast<uint16_t>(mtu);
    if (is_af_packet(p)) {
      // DPDK 22.11's net_af_packet says max_rx_pktlen 1518 whatever its ring holds (fixed in
      // 26.03), and so refuses any larger rxmode.mtu, yet receives whatever the kernel puts in
      // a ring slot into ONE mbuf, and its queue setup wants every mbuf to hold a slot. So its
      // limit is its ring's slot, and the interface's MTU is the kernel's (`ip link set ...
      // mtu`), not set here.
      f.set_mtu = false;
      const uint32_t size = p.af_packet_frame_size;
      const uint32_t slot = size > kAfPacketFrameOffset ? size - kAfPacketFrameOffset : 0;
      const uint32_t need = mtu + 18;  // Ethernet header and one VLAN tag, no FCS
      if (need > slot)
        plan.errors.push_back(fmt::format(
            "dataplane.mtu: {} needs frames of {} B, but port {} ({}) receives at most {} B "
            "(framesz={} in its --vdev arguments; framesz must be at least mtu + {})",
            mtu, need, p.id, p.driver, slot, p.af_packet_frame_size, 18 + kAfPacketFrameOffset));
      whole = std::max(whole, size > kAfPacketSlotHeader ? size - kAfPacketSlotHeader : 0);
      all_chain = false;
    } else {
      if (std::string e = ethdev_error(mtu, p); !e.empty()) plan.errors.push_back(std::move(e));
      all_chain = all_chain && chains(p);
    }
    plan.ports.push_back(f);
  }
  if (whole <= kDefaultDataRoom) return plan;  // every frame fits a default mbuf
  if (all_chain) {
    // 2 KiB mbufs for every frame, chained when longer: a pool of them costs what it does at
    // 1500, where mbufs sized for 9 KiB frames would hold 9 KiB for every 64-byte one.
    plan.chained = true;
    for (size_t i = 0; i < ports.size(); ++i) {
      plan.ports[i].scatter = ports[i].rx_scatter;
      plan.ports[i].multi_seg = ports[i].tx_multi_seg;
    }
    return plan;
  }
  // Rounded up to a cache line, as DPDK lays out the buffers.
  plan.data_room = (whole + 63) / 64 * 64;
  return plan;
}

uint32_t af_packet_frame_size(std::string_view devargs) {
  uint32_t size = kAfPacketDefaultFrameSize;
  while (!devargs.empty()) {
    const size_t comma = devargs.find(',');
    const std::string_view kv = devargs.substr(0, comma);
    if (kv.starts_with("framesz=")) {
      const std::string_view v = kv.substr(8);
      uint32_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec == std::errc() && end == v.data() + v.size()) size = n;
    }
    if (comma == std::string_view::npos) break;
    devargs.remove_prefix(comma + 1);
  }
  return size;
}

}  // namespace dripgate::dataplane
