#include "ebpf/iat_probe.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>

// The generated skeleton is C; it trips -Wextra in C++ (missing initializers, casts).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#include "ebpf/iat.skel.h"
#pragma GCC diagnostic pop

#include "common/address.h"

namespace dripgate::ebpf {
namespace {

std::string errno_text(int err) {
  return std::strerror(err < 0 ? -err : err);
}

// libbpf prints the kernel's netlink extack text of every failed tc request, including the ones
// the loader expects (querying a hook that does not exist yet, creating one that does). Those are
// kept back and appended to our own error when the failure is real; other messages pass on.
thread_local std::string t_extack;
libbpf_print_fn_t g_prev_print = nullptr;

int filter_libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (std::strstr(fmt, "Kernel error message:") != nullptr) {
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    std::string_view text(buf);
    if (auto p = text.find("message: "); p != std::string_view::npos) text.remove_prefix(p + 9);
    while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    t_extack = text;
    return 0;
  }
  return g_prev_print ? g_prev_print(level, fmt, args) : 0;
}

void install_libbpf_print() {
  static std::once_flag once;
  std::call_once(once, [] { g_prev_print = libbpf_set_print(filter_libbpf_print); });
}

[[noreturn]] void fail(const std::string& what, int err) {
  err = err < 0 ? -err : err;
  std::string msg = what + ": " + errno_text(err);
  if (!t_extack.empty()) msg += " (kernel: " + t_extack + ")";
  if (err == EPERM || err == EACCES)
    msg += " (BPF and tc need root: CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN for netns)";
  throw std::runtime_error(msg);
}

std::string in_netns(const std::string& netns) {
  return netns.empty() ? std::string() : " in netns '" + netns + "'";
}

const char* dir_name(Direction d) {
  return d == Direction::kIngress ? "ingress" : "egress";
}

int open_netns(const std::string& netns) {
  if (netns.empty()) return -1;
  if (netns.find('/') != std::string::npos)
    throw std::runtime_error("bad network namespace name '" + netns + "'");
  std::string path = "/run/netns/" + netns;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("no such network namespace '" + netns + "' (" + path + ")", errno);
  return fd;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

// Number of tc filters (all chains) under a clsact parent, from an RTM_GETTFILTER dump; -1 when
// the hook is gone. libbpf has no "list", and bpf_tc_hook_destroy would take foreign filters too.
int count_tc_filters(int ifindex, uint32_t parent) {
  Fd sock(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (sock.get() < 0) return -1;
  struct {
    nlmsghdr n;
    tcmsg t;
  } req{};
  req.n.nlmsg_len = NLMSG_LENGTH(sizeof(tcmsg));
  req.n.nlmsg_type = RTM_GETTFILTER;
  req.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.n.nlmsg_seq = 1;
  req.t.tcm_family = AF_UNSPEC;
  req.t.tcm_ifindex = ifindex;
  req.t.tcm_parent = parent;
  if (::send(sock.get(), &req, req.n.nlmsg_len, 0) < 0) return -1;
  alignas(nlmsghdr) char buf[16384];
  int count = 0;
  for (;;) {
    ssize_t n = ::recv(sock.get(), buf, sizeof(buf), 0);
    if (n < 0) return -1;
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) return count;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return e->error == 0 ? count : -1;
      }
      if (h->nlmsg_type == RTM_NEWTFILTER) ++count;
    }
  }
}

uint32_t prog_id(int fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return 0;
  return info.id;
}

bpf_tc_attach_point tc_point(Direction d) {
  return d == Direction::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS;
}

}  // namespace

// ---- Prefix / PortRange / Filter ----

Prefix Prefix::parse(std::string_view text) {
  std::string why;
  // Host bits are kept: str() echoes the address as given; to_bpf() masks it.
  const auto net = common::parse_cidr(text, &why, common::HostBits::kKeep);
  if (!net) throw std::invalid_argument("bad prefix '" + std::string(text) + "': " + why);
  Prefix p;
  p.family = net->v6 ? 6 : 4;
  p.addr = net->addr;
  p.len = net->prefix;
  return p;
}

std::string Prefix::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(len);
}

