// The plan that sizes mbufs and turns on scatter/multi-segment for dataplane.mtu, for the
// drivers the tests use and for a NIC, as their rte_eth_dev_info describes them in DPDK 22.11.
#include "dataplane/frame_plan.h"

#include <gtest/gtest.h>

namespace dripgate::dataplane {
namespace {

PortLimits pcap(uint16_t id) {
  return PortLimits{id, "net_pcap", UINT32_MAX, UINT16_MAX, false, false};
}
PortLimits ring(uint16_t id) {
  return PortLimits{id, "net_ring", UINT32_MAX, UINT16_MAX, true, true};
}
PortLimits af_packet(uint16_t id, uint32_t framesz) {
  return PortLimits{id, "net_af_packet", 1518, UINT16_MAX, false, true, framesz};
}
// An Intel 700-series port: 9728-byte frames, MTU 9702 (26 B of overhead), scatter, chains.
PortLimits nic(uint16_t id) {
  return PortLimits{id, "net_i40e", 9728, 9702, true, true};
}
// A NIC without scatter, such as a virtual function's simple receive path.
PortLimits nic_no_scatter(uint16_t id) {
  return PortLimits{id, "net_simple", 9728, 9702, false, true};
}

TEST(FramePlan, StandardMtuKeepsDefaultMbufs) {
  for (const auto& ports :
       {std::vector{pcap(0), pcap(1)}, std::vector{ring(0), ring(1)},
        std::vector{af_packet(0, 2048), af_packet(1, 2048)}, std::vector{nic(0), nic(1)}}) {
    const FramePlan p = plan_frames(1500, ports);
    EXPECT_TRUE(p.errors.empty()) << ports[0].driver << ": " << p.errors[0];
    EXPECT_EQ(p.data_room, kDefaultDataRoom);
    EXPECT_FALSE(p.chained);
    ASSERT_EQ(p.ports.size(), 2u);
    EXPECT_FALSE(p.ports[0].scatter || p.ports[0].multi_seg);
    EXPECT_EQ(p.ports[0].mtu, 1500);
  }
}

TEST(FramePlan, JumboChainsDefaultMbufsWhereEveryPortChains) {
  FramePlan p = plan_frames(9000, {pcap(0), pcap(1)});
  EXPECT_TRUE(p.errors.empty());
  EXPECT_EQ(p.data_room, kDefaultDataRoom);
  EXPECT_TRUE(p.chained);
  // net_pcap chains without offering the offloads, so none is asked of it.
  EXPECT_FALSE(p.ports[0].scatter || p.ports[0].multi_seg);
  EXPECT_TRUE(p.ports[1].set_mtu);
  EXPECT_EQ(p.ports[1].mtu, 9000);

  p = plan_frames(9000, {nic(0), ring(1)});
  EXPECT_TRUE(p.errors.empty());
  EXPECT_TRUE(p.chained);
  for (const PortFrames& f : p.ports) EXPECT_TRUE(f.scatter && f.multi_seg && f.set_mtu);
}

TEST(FramePlan, JumboSizesMbufsForWholeFramesWhereAPortCannotChain) {
  FramePlan p = plan_frames(9000, {nic(0), nic_no_scatter(1)});
  EXPECT_TRUE(p.errors.empty());
  EXPECT_FALSE(p.chained);
  EXPECT_EQ(p.data_room, 9088u);  // 9000 + 26, rounded up to 64
  EXPECT_FALSE(p.ports[0].scatter);

  // net_af_packet: never chains on receive, and each mbuf holds a whole ring slot's frame.
  p = plan_frames(9000, {af_packet(0, 9216), af_packet(1, 9216)});
  EXPECT_TRUE(p.errors.empty()) << p.errors[0];
  EXPECT_FALSE(p.chained);
  EXPECT_EQ(p.data_room, 9216u);     // the 9184 B its queue setup wants, rounded up to 64
  EXPECT_FALSE(p.ports[0].set_mtu);  // 22.11's ethdev would refuse it (max_rx_pktlen 1518)
}

TEST(FramePlan, AfPacketSlotLargerThanAnMbufGrowsTheMbufsEvenAtStandardMtu) {
  // Its queue setup wants framesz - 32 B in every mbuf: 4064 B here.
  const FramePlan p = plan_frames(1500, {af_packet(0, 4096), pcap(1)});
  EXPECT_TRUE(p.errors.empty());
  EXPECT_EQ(p.data_room, 4096u);
}

TEST(FramePlan, PortsThatCannotTakeTheMtuAreNamed) {
  FramePlan p = plan_frames(9000, {af_packet(0, 2048), af_packet(1, 9216)});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0],
            "dataplane.mtu: 9000 needs frames of 9018 B, but port 0 (net_af_packet) receives at "
            "most 1982 B (framesz=2048 in its --vdev arguments; framesz must be at least mtu + "
            "84)");
  // VMware's vmxnet3: MTU 9000 at most.
  p = plan_frames(9216, {PortLimits{0, "net_vmxnet3", 16384, 9000, true, true}, pcap(1)});
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_EQ(p.errors[0],
            "dataplane.mtu: 9216 is more than port 0 (net_vmxnet3) takes: MTU at most 9000, "
            "frames at most 16384 B");
  EXPECT_TRUE(plan_frames(9702, {nic(0)}).errors.empty());
  EXPECT_EQ(plan_frames(9703, {nic(0)}).errors.size(), 1u);
  // A port with the ethdev's default overhead (18 B) and a 1518-byte limit.
  const PortLimits small{3, "net_small", 1518, UINT16_MAX, true, true};
  EXPECT_TRUE(plan_frames(1500, {small}).errors.empty());
  EXPECT_EQ(plan_frames(1501, {small}).errors,
            std::vector<std::string>{"dataplane.mtu: 1501 is more than port 3 (net_small) takes: "
                                     "MTU at most 1500, frames at most 1518 B"});
}

TEST(FramePlan, AfPacketFrameSizeFromDevargs) {
  EXPECT_EQ(af_packet_frame_size(""), 2048u);
  EXPECT_EQ(af_packet_frame_size("iface=veth0,qpairs=1"), 2048u);
  EXPECT_EQ(af_packet_frame_size("iface=veth0,framesz=9216,blocksz=36864"), 9216u);
  EXPECT_EQ(af_packet_frame_size("framesz=4096"), 4096u);
  EXPECT_EQ(af_packet_frame_size("iface=x,framesz=12ab"), 2048u);  // the PMD refuses it
}

}  // namespace
}  // namespace dripgate::dataplane
