#include "tests/integration/dp_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace dripgate::testing {

sockaddr_in addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

std::string dataplane_binary() {
  const char* p = std::getenv("DG_DATAPLANE");
  if (p == nullptr || *p == '\0')
    throw std::runtime_error("DG_DATAPLANE is not set (run the test through meson test)");
  return p;
}

std::vector<std::string> test_eal_args() {
  return {"-l", "0-1", "--no-huge", "--no-shconf",
          "-m", "512", "--no-pci",  "--file-prefix=dg" + std::to_string(::getpid())};
}

ApplianceTopology::ApplianceTopology(const std::string& prefix, const std::string& client_ip,
                                     const std::string& server_ip)
    : net_(prefix) {
  for (char side : {'c', 's'}) {
    const std::string n = net_.add_netns(std::string(1, side));
    const std::string r = root_if(side), i = ns_if(side);
    net_.add_veth({"", r, "", ""}, {n, i, (side == 'c' ? client_ip : server_ip) + "/24", ""});
    // The dataplane forwards frames as they are: no segmentation or checksum offload may
    // leave a frame larger than the MTU or with a checksum still to fill in.
    run_checked(fmt::format("ip netns exec {} ethtool -K {} tx off tso off gso off gro off", n, i));
    run_shell(fmt::format("ethtool -K {} tx off tso off gso off gro off >/dev/null 2>&1", r));
    // No IPv6 chatter from the root side.
    run_shell(fmt::format("sysctl -w net.ipv6.conf.{}.disable_ipv6=1 >/dev/null 2>&1", r));
  }
}

void ApplianceTopology::set_mtu(unsigned mtu) const {
  for (char side : {'c', 's'}) {
    run_checked(fmt::format("ip link set {} mtu {}", root_if(side), mtu));
    run_checked(fmt::format("ip -n {} link set {} mtu {}", ns(side), ns_if(side), mtu));
  }
}

std::vector<std::string> ApplianceTopology::eal_args(unsigned mtu) const {
  std::vector<std::string> eal = test_eal_args();
  // net_af_packet's ring slots hold frames up to framesz - 66 B (default 2048); a block is a
  // whole number of slots and of pages.
  std::string ring;
  if (mtu > 1500) {
    const unsigned framesz = (mtu + 84 + 1023) / 1024 * 1024;
    ring = fmt::format(",framesz={},blocksz={}", framesz, std::lcm(framesz, 4096u));
  }
  eal.push_back("--vdev=net_af_packet0,iface=" + root_if('c') + ring);
  eal.push_back("--vdev=net_af_packet1,iface=" + root_if('s') + ring);
  return eal;
}

std::string ApplianceTopology::dataplane_yaml(const std::string& sock, unsigned mtu) const {
  return "dataplane:\n"
         "  eal: " +
         nlohmann::json(eal_args(mtu)).dump() +
         "\n"
         "  ports: { client: 0, cluster: 1 }\n"
         "  lcores: { rx: 1, drip: 1 }\n"
         "  mbufs: 8191\n"
         "  mtu: " +
         std::to_string(mtu) +
         "\n"
         "  drip: { rate_pps: 50000, rate_bps: 0, batch: 1, max_catchup: 64 }\n"
         "  classes:\n"
         "    gold:    { weight: 4, rate_pps: 0, queue_depth: 4096, ttl_ms: 2000 }\n"
         "    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 2000 }\n"
         "  unknown_flows: default\n"
         "  control_socket: " +
         sock + "\n";
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "dgtest.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (std::getenv("DG_KEEP_TMP") == nullptr) std::filesystem::remove_all(path_, ec);
}

Process::Process(const std::vector<std::string>& argv, const std::string& out,
                 const std::string& err) {
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) ::dup2(o, 1);
    if (e >= 0) ::dup2(e, 2);
    // The child must not inherit a blocked SIGTERM from the test runner.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
}

Process::~Process() {
  if (pid_ > 0 && running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

bool Process::running() {
  if (pid_ <= 0 || status_ != -1) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return false;
  }
  return r == 0;
}

int Process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

int Process::terminate(std::chrono::milliseconds timeout) {
  if (running()) ::kill(pid_, SIGTERM);
  int rc = wait(timeout);
  if (rc == -1 && running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    return -1;
  }
  return rc;
}

ControlClient::ControlClient(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return;
    ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("cannot connect to control socket " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

ControlClient::~ControlClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ControlClient::call_raw(const std::string& line) {
  std::string out = line + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd_, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("control socket send failed");
    off += static_cast<size_t>(n);
  }
  for (;;) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string ans = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return ans;
    }
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) throw std::runtime_error("control socket closed");
    buf_.append(tmp, static_cast<size_t>(n));
  }
}

nlohmann::json ControlClient::call(const nlohmann::json& req) {
  return nlohmann::json::parse(call_raw(req.dump()));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string run_command(const std::string& cmd) {
  return run_shell(cmd).out;
}

uint64_t accounted(const nlohmann::json& fin) {
  const nlohmann::json& d = fin.at("drops");
  const nlohmann::json& tx = fin.at("tx");
  uint64_t n = tx.at("shaped").get<uint64_t>() + tx.at("pass_non_ip").get<uint64_t>() +
               tx.at("pass_unknown").get<uint64_t>() + fin.at("queue_len").get<uint64_t>();
  for (const char* cause : {"malformed", "depth", "ttl", "tx_full", "shutdown", "unknown", "ring"})
    n += d.at(cause).get<uint64_t>();
  return n;
}

nlohmann::json last_json_line(const std::string& path) {
  std::istringstream in(read_file(path));
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) last = std::move(j);
  }
  return last;
}

}  // namespace dripgate::testing
