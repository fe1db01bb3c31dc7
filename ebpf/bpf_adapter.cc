#include "ebpf/bpf_adapter.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string_view>

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

}  // namespace

void install_libbpf_print() {
  static std::once_flag once;
  std::call_once(once, [] { g_prev_print = libbpf_set_print(filter_libbpf_print); });
}

[[noreturn]] void throw_errno(const std::string& what, int err) {
  err = err < 0 ? -err : err;
  std::string msg = what + ": " + errno_text(err);
  if (!t_extack.empty()) msg += " (kernel: " + t_extack + ")";
  if (err == EPERM || err == EACCES)
    msg += " (BPF and tc need root: CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN for netns)";
  throw std::runtime_error(msg);
}

namespace {

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
  if (fd < 0) throw_errno("no such network namespace '" + netns + "' (" + path + ")", errno);
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

bpf_tc_attach_point tc_point(Direction d) {
  return d == Direction::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS;
}

}  // namespace

uint32_t prog_id(int fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return 0;
  return info.id;
}

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
  if (saved_ < 0) throw_errno("cannot open the current network namespace", errno);
  if (::setns(fd, CLONE_NEWNET) != 0) {
    int err = errno;
    ::close(saved_);
    saved_ = -1;
    throw_errno("cannot enter network namespace " + what, err);
  }
}

NetnsGuard::~NetnsGuard() {
  if (saved_ < 0) return;
  if (::setns(saved_, CLONE_NEWNET) != 0)
    std::fprintf(stderr, "dripgate: cannot return to the original network namespace: %s\n",
                 std::strerror(errno));
  ::close(saved_);
}

Interface Interface::resolve(const std::string& ifname, const std::string& netns) {
  NetnsGuard ns(netns);
  unsigned idx = ::if_nametoindex(ifname.c_str());
  if (idx == 0) throw_errno("no such interface '" + ifname + "'" + in_netns(netns), errno);
  return {static_cast<int>(idx), netns};
}

void Attachments::attach_tc(int prog_fd, const Interface& at, Direction dir) {
  const int ifindex = at.ifindex;
  const std::string& netns = at.netns;
  const uint32_t id = prog_id(prog_fd);
  Fd nsfd(open_netns(netns));
  NetnsGuard ns(nsfd.get());
  t_extack.clear();
  const std::string where =
      "ifindex " + std::to_string(ifindex) + " " + dir_name(dir) + in_netns(netns);

  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = tc_point(dir));
  LIBBPF_OPTS(bpf_tc_opts, query, .handle = slot_.handle, .priority = slot_.priority);
  if (bpf_tc_query(&hook, &query) == 0 && query.prog_id == id) return;  // already

  t_extack.clear();
  int err = bpf_tc_hook_create(&hook);
  if (err == -ENODEV) throw_errno("no such interface (" + where + ")", err);
  if (err != 0 && err != -EEXIST) throw_errno("cannot create the clsact qdisc on " + where, err);
  const bool created = err == 0;

  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .handle = slot_.handle,
              .priority = slot_.priority);
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
                    slot_.priority, slot_.handle, where.c_str(), dir_name(dir), slot_.priority,
                    slot_.handle);
      throw_errno(buf, err);
    }
    throw_errno("cannot attach the tc probe on " + where, err);
  }
  tc_.push_back({nsfd.release(), ifindex, dir, created, id});
}

void Attachments::attach_xdp(int prog_fd, const Interface& at, uint32_t flags) {
  const int ifindex = at.ifindex;
  const std::string& netns = at.netns;
  for (const auto& a : xdp_)
    if (a.ifindex == ifindex && a.netns == netns) return;  // already: one XDP program per device
  Fd nsfd(open_netns(netns));
  NetnsGuard ns(nsfd.get());
  const std::string where = "ifindex " + std::to_string(ifindex) + in_netns(netns);
  LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = flags);
  int fd = bpf_link_create(prog_fd, ifindex, BPF_XDP, &opts);
  if (fd < 0) {
    int err = -fd;
    if (err == ENODEV) throw_errno("no such interface (" + where + ")", err);
    if (err == EBUSY || err == EEXIST)
      throw_errno("another XDP program is already attached on " + where, err);
    throw_errno("cannot attach the XDP probe on " + where, err);
  }
  xdp_.push_back({fd, nsfd.release(), ifindex, netns});
}

void Attachments::detach_tc(const TcAttachment& a) noexcept {
  try {
    NetnsGuard ns(a.netns_fd);
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = a.ifindex, .attach_point = tc_point(a.dir));
    LIBBPF_OPTS(bpf_tc_opts, query, .handle = slot_.handle, .priority = slot_.priority);
    int err = bpf_tc_query(&hook, &query);
    if (err == 0 && query.prog_id == a.prog_id) {
      LIBBPF_OPTS(bpf_tc_opts, del, .handle = slot_.handle, .priority = slot_.priority);
      err = bpf_tc_detach(&hook, &del);
      if (err != 0)
        std::fprintf(stderr, "dripgate: cannot remove the tc probe on ifindex %d %s: %s\n",
                     a.ifindex, dir_name(a.dir), errno_text(err).c_str());
    } else if (err == 0) {
      std::fprintf(stderr,
                   "dripgate: tc filter pref %u handle 0x%x on ifindex %d %s now runs another"
                   " program; left in place\n",
                   slot_.priority, slot_.handle, a.ifindex, dir_name(a.dir));
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

void Attachments::detach() noexcept {
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

}  // namespace dripgate::ebpf
