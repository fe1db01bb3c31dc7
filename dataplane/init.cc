#include "dataplane/init.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

namespace dripgate::dataplane {

namespace {
[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(fmt::format("{}: {}", what, rte_strerror(err < 0 ? -err : err)));
}
}  // namespace

// Set by dataplane/meson.build in a static build.
#ifndef DRIPGATE_DPDK_DRIVERS
#define DRIPGATE_DPDK_DRIVERS ""
#endif
std::string_view static_drivers() {
  return DRIPGATE_DPDK_DRIVERS;
}

std::string plugin_error(const std::vector<std::string>& args, std::string_view drivers) {
  if (drivers.empty()) return "";
  for (const auto& a : args) {
    if (a.starts_with("-d"))  // "-d PATH" or "-dPATH"; the EAL has no long form of it
      return fmt::format(
          "EAL argument '{}': this dataplane is linked statically with the DPDK drivers {} and "
          "cannot load a driver plugin; add the driver to the dpdk_drivers build option, or "
          "build with -Ddpdk_link=shared",
          a, drivers);
  }
  return "";
}

namespace {
// The runtime dir, removed at exit: DPDK's telemetry unlinks its socket in an atexit handler,
// so ours must be registered before rte_eal_init to run after it.
char g_runtime_dir[4096];
void remove_runtime_dir() {
  if (g_runtime_dir[0] != '\0') ::rmdir(g_runtime_dir);  // fails harmlessly if not empty
}
}  // namespace

Eal::Eal(const std::vector<std::string>& args) {
  if (std::string error = plugin_error(args, static_drivers()); !error.empty())
    throw std::runtime_error(error);
  static const bool registered = std::atexit(remove_runtime_dir) == 0;
  (void)registered;
  std::vector<std::string> copy = args;  // rte_eal_init may permute argv
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(copy.size()), argv.data()) < 0)
    fail(static_drivers().empty()
             ? std::string("EAL initialisation failed (check dataplane.eal)")
             : fmt::format("EAL initialisation failed (check dataplane.eal; the DPDK drivers in "
                           "this build: {})",
                           static_drivers()),
         rte_errno);
  runtime_dir_ = rte_eal_get_runtime_dir();
  std::snprintf(g_runtime_dir, sizeof(g_runtime_dir), "%s", runtime_dir_.c_str());
}

Eal::~Eal() {
  rte_eal_cleanup();
  remove_runtime_dir();  // in case nothing is left already; else again at exit
}

MbufPool::MbufPool(const std::string& name, uint32_t count, int socket, uint32_t data_room) {
  // The per-lcore cache must divide into the pool: 256 is DPDK's usual value, smaller for
  // tiny pools so the caches cannot hide most of the pool.
  unsigned cache = count >= 4096 ? 256 : count / 16;
  if (data_room + RTE_PKTMBUF_HEADROOM > UINT16_MAX)
    throw std::invalid_argument(fmt::format("mbuf data room {} B is over 64 KiB", data_room));
  pool_ = rte_pktmbuf_pool_create(name.c_str(), count, cache, 0,
                                  static_cast<uint16_t>(data_room + RTE_PKTMBUF_HEADROOM),
                                  socket < 0 ? SOCKET_ID_ANY : socket);
  if (pool_ == nullptr)
    fail(fmt::format("cannot create mbuf pool of {} mbufs of {} B", count, data_room), rte_errno);
}

MbufPool::~MbufPool() {
  rte_mempool_free(pool_);
}

uint32_t MbufPool::size() const {
  return pool_->size;
}
uint32_t MbufPool::available() const {
  return rte_mempool_avail_count(pool_);
}

namespace {
rte_eth_dev_info dev_info(uint16_t id) {
  if (!rte_eth_dev_is_valid_port(id))
    throw std::runtime_error(fmt::format(
        "port {} does not exist ({} ports available; add --vdev or a PCI device to dataplane.eal)",
        id, rte_eth_dev_count_avail()));
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(id, &info); rc != 0) fail(fmt::format("port {} info", id), rc);
  return info;
}
}  // namespace

