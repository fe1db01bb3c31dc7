#include "common/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "common/address.h"

namespace dripgate::common {
namespace {

constexpr uint64_t kListenKey = ~uint64_t{0};

std::string response(int status, std::string_view reason, std::string_view type,
                     const std::string& body, bool head, std::string_view extra = {}) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                  "\r\nContent-Type: " + std::string(type) +
                  "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                  std::string(extra) + "Connection: close\r\n\r\n";
  if (!head) r += body;
  return r;
}

std::string plain(int status, std::string_view reason, std::string_view body,
                  std::string_view extra = {}) {
  return response(status, reason, "text/plain; charset=utf-8", std::string(body) + "\n", false,
                  extra);
}

int listen_on(const std::string& listen, uint16_t& port_out) {
  std::string host;
  std::optional<int> port;
  if (auto why = split_host_port(listen, true, host, port))
    throw std::runtime_error("metrics listen address '" + listen + "': " + *why);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(*port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res))
    throw std::runtime_error("metrics listen address '" + listen + "': " + gai_strerror(rc));
  int fd = -1, err = 0;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    throw std::runtime_error("metrics listen address '" + listen + "': " + std::strerror(err));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_out = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

}  // namespace

MetricsHttp::MetricsHttp(const std::string& listen, Render render, MetricsHttpOptions options)
    : render_(std::move(render)), options_(options) {
  listen_fd_ = listen_on(listen, port_);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenKey;
  if (epoll_fd_ < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) {
    const int err = errno;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    ::close(listen_fd_);
    throw std::runtime_error(std::string("metrics listener: epoll: ") + std::strerror(err));
  }
}

MetricsHttp::~MetricsHttp() {
  for (const Client& c : clients_) ::close(c.fd);
  ::close(epoll_fd_);
  ::close(listen_fd_);
}

void MetricsHttp::watch(const Client& c) {
  epoll_event ev{};
  ev.events = c.answered ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = static_cast<uint64_t>(c.fd);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void MetricsHttp::close_client(size_t i) {
  ::close(clients_[i].fd);  // also leaves the epoll set
  clients_.erase(clients_.begin() + static_cast<ptrdiff_t>(i));
}

void MetricsHttp::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or an error of that one connection
    if (clients_.size() >= options_.max_clients) close_client(0);  // the oldest
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = static_cast<uint64_t>(fd);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    clients_.push_back(Client{fd, options_.now(), {}, {}, 0, false});
  }
}

void MetricsHttp::answer(Client& c) {
  c.answered = true;
  const std::string_view head(c.in);
  const size_t eol = head.find_first_of("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    c.out = plain(400, "Bad Request", "bad request line (expected: GET /metrics HTTP/1.1)");
    return;
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (target != "/metrics") {
    c.out = plain(404, "Not Found", "not found: only /metrics is served here");
  } else if (method != "GET" && method != "HEAD") {
    c.out = plain(405, "Method Not Allowed", "method not allowed: GET or HEAD /metrics",
                  "Allow: GET, HEAD\r\n");
  } else {
    c.out = response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(),
                     method == "HEAD");
  }
}

bool MetricsHttp::flush(Client& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<size_t>(n);
  }
  return false;  // all sent: the connection is done
}

bool MetricsHttp::on_ready(Client& c, uint32_t events) {
  if (c.answered) return flush(c);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) return false;  // closed before a whole request
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    c.in.append(buf, static_cast<size_t>(n));
    const bool whole =
        c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos;
    if (whole || c.in.size() > kMaxRequestHead) {
      if (whole)
        answer(c);
      else {
        c.answered = true;
        c.out = plain(431, "Request Header Fields Too Large", "request head over 8 KiB");
      }
      watch(c);
      return flush(c);
    }
  }
  return (events & (EPOLLHUP | EPOLLERR)) == 0;
}

void MetricsHttp::serve() {
  epoll_event evs[32];
  const int n = ::epoll_wait(epoll_fd_, evs, 32, 0);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 == kListenKey) {
      accept_clients();
      continue;
    }
    const int fd = static_cast<int>(evs[i].data.u64);
    auto it = std::find_if(clients_.begin(), clients_.end(),
                           [fd](const Client& c) { return c.fd == fd; });
    if (it == clients_.end()) continue;  // closed earlier in this round
    if (!on_ready(*it, evs[i].events)) close_client(static_cast<size_t>(it - clients_.begin()));
  }
  const auto now = options_.now();
  for (size_t i = clients_.size(); i-- > 0;)
    if (now - clients_[i].since >= options_.idle_timeout) close_client(i);
}

}  // namespace dripgate::common