PortRange PortRange::parse(std::string_view text) {
  auto num = [&](std::string_view v) {
    unsigned n = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || n > 65535)
      throw std::invalid_argument("bad port in '" + std::string(text) + "'");
    return static_cast<uint16_t>(n);
  };
  PortRange r;
  if (auto dash = text.find('-'); dash != std::string_view::npos) {
    r.lo = num(text.substr(0, dash));
    r.hi = num(text.substr(dash + 1));
    if (r.lo > r.hi) throw std::invalid_argument("empty port range '" + std::string(text) + "'");
  } else {
    r.lo = r.hi = num(text);
  }
  return r;
}

iat_filter Filter::to_bpf() const {
  iat_filter f{};
  auto set_prefix = [](const Prefix& p, uint32_t* addr, uint32_t* mask) {
    std::array<uint8_t, 16> m{};
    for (unsigned i = 0; i < 16; ++i) {
      unsigned bits = p.len > i * 8 ? p.len - i * 8 : 0;
      m[i] = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff00u >> bits);
    }
    std::array<uint8_t, 16> a{};
    for (unsigned i = 0; i < 16; ++i) a[i] = p.addr[i] & m[i];
    // Byte arrays copied as words stay in network byte order, as the packet fields are.
    std::memcpy(addr, a.data(), 16);
    std::memcpy(mask, m.data(), 16);
    if (p.family == 4) {
      std::memset(addr + 1, 0, 12);
      std::memset(mask + 1, 0, 12);
    }
  };
  if (src) {
    set_prefix(*src, f.src_addr, f.src_mask);
    f.flags |= src->family == 4 ? IAT_F_SRC4 : IAT_F_SRC6;
  }
  if (dst) {
    set_prefix(*dst, f.dst_addr, f.dst_mask);
    f.flags |= dst->family == 4 ? IAT_F_DST4 : IAT_F_DST6;
  }
  if ((f.flags & (IAT_F_SRC4 | IAT_F_DST4)) && (f.flags & (IAT_F_SRC6 | IAT_F_DST6)))
    throw std::invalid_argument("source and destination prefixes of different IP families");
  if (src_port) {
    f.sport_lo = src_port->lo;
    f.sport_hi = src_port->hi;
    f.flags |= IAT_F_SPORT;
  }
  if (dst_port) {
    f.dport_lo = dst_port->lo;
    f.dport_hi = dst_port->hi;
    f.flags |= IAT_F_DPORT;
  }
  if (protocol) {
    f.protocol = *protocol;
    f.flags |= IAT_F_PROTO;
  }
  return f;
}

// ---- NetnsGuard ----

NetnsGuard::NetnsGuard(const std::string& name) {
  if (name.empty()) return;
  Fd fd(open_netns(name));
  enter(fd.get(), "'" + name + "'");
}

NetnsGuard::NetnsGuard(int netns_fd) {
  if (netns_fd >= 0) enter(netns_fd, "fd " + std::to_string(netns_fd));
}

void NetnsGuard::enter(int fd, const std::string& what) {
  saved_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved_ < 0) fail("cannot open the current network namespace", errno);
  if (::setns(fd, CLONE_NEWNET) != 0) {
    int err = errno;
    ::close(saved_);
    saved_ = -1;
    fail("cannot enter network namespace " + what, err);
  }
}

NetnsGuard::~NetnsGuard() {
  if (saved_ < 0) return;
  if (::setns(saved_, CLONE_NEWNET) != 0)
    std::fprintf(stderr, "dripgate: cannot return to the original network namespace: %s\n",
                 std::strerror(errno));
  ::close(saved_);
}

int interface_index(const std::string& ifname, const std::string& netns) {
  NetnsGuard ns(netns);
  unsigned idx = ::if_nametoindex(ifname.c_str());
  if (idx == 0) fail("no such interface '" + ifname + "'" + in_netns(netns), errno);
  return static_cast<int>(idx);
}

// ---- IatProbe ----

IatProbe::IatProbe(const Options& options) : options_(options) {
  iat_filter filter = options.filter.to_bpf();  // validates before touching the kernel
  install_libbpf_print();
  skel_ = iat__open();
  if (!skel_) fail("cannot open the BPF probe object", errno);
  skel_->rodata->cfg_filter = filter;
  for (unsigned i = 0; i < IAT_WINDOWS; ++i)
    skel_->rodata->cfg_window_ns[i] = options.windows_ns[i];
  skel_->rodata->cfg_use_skb_tstamp = options.use_skb_tstamp ? 1 : 0;
  if (int err = iat__load(skel_); err != 0) {
    iat__destroy(skel_);
    skel_ = nullptr;
    std::string what = "cannot load the BPF probe";
    // The probe needs neither kernel BTF nor bpffs (no CO-RE, nothing pinned); an old kernel
    // is the usual cause of EINVAL here.
    if (err == -EINVAL || err == -ENOTSUP || err == -EOPNOTSUPP)
      what +=
          " (needs Linux >= 5.12: BPF atomic exchange and compare-and-swap, mmap-able global data;"
          " the verifier log above says which instruction failed)";
    fail(what, err);
  }
}