PortLimits port_limits(uint16_t id) {
  const rte_eth_dev_info info = dev_info(id);
  PortLimits p;
  p.id = id;
  p.driver = info.driver_name != nullptr ? info.driver_name : "";
  p.max_rx_pktlen = info.max_rx_pktlen;
  p.max_mtu = info.max_mtu;
  p.rx_scatter = (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER) != 0;
  p.tx_multi_seg = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  const rte_devargs* args = info.device != nullptr ? rte_dev_devargs(info.device) : nullptr;
  if (args != nullptr && args->args != nullptr)
    p.af_packet_frame_size = af_packet_frame_size(args->args);
  return p;
}

FramePlan plan_port_frames(uint32_t mtu, const std::vector<uint16_t>& ids) {
  std::vector<PortLimits> limits;
  for (uint16_t id : ids) limits.push_back(port_limits(id));
  FramePlan plan = plan_frames(mtu, limits);
  if (!plan.errors.empty())
    throw std::runtime_error(fmt::format("{}", fmt::join(plan.errors, "; ")));
  return plan;
}

Port::Port(uint16_t id, rte_mempool* pool, const PortFrames& frames, uint16_t rx_queues,
           uint16_t tx_queues, uint16_t rx_desc, uint16_t tx_desc)
    : id_(id) {
  const rte_eth_dev_info info = dev_info(id);
  if (rx_queues > info.max_rx_queues || tx_queues > info.max_tx_queues)
    throw std::runtime_error(fmt::format(
        "port {} ({}) has {} RX and {} TX queues; needed: {} RX (dataplane.ports.rx_queues) and "
        "{} TX (one per RX lcore on the client port, for the reverse path)",
        id, name(), info.max_rx_queues, info.max_tx_queues, rx_queues, tx_queues));
  rte_eth_conf conf{};
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE)
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  if (frames.set_mtu) conf.rxmode.mtu = frames.mtu;
  if (frames.scatter) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
  if (frames.multi_seg) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (rx_queues > 1) {
    // The flow's addresses and ports, so one flow stays on one queue (one RX lcore: in order).
    const uint64_t hf =
        (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP) & info.flow_type_rss_offloads;
    if (hf != 0) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf = hf;
    }
  }
  if (int rc = rte_eth_dev_configure(id, rx_queues, tx_queues, &conf); rc != 0)
    fail(fmt::format("port {} configure", id), rc);
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_desc, &tx_desc); rc != 0)
    fail(fmt::format("port {} descriptors", id), rc);
  int socket = rte_eth_dev_socket_id(id);
  if (socket < 0) socket = SOCKET_ID_ANY;
  rte_eth_rxconf rxq = info.default_rxconf;
  rxq.offloads = conf.rxmode.offloads;
  for (uint16_t q = 0; q < rx_queues; ++q)
    if (int rc = rte_eth_rx_queue_setup(id, q, rx_desc, static_cast<unsigned>(socket), &rxq, pool);
        rc != 0)
      fail(fmt::format("port {} rx queue {}", id, q), rc);
  rte_eth_txconf txq = info.default_txconf;
  txq.offloads = conf.txmode.offloads;
  for (uint16_t q = 0; q < tx_queues; ++q)
    if (int rc = rte_eth_tx_queue_setup(id, q, tx_desc, static_cast<unsigned>(socket), &txq);
        rc != 0)
      fail(fmt::format("port {} tx queue {}", id, q), rc);
  if (int rc = rte_eth_dev_start(id); rc != 0) fail(fmt::format("port {} start", id), rc);
  started_ = true;
  // A bump in the wire forwards frames for any MAC; not every PMD supports it (net_null).
  rte_eth_promiscuous_enable(id);
}

Port::~Port() {
  stop();
  close();
}

std::string Port::name() const {
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  if (rte_eth_dev_get_name_by_port(id_, name) != 0) return fmt::format("port{}", id_);
  return name;
}

void Port::stop() {
  if (started_) {
    rte_eth_dev_stop(id_);
    started_ = false;
  }
}

void Port::close() {
  stop();
  if (!closed_) {
    rte_eth_dev_close(id_);
    closed_ = true;
  }
}

}  // namespace dripgate::dataplane
