// The generic half of the probe's loader, with no knowledge of what a program counts: network
// namespaces, interface resolution, and attaching program fds to tc clsact hooks and XDP so that
// detaching removes exactly what was added. Errors are std::runtime_error with the errno text
// and the kernel's extack message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dripgate::ebpf {

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

// Where a program attaches: an interface index inside a network namespace, resolved once.
struct Interface {
  int ifindex = 0;
  std::string netns;  // a name under /run/netns; empty = the namespace of the process

  // Throws "no such interface 'NAME'" or "no such network namespace".
  static Interface resolve(const std::string& ifname, const std::string& netns = "");
};

enum class Direction { kIngress, kEgress };

// A tc filter's identity on the clsact hook: only the filter at this handle and priority is ours.
struct TcSlot {
  uint32_t handle = 0;
  uint32_t priority = 0;
};

// Routes libbpf's messages through a filter that keeps back the kernel's extack text of
// expected netlink failures and appends it to the next real error. Idempotent.
void install_libbpf_print();
// Throws std::runtime_error("WHAT: errno text (kernel: extack)"), with a hint on EPERM.
[[noreturn]] void throw_errno(const std::string& what, int err);
// The kernel's id of a loaded program; 0 when the fd is not one.
uint32_t prog_id(int prog_fd);

// The hooks a set of programs holds, removed in reverse order on detach() or destruction.
class Attachments {
 public:
  explicit Attachments(TcSlot slot) : slot_(slot) {}
  ~Attachments() { detach(); }
  Attachments(const Attachments&) = delete;
  Attachments& operator=(const Attachments&) = delete;

  // Attaches to the clsact hook, creating the clsact qdisc if missing. Attaching the same program
  // again to the same hook is a no-op; throws if another program holds our slot there.
  void attach_tc(int prog_fd, const Interface& at, Direction dir);
  // Through a BPF link (flags: XDP_FLAGS_SKB_MODE / XDP_FLAGS_DRV_MODE, 0 = the kernel chooses);
  // the kernel drops the link if the process dies. Once per interface.
  void attach_xdp(int prog_fd, const Interface& at, uint32_t flags);

  // Our tc filters (only if they still run the program we attached), the clsact qdiscs we
  // created (only if no filter is left on them), the XDP links. Never throws; failures are
  // logged to stderr. Idempotent.
  void detach() noexcept;

 private:
  struct TcAttachment {
    int netns_fd;  // -1 = the namespace of the process at attach time
    int ifindex;
    Direction dir;
    bool created_qdisc;
    uint32_t prog_id;
  };
  struct XdpAttachment {
    int link_fd;
    int netns_fd;
    int ifindex;
    std::string netns;
  };
  void detach_tc(const TcAttachment& a) noexcept;

  TcSlot slot_;
  std::vector<TcAttachment> tc_;
  std::vector<XdpAttachment> xdp_;
};

}  // namespace dripgate::ebpf