IatProbe::~IatProbe() {
  detach();
  if (skel_) iat__destroy(skel_);
}

int IatProbe::tc_prog_fd() const {
  return bpf_program__fd(skel_->progs.iat_tc);
}
int IatProbe::xdp_prog_fd() const {
  return bpf_program__fd(skel_->progs.iat_xdp);
}
uint32_t IatProbe::tc_prog_id() const {
  return prog_id(tc_prog_fd());
}
uint32_t IatProbe::xdp_prog_id() const {
  return prog_id(xdp_prog_fd());
}

void IatProbe::attach_tc(const std::string& ifname, Direction dir, const std::string& netns) {
  attach_tc(interface_index(ifname, netns), dir, netns);
}

void IatProbe::attach_tc(int ifindex, Direction dir, const std::string& netns) {
  Fd nsfd(open_netns(netns));
  NetnsGuard ns(nsfd.get());
  t_extack.clear();
  const std::string where =
      "ifindex " + std::to_string(ifindex) + " " + dir_name(dir) + in_netns(netns);

  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(dir));
  LIBBPF_OPTS(bpf_tc_opts, query, .handle = options_.tc_handle, .priority = options_.tc_priority);
  if (bpf_tc_query(&hook, &query) == 0 && query.prog_id == tc_prog_id()) return;  // already

  t_extack.clear();
  int err = bpf_tc_hook_create(&hook);
  if (err == -ENODEV) fail("no such interface (" + where + ")", err);
  if (err != 0 && err != -EEXIST) fail("cannot create the clsact qdisc on " + where, err);
  const bool created = err == 0;

  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = tc_prog_fd(), .handle = options_.tc_handle,
              .priority = options_.tc_priority);
  t_extack.clear();
  err = bpf_tc_attach(&hook, &opts);
  if (err != 0) {
    if (created) {
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      bpf_tc_hook_destroy(&hook);
    }
    if (err == -EEXIST) {
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "tc filter pref %u handle 0x%x on %s is held by another program (a probe"
                    " left by a killed run? remove it with `tc filter del dev <if> %s pref %u"
                    " handle 0x%x bpf`)",
                    options_.tc_priority, options_.tc_handle, where.c_str(), dir_name(dir),
                    options_.tc_priority, options_.tc_handle);
      fail(buf, err);
    }
    fail("cannot attach the tc probe on " + where, err);
  }
  tc_.push_back({nsfd.release(), ifindex, dir, created});
}

void IatProbe::attach_xdp(const std::string& ifname, uint32_t flags, const std::string& netns) {
  attach_xdp(interface_index(ifname, netns), flags, netns);
}

void IatProbe::attach_xdp(int ifindex, uint32_t flags, const std::string& netns) {
  for (const auto& a : xdp_)
    if (a.ifindex == ifindex && a.netns == netns) return;  // already: one XDP program per device
  Fd nsfd(open_netns(netns));
  NetnsGuard ns(nsfd.get());
  const std::string where = "ifindex " + std::to_string(ifindex) + in_netns(netns);
  LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = flags);
  int fd = bpf_link_create(xdp_prog_fd(), ifindex, BPF_XDP, &opts);
  if (fd < 0) {
    int err = -fd;
    if (err == ENODEV) fail("no such interface (" + where + ")", err);
    if (err == EBUSY || err == EEXIST)
      fail("another XDP program is already attached on " + where, err);
    fail("cannot attach the XDP probe on " + where, err);
  }
  xdp_.push_back({fd, nsfd.release(), ifindex, netns});
}

