// The /metrics listener on a real loopback socket, driven by the test's own loop as the daemons
// drive it: answers, refusals that say why, a client that sends too much or stays too long, and
// a full house that still lets a newcomer in. No timing: the idle clock is injected.
#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace dripgate::common {
namespace {

using Clock = MetricsHttpOptions::Clock;
Clock::time_point g_now{};
Clock::time_point fake_now() {
  return g_now;
}

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Serves until the client's connection is closed by the server (reads to EOF); what it read.
std::string exchange(MetricsHttp& m, int fd, const std::string& request) {
  if (!request.empty()) {
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), ssize_t(request.size()));
  }
  std::string got;
  for (int round = 0; round < 1000; ++round) {
    pollfd p{m.fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    m.serve();
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) got.append(buf, size_t(n));
    if (n == 0) break;
  }
  ::close(fd);
  return got;
}

TEST(MetricsHttp, AnswersGetAndHeadOfMetricsAndRefusesTheRest) {
  int renders = 0;
  MetricsHttp m("127.0.0.1:0", [&] {
    ++renders;
    return std::string("up 1\n");
  });
  ASSERT_GT(m.port(), 0);
  std::string r = exchange(m, connect_to(m.port()), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  EXPECT_NE(r.find("Content-Length: 5\r\n"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nup 1\n")) << r;
  r = exchange(m, connect_to(m.port()), "HEAD /metrics?x=1 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\n")) << r;
  r = exchange(m, connect_to(m.port()), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("only /metrics"), std::string::npos) << r;
  r = exchange(m, connect_to(m.port()), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos) << r;
  r = exchange(m, connect_to(m.port()), "hello\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;
  r = exchange(m, connect_to(m.port()), "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a'));
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r.substr(0, 100);
  EXPECT_EQ(renders, 2);
  EXPECT_EQ(m.clients(), 0u);
}

TEST(MetricsHttp, IdleClientsAreClosedAndANewcomerReplacesTheOldest) {
  MetricsHttpOptions o;
  o.now = fake_now;
  o.max_clients = 2;
  o.idle_timeout = std::chrono::seconds(10);
  MetricsHttp m(
      "127.0.0.1:0", [] { return std::string("x 1\n"); }, o);
  const int a = connect_to(m.port()), b = connect_to(m.port());
  for (int i = 0; i < 100 && m.clients() < 2; ++i) {
    ::usleep(1000);
    m.serve();
  }
  ASSERT_EQ(m.clients(), 2u);
  // A third while both slots are taken by silent clients: it is answered, the oldest goes.
  std::string r = exchange(m, connect_to(m.port()), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  char c;
  EXPECT_EQ(::recv(a, &c, 1, 0), 0) << "the oldest was closed";
  EXPECT_EQ(m.clients(), 1u);
  g_now += std::chrono::seconds(11);
  m.serve();
  EXPECT_EQ(m.clients(), 0u);
  EXPECT_EQ(::recv(b, &c, 1, 0), 0) << "the idle one was closed";
  ::close(a);
  ::close(b);
}

TEST(MetricsHttp, BadListenAddressesSayWhy) {
  auto error = [](const std::string& listen) {
    try {
      MetricsHttp m(listen, [] { return std::string(); });
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("127.0.0.1"), "metrics listen address '127.0.0.1': missing ':port'");
  MetricsHttp taken("127.0.0.1:0", [] { return std::string(); });
  const std::string addr = "127.0.0.1:" + std::to_string(taken.port());
  EXPECT_EQ(error(addr), "metrics listen address '" + addr + "': Address already in use");
}

}  // namespace
}  // namespace dripgate::common
