#include "tests/metrics_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace dripgate::testing {

namespace {

// Sends all of s unless the peer goes or the server stops; false then.
bool send_all(int fd, const std::string& s, const std::atomic<bool>& stop) {
  for (size_t sent = 0; sent < s.size();) {
    if (stop.load()) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

MetricsServer::MetricsServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  acceptor_.join();
  for (auto& t : conns_) t.join();
  ::close(listen_fd_);
}

std::string MetricsServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void MetricsServer::set_body(std::string body) {
  std::lock_guard lock(mu_);
  body_ = std::move(body);
}

std::string MetricsServer::last_target() {
  std::lock_guard lock(mu_);
  return last_target_;
}

void MetricsServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    conns_.emplace_back([this, fd] {
      serve(fd);
      ::close(fd);
    });
  }
}

void MetricsServer::serve(int fd) {
  std::string in;
  char buf[4096];
  while (in.find("\r\n\r\n") == std::string::npos) {
    if (stop_) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    in.append(buf, static_cast<size_t>(n));
  }
  std::string body;
  {
    std::lock_guard lock(mu_);
    size_t sp = in.find(' ');
    last_target_ = in.substr(sp + 1, in.find(' ', sp + 1) - sp - 1);
    body = body_;
  }
  ++requests_;
  switch (mode_.load()) {
    case Mode::kServe:
      send_all(fd,
               "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body,
               stop_);
      return;
    case Mode::kSilent:
      while (!stop_ && ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) != 0) ::usleep(20000);
      return;
    case Mode::kEndless: {
      if (!send_all(fd, "HTTP/1.0 200 OK\r\n\r\n", stop_)) return;
      const std::string lines(64 << 10, '\n');
      while (send_all(fd, lines, stop_)) {
      }
      return;
    }
    case Mode::kStatus500:
      send_all(fd, "HTTP/1.0 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno", stop_);
      return;
    case Mode::kChunked: {
      std::string half = body.substr(0, body.size() / 2), rest = body.substr(body.size() / 2);
      auto hex = [](size_t n) {
        char b[32];
        std::snprintf(b, sizeof b, "%zx", n);
        return std::string(b);
      };
      send_all(fd,
               "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + hex(half.size()) +
                   ";x=y\r\n" + half + "\r\n" + hex(rest.size()) + "\r\n" + rest + "\r\n0\r\n\r\n",
               stop_);
      return;
    }
    case Mode::kRaw:
      send_all(fd, body, stop_);
      return;
    case Mode::kHugeLength:
      send_all(fd, "HTTP/1.0 200 OK\r\nContent-Length: 100000000000\r\n\r\nm 1\n", stop_);
      return;
  }
}

}  // namespace dripgate::testing
