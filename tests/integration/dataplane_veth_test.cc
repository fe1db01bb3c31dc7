// dripgate-dataplane as a real bump in the wire: client netns <-veth-> [net_af_packet0
// dripgate-dataplane net_af_packet1] <-veth-> server netns. Ping and a TCP transfer cross it;
// a flow tagged over the control socket is counted in its class. Also exercises the control
// protocol's error answers with several clients connected, and jumbo frames both ways. Namespaces
// and links come from tests/netns.h: the pid in their names, always removed (leftovers of dead runs
// too).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/integration/dp_harness.h"
#include "tests/netns.h"

namespace dripgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kClientIp = "10.199.0.1";
constexpr const char* kServerIp = "10.199.0.2";
constexpr uint16_t kClientPort = 40123;
constexpr uint16_t kServerPort = 5001;
constexpr size_t kTransfer = 2 << 20;

int sh(const std::string& cmd) {
  return run_shell(cmd + " >/dev/null 2>&1").status;
}

bool wait_fd(int fd, short ev, int ms) {
  pollfd p{fd, ev, 0};
  return ::poll(&p, 1, ms) == 1;
}

// The tested flow, from the client's port to the server's, as the control socket names it.
json test_flow(const char* proto) {
  return {{"src", kClientIp},
          {"sport", kClientPort},
          {"dst", kServerIp},
          {"dport", kServerPort},
          {"proto", proto}};
}

// Server: accepts one connection, counts bytes to EOF, answers the count (8 bytes).
void serve(bool entered, std::atomic<int>& ready, std::atomic<uint64_t>& got) {
  if (!entered) {
    ready = -1;
    return;
  }
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = addr(kServerIp, kServerPort);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(s, 1) != 0) {
    ready = -1;
    ::close(s);
    return;
  }
  ready = 1;
  if (!wait_fd(s, POLLIN, 30000)) {
    ::close(s);
    return;
  }
  int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(s);
  if (c < 0) return;
  uint64_t n = 0;
  char buf[65536];
  while (wait_fd(c, POLLIN, 20000)) {
    ssize_t r = ::recv(c, buf, sizeof(buf), 0);
    if (r <= 0) break;
    n += static_cast<uint64_t>(r);
  }
  got = n;
  [[maybe_unused]] ssize_t w = ::send(c, &n, sizeof(n), MSG_NOSIGNAL);
  ::close(c);
}

