// Test support for the dataplane integration tests: a dripgate-dataplane child process that is
// always reaped, a control-socket client, a scratch directory that is always removed.
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/netns.h"

namespace dripgate::testing {

// An IPv4 socket address from dotted text and a port, for the tests' UDP and TCP endpoints.
sockaddr_in addr(const char* ip, uint16_t port);

// build/dataplane/dripgate-dataplane, from the DG_DATAPLANE environment variable set by meson.
std::string dataplane_binary();

// EAL arguments every test uses: no hugepages, no PCI, a file prefix unique to this process.
std::vector<std::string> test_eal_args();

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A child process with stdout/stderr redirected to files; SIGKILLed and reaped by the
// destructor if it is still running.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& out, const std::string& err);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  pid_t pid() const { return pid_; }
  bool running();
  // SIGTERM, then wait up to `timeout`; returns the exit code, or -1 if it had to be killed, or
  // 128 + signal when a signal ended it.
  int terminate(std::chrono::milliseconds timeout);
  // Waits for the process to end by itself; -1 on timeout (still running).
  int wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// The appliance as deployed, in namespaces: client ns <-veth-> [net_af_packet0 dataplane
// net_af_packet1] <-veth-> server ns. Each namespace is joined to the root namespace by a veth
// pair whose root end the dataplane opens with net_af_packet; the client's end gets client_ip/24,
// the server's server_ip/24. Sides are 'c' (client) and 's' (server). Removed on destruction.
class ApplianceTopology {
 public:
  // prefix: TestNetns prefix, unique per test (names also carry the pid).
  ApplianceTopology(const std::string& prefix, const std::string& client_ip,
                    const std::string& server_ip);
  std::string ns(char side) const { return net_.name(std::string(1, side)); }
  std::string root_if(char side) const { return net_.name(std::string(1, side) + "r"); }
  std::string ns_if(char side) const { return net_.name(std::string(1, side) + "n"); }
  // Sets the MTU of all four veth ends.
  void set_mtu(unsigned mtu) const;
  // test_eal_args() plus the vdevs: port 0 on the client's root end, port 1 on the server's,
  // their ring slots large enough for frames of `mtu`.
  std::vector<std::string> eal_args(unsigned mtu = 1500) const;
  // The `dataplane:` YAML section the appliance tests run: eal_args(mtu), dataplane.mtu,
  // classes gold (weight 4) and default (weight 1), unshaped classes under a 50 kpps port,
  // control socket `sock`.
  std::string dataplane_yaml(const std::string& sock, unsigned mtu = 1500) const;

 private:
  TestNetns net_;
};

// One connection to the dataplane's control socket.
class ControlClient {
 public:
  // Retries until the socket accepts or the timeout passes (throws then).
  ControlClient(const std::string& path, std::chrono::milliseconds timeout);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  // Sends one line and reads one answer line.
  std::string call_raw(const std::string& line);
  nlohmann::json call(const nlohmann::json& req);

 private:
  int fd_ = -1;
  std::string buf_;
};

// Every way a received client frame can end, from the final stats: sent (shaped or passed)
// or dropped by one cause. Equal to rx.client when nothing is lost (and nothing is queued).
uint64_t accounted(const nlohmann::json& fin);

// The last line of a file that parses as a JSON object (the dataplane's final stats).
nlohmann::json last_json_line(const std::string& path);
std::string read_file(const std::string& path);
// Runs a shell command, returns its stdout.
std::string run_command(const std::string& cmd);

}  // namespace dripgate::testing
