// GET /metrics over HTTP/1.1 for a process whose own loop owns the thread: the dataplane's main
// lcore (beside its control socket and signals) and dripgate-iat's `serve`. Not a web server: it
// answers GET and HEAD of /metrics with what `render` returns, 404 for another path, 405 for
// another method, 400 for a request it cannot read, one answer per connection (then closed).
// Never blocks: sockets are non-blocking, and one epoll descriptor (fd()) becomes readable when
// anything is ready, so the owner adds one descriptor to its poll() and calls serve() when it
// is. No client, or set of clients, can keep others out: a request head is at most 8 KiB, a
// connection that has not finished within idle_timeout is closed, and when every slot is taken
// a new connection replaces the oldest.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dripgate::common {

struct MetricsHttpOptions {
  using Clock = std::chrono::steady_clock;
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(10);
  size_t max_clients = 16;
  Clock::time_point (*now)() = Clock::now;
};

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;
  static constexpr size_t kMaxRequestHead = 8 * 1024;

  // Binds and listens on `listen` (host:port or [v6]:port; port 0 picks a free one); throws
  // std::runtime_error naming the address and why.
  MetricsHttp(const std::string& listen, Render render, MetricsHttpOptions options = {});
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // Readable when a connection waits or a client is ready.
  int fd() const { return epoll_fd_; }
  uint16_t port() const { return port_; }
  // Accepts, reads, answers and writes whatever is ready, then closes idle clients; returns at
  // once when nothing is.
  void serve();
  size_t clients() const { return clients_.size(); }

 private:
  struct Client {
    int fd = -1;
    MetricsHttpOptions::Clock::time_point since;
    std::string in, out;
    size_t sent = 0;
    bool answered = false;
  };
  void accept_clients();
  bool on_ready(Client& c, uint32_t events);  // false: close it
  void answer(Client& c);
  bool flush(Client& c);  // false: close it (done or failed)
  void close_client(size_t i);
  void watch(const Client& c);

  Render render_;
  MetricsHttpOptions options_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  uint16_t port_ = 0;
  std::vector<Client> clients_;
};

}  // namespace dripgate::common
