// DPDK resources with owners: the EAL, the mbuf pool and the two ports. Construction throws
// std::runtime_error with DPDK's reason; destruction releases in the reverse order of creation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/frame_plan.h"

struct rte_mempool;

namespace dripgate::dataplane {

// The DPDK drivers linked into this executable, comma-separated; empty when DPDK is linked as
// shared libraries and the EAL loads every driver in its plugin directory (the dpdk_link and
// dpdk_drivers build options).
std::string_view static_drivers();

// The error for EAL args that load a driver plugin (-d) into a build linked statically with
// `drivers`, or "" when there is none (no -d, or `drivers` empty: a shared build). Such a plugin
// would link its own copy of the EAL and ethdev, whose ports ours never sees.
std::string plugin_error(const std::vector<std::string>& args, std::string_view drivers);

// rte_eal_init in the constructor, rte_eal_cleanup in the destructor.
class Eal {
 public:
  // args[0] is the program name. A plugin_error is thrown before the EAL starts.
  explicit Eal(const std::vector<std::string>& args);
  ~Eal();
  Eal(const Eal&) = delete;
  Eal& operator=(const Eal&) = delete;

 private:
  std::string runtime_dir_;
};

// count mbufs, each with data_room bytes for frame data after DPDK's headroom.
class MbufPool {
 public:
  MbufPool(const std::string& name, uint32_t count, int socket,
           uint32_t data_room = kDefaultDataRoom);
  ~MbufPool();
  MbufPool(const MbufPool&) = delete;
  MbufPool& operator=(const MbufPool&) = delete;
  rte_mempool* get() const { return pool_; }
  uint32_t size() const;
  uint32_t available() const;

 private:
  rte_mempool* pool_ = nullptr;
};

// What port `id` says of itself, for plan_frames(); throws when there is no such port.
PortLimits port_limits(uint16_t id);

// plan_frames() for dataplane.mtu over the ports, in that order; throws its errors, joined.
FramePlan plan_port_frames(uint32_t mtu, const std::vector<uint16_t>& ids);

// One ethdev, promiscuous, started, configured for frames as plan_frames() says (its MTU,
// scatter receive, multi-segment transmit), with rx_queues RX queues (RSS over IPv4/IPv6 addresses
// and ports when there are several and the device hashes; a device that does not, such as a virtual
// one, spreads frames its own way) and tx_queues TX queues. stop() is idempotent; the destructor
// stops and closes (which frees whatever the PMD still holds in its rings).
class Port {
 public:
  Port(uint16_t id, rte_mempool* pool, const PortFrames& frames = {}, uint16_t rx_queues = 1,
       uint16_t tx_queues = 1, uint16_t rx_desc = 1024, uint16_t tx_desc = 1024);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;
  uint16_t id() const { return id_; }
  std::string name() const;
  void stop();
  void close();

 private:
  uint16_t id_;
  bool started_ = false;
  bool closed_ = false;
};

}  // namespace dripgate::dataplane