// Client: connects from the tagged source port, sends kTransfer bytes, reads the count back.
void transfer(bool entered, std::string& error, uint64_t& acked) {
  if (!entered) {
    error = "cannot enter the client namespace";
    return;
  }
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in local = addr(kClientIp, kClientPort), remote = addr(kServerIp, kServerPort);
  if (::bind(s, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    error = "bind failed";
    ::close(s);
    return;
  }
  timeval tv{20, 0};
  ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(s, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    error = std::string("connect failed: ") + std::strerror(errno);
    ::close(s);
    return;
  }
  std::vector<char> data(kTransfer, 'x');
  for (size_t off = 0; off < data.size();) {
    ssize_t w = ::send(s, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (w <= 0) {
      error = std::string("send failed: ") + std::strerror(errno);
      ::close(s);
      return;
    }
    off += static_cast<size_t>(w);
  }
  ::shutdown(s, SHUT_WR);
  uint64_t n = 0;
  if (::recv(s, &n, sizeof(n), MSG_WAITALL) != sizeof(n)) error = "no byte count from the server";
  acked = n;
  ::close(s);
}

TEST(DataplaneVeth, PingAndTcpCrossTheApplianceAndTaggedFlowIsCounted) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  ApplianceTopology topo("dgdp", kClientIp, kServerIp);
  TempDir dir;
  const std::string sock = dir.file("dp.sock");
  {
    std::ofstream y(dir.file("dp.yaml"));
    y << topo.dataplane_yaml(sock);
  }
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml")}, dir.file("stdout"),
             dir.file("stderr"));
  ControlClient cc(sock, 30s);
  ControlClient other(sock, 5s);  // a second client at the same time

  // The protocol answers errors, never crashes.
  json a = json::parse(other.call_raw("{not json"));
  EXPECT_FALSE(a.at("ok").get<bool>());
  a = other.call({{"op", "fly"}});
  EXPECT_FALSE(a.at("ok").get<bool>());
  EXPECT_NE(a.at("error").get<std::string>().find("unknown"), std::string::npos) << a.dump();
  a = other.call(
      {{"op", "tag"},
       {"class", "platinum"},
       {"flow",
        {{"src", kClientIp}, {"sport", 1}, {"dst", kServerIp}, {"dport", 2}, {"proto", "tcp"}}}});
  EXPECT_FALSE(a.at("ok").get<bool>());
  EXPECT_NE(a.at("error").get<std::string>().find("platinum"), std::string::npos) << a.dump();
  a = other.call({{"op", "tag"},
                  {"class", "gold"},
                  {"flow", {{"src", "10.1.1.300"}, {"dst", kServerIp}, {"proto", 6}}}});
  EXPECT_FALSE(a.at("ok").get<bool>());
  EXPECT_NE(a.at("error").get<std::string>().find("flow.src"), std::string::npos) << a.dump();
  a = other.call({{"op", "set_rate"}, {"class", "gold"}, {"rate_pps", -5}});
  EXPECT_FALSE(a.at("ok").get<bool>());

  // Ping crosses (ARP passes unshaped, ICMP is shaped in `default`, replies come back).
  ASSERT_EQ(sh(fmt::format("ip netns exec {} ping -c 3 -i 0.2 -W 3 {}", topo.ns('c'), kServerIp)),
            0)
      << read_file(dir.file("stderr"));

  // Tag the transfer's flow as gold, then move the data.
  a = cc.call({{"op", "tag"}, {"class", "gold"}, {"ttl_s", 300}, {"flow", test_flow("tcp")}});
  ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
  std::atomic<int> ready{0};
  std::atomic<uint64_t> got{0};
  std::thread server = thread_in_netns(topo.ns('s'), [&](bool ok) { serve(ok, ready, got); });
  while (ready == 0) std::this_thread::sleep_for(10ms);
  std::string error;
  uint64_t acked = 0;
  if (ready == 1) {
    std::thread client =
        thread_in_netns(topo.ns('c'), [&](bool ok) { transfer(ok, error, acked); });
    client.join();
  }
  server.join();
  ASSERT_EQ(ready.load(), 1) << "server could not listen";
  EXPECT_EQ(error, "");
  EXPECT_EQ(got.load(), kTransfer);
  EXPECT_EQ(acked, kTransfer);

  a = cc.call({{"op", "stats"}});
  ASSERT_TRUE(a.at("ok").get<bool>());
  const json& st = a.at("stats");
  EXPECT_EQ(st.at("flows").get<int>(), 1);
  // At least one full-size segment per 1448 bytes went through the gold class; the pings and
  // the handshake of nothing else went to default.
  EXPECT_GE(st.at("classes").at("gold").at("tx_pkts").get<uint64_t>(), kTransfer / 1500);
  EXPECT_GE(st.at("classes").at("default").at("tx_pkts").get<uint64_t>(), 3u);
  EXPECT_GT(st.at("tx").at("reverse").get<uint64_t>(), 0u);
  EXPECT_GT(st.at("tx").at("pass_non_ip").get<uint64_t>(), 0u);  // ARP

  a = cc.call({{"op", "untag"}, {"flow", test_flow("tcp")}});
  EXPECT_TRUE(a.at("removed").get<bool>()) << a.dump();

  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object());
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  EXPECT_EQ(fin.at("flows").get<int>(), 0);
}

// ---- jumbo frames ----

constexpr unsigned kJumboMtu = 9000;
constexpr size_t kJumboPayload = kJumboMtu - 20 - 8;  // one 9000-byte IP packet a datagram
constexpr int kJumboDatagrams = 20;

// Datagram k's bytes: its number, then a pattern that differs at every offset and datagram.
std::vector<uint8_t> jumbo_payload(int k) {
  std::vector<uint8_t> p(kJumboPayload);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + (i >> 8) + k * 31);
  std::memcpy(p.data(), &k, sizeof(k));
  return p;
}

// A UDP socket on ip:port that never fragments (DF on every datagram, EMSGSIZE above the
// path MTU instead): a datagram received whole then crossed as one frame. -1 on failure.
int jumbo_socket(const char* ip, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int df = IP_PMTUDISC_DO;
  timeval tv{5, 0};
  sockaddr_in a = addr(ip, port);
  if (s < 0 || ::setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof(df)) != 0 ||
      ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (s >= 0) ::close(s);
    return -1;
  }
  return s;
}

// Receives one datagram and checks it is datagram k, whole and intact; "" when it is.
std::string expect_jumbo(int s, int k, sockaddr_in* from) {
  std::vector<uint8_t> buf(kJumboPayload + 1);
  socklen_t fl = sizeof(*from);
  const ssize_t r =
      ::recvfrom(s, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(from), &fl);
  if (r < 0) return fmt::format("datagram {}: nothing received ({})", k, std::strerror(errno));
  if (static_cast<size_t>(r) != kJumboPayload)
    return fmt::format("datagram {}: {} bytes instead of {}", k, r, kJumboPayload);
  buf.resize(kJumboPayload);
  if (buf != jumbo_payload(k)) return fmt::format("datagram {}: content changed", k);
  return "";
}