void IatProbe::detach_tc(const TcAttachment& a) noexcept {
  try {
    NetnsGuard ns(a.netns_fd);
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = a.ifindex, .attach_point = tc_point(a.dir));
    LIBBPF_OPTS(bpf_tc_opts, query, .handle = options_.tc_handle, .priority = options_.tc_priority);
    int err = bpf_tc_query(&hook, &query);
    if (err == 0 && query.prog_id == tc_prog_id()) {
      LIBBPF_OPTS(bpf_tc_opts, del, .handle = options_.tc_handle, .priority = options_.tc_priority);
      err = bpf_tc_detach(&hook, &del);
      if (err != 0)
        std::fprintf(stderr, "dripgate: cannot remove the tc probe on ifindex %d %s: %s\n",
                     a.ifindex, dir_name(a.dir), errno_text(err).c_str());
    } else if (err == 0) {
      std::fprintf(stderr,
                   "dripgate: tc filter pref %u handle 0x%x on ifindex %d %s now runs another"
                   " program; left in place\n",
                   options_.tc_priority, options_.tc_handle, a.ifindex, dir_name(a.dir));
    }
    if (a.created_qdisc &&
        count_tc_filters(a.ifindex, TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)) == 0 &&
        count_tc_filters(a.ifindex, TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_EGRESS)) == 0) {
      hook.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
      err = bpf_tc_hook_destroy(&hook);
      if (err != 0 && err != -ENOENT && err != -EINVAL && err != -ENODEV)
        std::fprintf(stderr, "dripgate: cannot remove the clsact qdisc on ifindex %d: %s\n",
                     a.ifindex, errno_text(err).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dripgate: detaching the tc probe: %s\n", e.what());
  }
}

void IatProbe::detach() noexcept {
  // Reverse order, so the attachment that created a clsact qdisc is handled after the others on
  // the same interface and finds their filters gone.
  for (auto it = tc_.rbegin(); it != tc_.rend(); ++it) {
    detach_tc(*it);
    if (it->netns_fd >= 0) ::close(it->netns_fd);
  }
  tc_.clear();
  for (auto it = xdp_.rbegin(); it != xdp_.rend(); ++it) {
    ::close(it->link_fd);  // dropping the last reference to the link detaches the program
    if (it->netns_fd >= 0) ::close(it->netns_fd);
  }
  xdp_.clear();
}

Snapshot IatProbe::snapshot() const {
  Snapshot s;
  // The .bss is mmap'ed; counters are read while the probe may update them, each u64 is read
  // whole (aligned), so a snapshot is at worst a few packets out of step between fields.
  const auto* bss = skel_->bss;
  std::memcpy(&s.totals, &bss->totals, sizeof(s.totals));
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) fail("cannot count the possible CPUs", ncpu);
  std::vector<iat_cpu_counters> cpus(static_cast<size_t>(ncpu));
  static_assert(sizeof(iat_cpu_counters) % 8 == 0, "per-CPU values are 8-byte aligned");
  uint32_t key = 0;
  if (int err = bpf_map_lookup_elem(bpf_map__fd(skel_->maps.iat_cpu), &key, cpus.data()); err != 0)
    fail("cannot read the per-CPU counters", err);
  s.totals.packets = s.totals.bytes = s.totals.filtered_out = 0;
  for (const iat_cpu_counters& c : cpus) {
    s.totals.packets += c.packets;
    s.totals.bytes += c.bytes;
    s.totals.filtered_out += c.filtered_out;
    for (unsigned b = 0; b < IAT_BUCKETS; ++b) s.hist[b] += c.hist[b];
  }
  static_assert(sizeof(s.count_hist) == sizeof(bss->count_hist));
  std::memcpy(s.count_hist.data(), bss->count_hist, sizeof(bss->count_hist));
  for (unsigned i = 0; i < IAT_WINDOWS; ++i) {
    const iat_window_state& st = bss->win[i];
    const uint64_t state =
        __atomic_load_n(&st.state, __ATOMIC_RELAXED);  // index and count together
    iat_window& w = s.windows[i];
    w.width_ns = options_.windows_ns[i];
    w.cur_count = state & IAT_WIN_COUNT_MASK;
    // The state keeps the window index modulo 2^40 only; the last packet is in the open window.
    if (w.width_ns && w.cur_count)
      w.cur_start_ns = s.totals.last_ns - s.totals.last_ns % w.width_ns;
    w.max_count = st.max_count;
    w.windows = st.windows;
    s.window_lost[i] = st.lost;
  }
  return s;
}

}  // namespace dripgate::ebpf
