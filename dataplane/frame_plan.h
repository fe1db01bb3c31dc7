// How the ports take frames of dataplane.mtu: the mbufs' data room, and whether a frame longer
// than one mbuf arrives as a chain (scatter RX) and leaves as one (multi-segment TX). Free of
// DPDK: init.cc reads each port's limits from it and applies the plan, tests judge it anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dripgate::dataplane {

// Ethernet header (14), two VLAN tags (8) and the FCS (4): a frame's bytes beyond its L3 MTU,
// as NICs size their receive buffers.
inline constexpr uint32_t kFrameOverhead = 26;
// RTE_MBUF_DEFAULT_DATAROOM: the data room of a default mbuf, which every PMD fills.
inline constexpr uint32_t kDefaultDataRoom = 2048;
// Where the kernel puts a frame in a TPACKET_V2 ring slot: TPACKET_ALIGN(TPACKET2_HDRLEN 52 +
// 16) - 14. net_af_packet receives at most framesz - this many bytes a frame.
inline constexpr uint32_t kAfPacketFrameOffset = 66;
// net_af_packet's queue setup wants every mbuf to hold framesz minus this (TPACKET2_HDRLEN 52 -
// sizeof(sockaddr_ll) 20).
inline constexpr uint32_t kAfPacketSlotHeader = 32;
// net_af_packet's framesz when its --vdev arguments give none.
inline constexpr uint32_t kAfPacketDefaultFrameSize = 2048;

// What a port says of itself (rte_eth_dev_info), and for net_af_packet its ring's frame size.
struct PortLimits {
  uint16_t id = 0;
  std::string driver;  // dev_info.driver_name
  uint32_t max_rx_pktlen = UINT32_MAX;
  uint16_t max_mtu = UINT16_MAX;
  bool rx_scatter = false;    // RTE_ETH_RX_OFFLOAD_SCATTER offered
  bool tx_multi_seg = false;  // RTE_ETH_TX_OFFLOAD_MULTI_SEGS offered
  uint32_t af_packet_frame_size = kAfPacketDefaultFrameSize;  // net_af_packet only
};

// How one port is configured.
struct PortFrames {
  uint16_t mtu = 1500;
  bool set_mtu = true;     // rxmode.mtu = mtu (not on net_af_packet, see frame_plan.cc)
  bool scatter = false;    // RTE_ETH_RX_OFFLOAD_SCATTER
  bool multi_seg = false;  // RTE_ETH_TX_OFFLOAD_MULTI_SEGS
};

struct FramePlan {
  uint32_t data_room = kDefaultDataRoom;  // frame bytes per mbuf, after the headroom
  bool chained = false;                   // a frame may span several mbufs
  std::vector<PortFrames> ports;          // in the order of plan_frames' `ports`
  std::vector<std::string> errors;        // each names dataplane.mtu and the port
};

FramePlan plan_frames(uint32_t mtu, const std::vector<PortLimits>& ports);

// framesz from net_af_packet's device arguments ("iface=veth0,framesz=9216"), or the default.
uint32_t af_packet_frame_size(std::string_view devargs);

}  // namespace dripgate::dataplane