// The server: echoes each datagram back to its sender once it has checked it.
void jumbo_echo(bool entered, std::atomic<int>& ready, std::string& error) {
  const int s = entered ? jumbo_socket(kServerIp, kServerPort) : -1;
  ready = s < 0 ? -1 : 1;
  if (s < 0) return;
  for (int k = 0; k < kJumboDatagrams && error.empty(); ++k) {
    sockaddr_in from{};
    error = expect_jumbo(s, k, &from);
    if (error.empty() &&
        ::sendto(s, jumbo_payload(k).data(), kJumboPayload, 0, reinterpret_cast<sockaddr*>(&from),
                 sizeof(from)) != static_cast<ssize_t>(kJumboPayload))
      error = fmt::format("echo {}: {}", k, std::strerror(errno));
  }
  ::close(s);
}

// The client: sends each datagram and waits for its echo, one at a time.
void jumbo_client(bool entered, std::string& error) {
  const int s = entered ? jumbo_socket(kClientIp, kClientPort) : -1;
  if (s < 0) {
    error = "no client socket";
    return;
  }
  const sockaddr_in server = addr(kServerIp, kServerPort);
  for (int k = 0; k < kJumboDatagrams && error.empty(); ++k) {
    if (::sendto(s, jumbo_payload(k).data(), kJumboPayload, 0,
                 reinterpret_cast<const sockaddr*>(&server),
                 sizeof(server)) != static_cast<ssize_t>(kJumboPayload)) {
      error = fmt::format("send {}: {}", k, std::strerror(errno));
      break;
    }
    sockaddr_in from{};
    error = expect_jumbo(s, k, &from);
  }
  ::close(s);
}

// With every veth end and dataplane.mtu at 9000, 9000-byte IP packets (9014-byte frames) cross
// the appliance both ways: UDP datagrams that may not fragment go client -> server, shaped in
// the class their flow is tagged with, and come back server -> client on the reverse path, each
// whole and with its content unchanged.
TEST(DataplaneVeth, JumboFramesCrossBothWaysIntact) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  ApplianceTopology topo("dgjb", kClientIp, kServerIp);
  topo.set_mtu(kJumboMtu);
  TempDir dir;
  const std::string sock = dir.file("dp.sock");
  {
    std::ofstream y(dir.file("dp.yaml"));
    y << topo.dataplane_yaml(sock, kJumboMtu);
  }
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml")}, dir.file("stdout"),
             dir.file("stderr"));
  ControlClient cc(sock, 30s);
  // Neighbours resolved both ways first (ARP passes unshaped).
  ASSERT_EQ(sh(fmt::format("ip netns exec {} ping -c 2 -i 0.2 -W 3 {}", topo.ns('c'), kServerIp)),
            0)
      << read_file(dir.file("stderr"));
  // The datagrams' flow is tagged gold, as an admission would tag it.
  json a = cc.call({{"op", "tag"}, {"class", "gold"}, {"ttl_s", 300}, {"flow", test_flow("udp")}});
  ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
  a = cc.call({{"op", "stats"}});
  ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
  const uint64_t bytes_before =
      a.at("stats").at("classes").at("gold").at("tx_bytes").get<uint64_t>();
  const uint64_t reverse_before = a.at("stats").at("tx").at("reverse").get<uint64_t>();

  std::atomic<int> ready{0};
  std::string server_error, client_error;
  std::thread server =
      thread_in_netns(topo.ns('s'), [&](bool ok) { jumbo_echo(ok, ready, server_error); });
  while (ready == 0) std::this_thread::sleep_for(10ms);
  if (ready == 1) {
    std::thread client =
        thread_in_netns(topo.ns('c'), [&](bool ok) { jumbo_client(ok, client_error); });
    client.join();
  }
  server.join();
  ASSERT_EQ(ready.load(), 1) << "server socket";
  EXPECT_EQ(server_error, "") << read_file(dir.file("stderr"));
  EXPECT_EQ(client_error, "") << read_file(dir.file("stderr"));

  a = cc.call({{"op", "stats"}});
  ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
  const json& st = a.at("stats");
  // Each datagram left the shaper as one 9014-byte frame of its flow's class, and came back
  // on the reverse path.
  EXPECT_GE(st.at("classes").at("gold").at("tx_bytes").get<uint64_t>() - bytes_before,
            uint64_t{kJumboDatagrams} * (kJumboMtu + 14));
  EXPECT_GE(st.at("tx").at("reverse").get<uint64_t>() - reverse_before, uint64_t{kJumboDatagrams});
  EXPECT_EQ(st.at("drops").at("malformed").get<uint64_t>(), 0u) << st.dump();
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object());
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
}

}  // namespace
}  // namespace dripgate::testing
