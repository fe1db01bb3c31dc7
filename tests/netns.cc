#include "tests/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace dripgate::testing {

namespace {

bool pid_gone(const std::string& digits) {
  if (digits.empty() || digits.size() > 9) return false;
  return ::kill(static_cast<pid_t>(std::stol(digits)), 0) != 0 && errno == ESRCH;
}

// The pid in `name` if it is prefix + digits + ..., else "".
std::string pid_of(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return "";
  const std::string rest = name.substr(prefix.size());
  return rest.substr(0, rest.find_first_not_of("0123456789"));
}

std::string in_netns(const std::string& netns) {
  return netns.empty() ? "ip " : "ip -n " + netns + " ";
}

}  // namespace

CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string run_checked(const std::string& cmd) {
  // Braces, so that stderr of every command of a list is captured, not only of the last one.
  CommandResult r = run_shell("{ " + cmd + "\n} 2>&1");
  if (r.status != 0) throw std::runtime_error(cmd + ": " + r.out);
  return r.out;
}

std::thread thread_in_netns(const std::string& ns, std::function<void(bool entered)> fn) {
  return std::thread([ns, fn = std::move(fn)] {
    int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    const bool entered = fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0) ::close(fd);
    fn(entered);
  });
}

bool run_in_netns(const std::string& ns, const std::function<void()>& fn) {
  bool entered = false;
  thread_in_netns(ns, [&](bool ok) {
    entered = ok;
    if (ok) fn();
  }).join();
  return entered;
}

TestNetns::TestNetns(std::string prefix) : prefix_(std::move(prefix)) {
  if (prefix_.empty() || (prefix_.back() >= '0' && prefix_.back() <= '9'))
    throw std::invalid_argument("TestNetns prefix must be non-empty and not end in a digit");
  id_ = std::to_string(::getpid());
  remove_leftovers(prefix_);
}

TestNetns::~TestNetns() {
  remove_all();
}

std::string TestNetns::name(const std::string& tag) const {
  if (tag.empty() || (tag[0] >= '0' && tag[0] <= '9'))
    throw std::invalid_argument("TestNetns tag must be non-empty and not start with a digit");
  return prefix_ + id_ + tag;
}

std::string TestNetns::add_netns(const std::string& tag) {
  const std::string n = name(tag);
  run_checked("ip netns add " + n);
  netns_.push_back(n);
  run_checked("ip -n " + n + " link set lo up");
  return n;
}

void TestNetns::add_veth(const VethEnd& a, const VethEnd& b) {
  for (const VethEnd* e : {&a, &b}) {
    if (e->ifname.empty() || e->ifname.size() > 15)
      throw std::invalid_argument("veth name '" + e->ifname + "' is not 1..15 characters");
  }
  auto mac = [](const VethEnd& e) { return e.mac.empty() ? "" : " address " + e.mac; };
  // Both ends are noted before they exist: if a step below fails, the destructor still finds
  // whichever of them stayed in the root namespace.
  links_.push_back(a.ifname);
  links_.push_back(b.ifname);
  run_checked("ip link add " + a.ifname + mac(a) + " type veth peer name " + b.ifname + mac(b));
  for (const VethEnd* e : {&a, &b}) {
    if (!e->netns.empty()) run_checked("ip link set " + e->ifname + " netns " + e->netns);
    if (!e->addr.empty())
      run_checked(in_netns(e->netns) + "addr add " + e->addr + " dev " + e->ifname);
    run_checked(in_netns(e->netns) + "link set " + e->ifname + " up");
  }
}

void TestNetns::remove_all() noexcept {
  try {
    // A namespace takes its veth ends with it, and a veth end takes its peer.
    for (const auto& n : netns_) run_shell("ip netns del " + n + " >/dev/null 2>&1");
    for (const auto& l : links_) run_shell("ip link del " + l + " >/dev/null 2>&1");
  } catch (...) {  // std::string allocation only; nothing to do about it in a destructor
  }
  netns_.clear();
  links_.clear();
}

void TestNetns::remove_leftovers(const std::string& prefix) {
  std::istringstream ns(run_shell("ip netns list 2>/dev/null").out);
  for (std::string line; std::getline(ns, line);) {
    const std::string n = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (pid_gone(pid_of(n, prefix))) run_shell("ip netns del " + n + " >/dev/null 2>&1");
  }
  // "7: name@peer: <...>" or "7: name: <...>"
  std::istringstream links(run_shell("ip -o link show 2>/dev/null").out);
  for (std::string line; std::getline(links, line);) {
    const size_t start = line.find(": ");
    if (start == std::string::npos) continue;
    const std::string rest = line.substr(start + 2);
    const std::string l = rest.substr(0, rest.find_first_of("@:"));
    if (pid_gone(pid_of(l, prefix))) run_shell("ip link del " + l + " >/dev/null 2>&1");
  }
}

}  // namespace dripgate::testing
