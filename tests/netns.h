// Network namespaces and veth pairs for tests, made with `ip` and always removed: by the
// destructor, and (for runs that were killed before it ran) by the next run with the same prefix,
// which removes whatever carries the prefix and the pid of a process that no longer exists.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dripgate::testing {

struct CommandResult {
  int status = -1;  // exit code; -1 when the shell could not run or a signal ended the command
  std::string out;  // stdout (append " 2>&1" to the command for stderr too)
};

// Runs `cmd` with /bin/sh.
CommandResult run_shell(const std::string& cmd);
// Runs `cmd` (stderr captured too); throws std::runtime_error with the command and its output
// when it exits non-zero.
std::string run_checked(const std::string& cmd);

// Starts a thread that enters network namespace `ns` (ip netns, /run/netns/ns) and then runs
// fn(entered); entered is false when setns failed. A thread, because setns changes only the
// calling thread's namespace and the test's own thread must stay in the root namespace.
std::thread thread_in_netns(const std::string& ns, std::function<void(bool entered)> fn);
// Runs fn on a thread inside `ns` and waits for it; false (and fn not run) if setns failed.
bool run_in_netns(const std::string& ns, const std::function<void()>& fn);

// One end of a veth pair.
struct VethEnd {
  std::string netns;   // the namespace to move it into; empty: stays in the root namespace
  std::string ifname;  // at most 15 characters (IFNAMSIZ)
  std::string addr;    // "10.0.0.1/24"; empty: no address
  std::string mac;     // "02:00:00:00:00:01"; empty: the kernel picks one
};

// Owns the namespaces and veth pairs it creates. Names are prefix + pid + tag: the prefix tells
// this test's objects from other tests' (keep it short: interface names have 15 characters),
// the pid tells this run's from a dead run's.
class TestNetns {
 public:
  // Removes leftovers of dead runs with this prefix. The prefix must not end in a digit.
  explicit TestNetns(std::string prefix);
  ~TestNetns();
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  // prefix + pid + tag; the tag must not start with a digit (it would read as part of the pid).
  std::string name(const std::string& tag) const;

  // Creates the namespace name(tag) with its loopback up; returns its name.
  std::string add_netns(const std::string& tag);

  // Creates a veth pair, moves each end into its namespace, gives it its address and MAC and
  // brings it up.
  void add_veth(const VethEnd& a, const VethEnd& b);

  // Removes namespaces and root-namespace links named prefix + pid + ... whose pid is gone.
  static void remove_leftovers(const std::string& prefix);

 private:
  void remove_all() noexcept;

  std::string prefix_;
  std::string id_;
  std::vector<std::string> netns_;
  std::vector<std::string> links_;  // veth ends that may still be in the root namespace
};

}  // namespace dripgate::testing
