// RAII loader of the inter-arrival probe (iat.bpf.c): open, set rodata, load, attach to tc or XDP,
// read the maps, detach, destroy. Errors are std::runtime_error with the errno text.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ebpf/iat.h"

struct iat;  // the bpftool skeleton (iat.skel.h), private to iat_probe.cc

namespace dripgate::ebpf {

// An address prefix, IPv4 or IPv6: "10.0.0.0/8", "fd00::/64", or a plain address (full length).
struct Prefix {
  int family = 4;  // 4 or 6
  std::array<uint8_t, 16> addr{};
  unsigned len = 0;

  // Throws std::invalid_argument with the offending text.
  static Prefix parse(std::string_view text);
  std::string str() const;
};

struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 65535;

  // "8080" or "8000-8100"; throws std::invalid_argument.
  static PortRange parse(std::string_view text);
};

// Unset criteria match everything; non-IP frames (ARP, LLDP...) never match and are counted in
// iat_totals::filtered_out. Ports require TCP/UDP/SCTP.
struct Filter {
  std::optional<Prefix> src;
  std::optional<Prefix> dst;
  std::optional<PortRange> src_port;
  std::optional<PortRange> dst_port;
  std::optional<uint8_t> protocol;  // IPPROTO_*

  // The rodata layout shared with the BPF program.
  iat_filter to_bpf() const;
};

enum class Direction { kIngress, kEgress };

struct Options {
  Filter filter;
  // Burst window widths; 0 disables a window.
  std::array<uint64_t, IAT_WINDOWS> windows_ns{100'000, 1'000'000};
  // tc only: arrival time from skb->tstamp when nonzero (bpf_ktime_get_ns otherwise). For
  // BPF_PROG_TEST_RUN fixtures, which pass __sk_buff.tstamp through; leave off on live traffic.
  bool use_skb_tstamp = false;
  // tc filter identity on the clsact hook; the probe removes only the filter at this handle and
  // priority, and only while it still runs our program.
  uint32_t tc_handle = 0xd1a7;
  uint32_t tc_priority = 1;
};

struct Snapshot {
  std::array<uint64_t, IAT_BUCKETS> hist{};  // gaps between matching packets, iat_bucket()
  iat_totals totals{};
  std::array<iat_window, IAT_WINDOWS> windows{};  // the open window is cur_start_ns/cur_count
  std::array<std::array<uint64_t, IAT_COUNT_BUCKETS>, IAT_WINDOWS> count_hist{};  // closed windows
  // Packets left out of a window because other CPUs kept winning the compare-and-swap (expected 0).
  std::array<uint64_t, IAT_WINDOWS> window_lost{};
};

// Enters the network namespace /run/netns/NAME on the calling thread for its lifetime and
// returns to the previous one on destruction. An empty name stays in the current namespace.
class NetnsGuard {
 public:
  explicit NetnsGuard(const std::string& name);
  // Enters the namespace referred to by an open fd (not taken over).
  explicit NetnsGuard(int netns_fd);
  ~NetnsGuard();
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;

 private:
  void enter(int fd, const std::string& what);
  int saved_ = -1;
};

class IatProbe {
 public:
  // Opens the skeleton, writes the settings into rodata and loads (verifies) the programs.
  explicit IatProbe(const Options& options);
  ~IatProbe();  // detach(), then destroy the skeleton
  IatProbe(const IatProbe&) = delete;
  IatProbe& operator=(const IatProbe&) = delete;

  // Attaches the tc program to the clsact hook of an interface of the network namespace `netns`
  // (a name under /run/netns; empty = the current one). Creates the clsact qdisc if missing.
  // Attaching again to the same interface and direction is a no-op. Throws if another filter
  // already holds our handle/priority there.
  void attach_tc(const std::string& ifname, Direction dir, const std::string& netns = "");
  void attach_tc(int ifindex, Direction dir, const std::string& netns = "");
  // Attaches the XDP program through a BPF link (XDP_FLAGS_SKB_MODE / XDP_FLAGS_DRV_MODE, 0 =
  // let the kernel choose); the kernel drops the link if the process dies.
  void attach_xdp(const std::string& ifname, uint32_t flags = 0, const std::string& netns = "");
  void attach_xdp(int ifindex, uint32_t flags = 0, const std::string& netns = "");

  // Removes what this probe added, in reverse order: our tc filters (only if they still run our
  // program), the clsact qdiscs we created (only if no filter is left on them), the XDP links.
  // Never throws; failures are logged to stderr. Idempotent.
  void detach() noexcept;

  Snapshot snapshot() const;

  int tc_prog_fd() const;
  int xdp_prog_fd() const;
  uint32_t tc_prog_id() const;
  uint32_t xdp_prog_id() const;
  const Options& options() const { return options_; }

 private:
  struct TcAttachment {
    int netns_fd;  // -1 = the namespace of the process at attach time
    int ifindex;
    Direction dir;
    bool created_qdisc;
  };
  struct XdpAttachment {
    int link_fd;
    int netns_fd;
    int ifindex;
    std::string netns;
  };
  void detach_tc(const TcAttachment& a) noexcept;

  Options options_;
  iat* skel_ = nullptr;
  std::vector<TcAttachment> tc_;
  std::vector<XdpAttachment> xdp_;
};

// The ifindex of `ifname` inside `netns` (empty = current); throws "no such interface".
int interface_index(const std::string& ifname, const std::string& netns = "");

}  // namespace dripgate::ebpf
