#include "control/http/http_server.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "control/http/worker.h"

namespace dripgate::control {
namespace {

using Clock = std::chrono::steady_clock;

// File descriptors the daemon needs besides its HTTP connections (Redis pools, the dataplane
// socket, the log, the listener per worker).
constexpr int kSpareFds = 64;
// A request line and headers larger than this get 431.
constexpr size_t kMaxHead = 16 * 1024;
// After an answer to a request that could not be read to its end (413, 431, 400), the rest the
// client sends is read and dropped for up to this long before the socket is closed: closing with
// unread bytes would reset the connection, and the client could lose the answer.
constexpr timeval kLinger{1, 0};
// Operations per io_uring submission: 256 reads of Worker::kBatchRead (4 KiB), 1 MiB per worker.
constexpr unsigned kBatch = 256;

int make_listener(const std::string& listen, int& port, std::string& error) {
  sockaddr_storage ss{};
  int len = sizeof ss;
  if (evutil_parse_sockaddr_port(listen.c_str(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    error = "listen: cannot parse address '" + listen + "' (want host:port or [v6]:port)";
    return -1;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("listen: socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), static_cast<socklen_t>(len)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    error = "listen: " + listen + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace

HttpServer::HttpServer(const ConfigStore& store, Metrics& metrics, ServerOptions opts,
                       ReloadThread* reloads)
    : store_(store), opts_(std::move(opts)), metrics_(metrics), reloads_(reloads) {}

HttpServer::~HttpServer() {
  stop();
  join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

bool HttpServer::start(std::string& error) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });

  const std::string& log_path = store_.current()->cfg.control.decision_log.path;
  if (!log_path.empty() && !(decisions_ = DecisionLogFile::open(log_path, error))) return false;
  listen_fd_ = make_listener(opts_.listen, port_, error);
  if (listen_fd_ < 0) return false;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(opts_.max_connections) + kSpareFds > files.rlim_cur)
    spdlog::warn(
        "control.max_connections {} is more than the open-file limit {} allows (less {} for "
        "Redis and the rest); connections beyond it wait while accept() backs off",
        opts_.max_connections, files.rlim_cur, kSpareFds);
  int n = std::max(1, opts_.threads);
  for (int i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->server = this;
    w->store = &store_;
    w->metrics = &metrics_;
    w->reloads = reloads_;
    w->tls = opts_.tls;
    w->status = opts_.status;
    w->index = i;
    // Split as evenly as it goes; a worker holds at least one.
    w->cap = std::max(1, opts_.max_connections / n + (i < opts_.max_connections % n ? 1 : 0));
    w->limits = {.max_head = kMaxHead, .max_body = opts_.max_body};
    // Each base has its own epoll set, so the per-worker dup of the listening socket is never in
    // the same set twice (which the changelist would not allow).
    w->base = new_front_loop();
    if (!w->base) {
      error = "cannot create an event loop";
      return false;
    }
    const timeval request_tv{opts_.request_timeout_s, 0};
    w->request_timeout = event_base_init_common_timeout(w->base, &request_tv);
    w->request_limit = std::chrono::seconds(opts_.request_timeout_s);
    w->linger_timeout = event_base_init_common_timeout(w->base, &kLinger);
    w->listen_fd = fcntl(listen_fd_, F_DUPFD_CLOEXEC, 0);
    if (w->listen_fd < 0) {
      error = std::string("dup: ") + std::strerror(errno);
      return false;
    }
    w->listen_ev =
        event_new(w->base, w->listen_fd, EV_READ | EV_PERSIST, &Worker::on_listen, w.get());
    if (!w->listen_ev || event_add(w->listen_ev, nullptr) != 0) {
      error = "cannot accept on " + opts_.listen;
      return false;
    }
    w->gateway = std::make_unique<Gateway>(store_, w->base, flows_, metrics_,
                                           opts_.dataplane_timeout_ms, decisions_.get(), "http",
                                           opts_.fallback, opts_.waits ? opts_.waits : &waits_);
    if (!w->inbox->open(w->base)) {
      error = "cannot create an event loop";
      return false;
    }
    w->stop_ev = event_new(w->base, -1, 0, &Worker::on_stop, w.get());
    w->drain_ev = event_new(w->base, -1, EV_PERSIST, &Worker::on_drain, w.get());
    w->resume_ev = evtimer_new(w->base, &Worker::on_resume, w.get());
    std::string why;
    if (opts_.io_uring) w->io = IoBatch::create(kBatch, why);
    if (w->io) {
      w->read_ev = event_new(w->base, -1, 0, &Worker::on_read_batch, w.get());
      w->send_ev = event_new(w->base, -1, 0, &Worker::on_send_batch, w.get());
      w->read_slots.resize(w->io->capacity() * Worker::kBatchRead);
      if (!w->read_ev || !w->send_ev) w->io.reset();
    }
    if (i == 0 && w->io)
      spdlog::info("HTTP: reads and answers in one io_uring submission per loop pass each");
    else if (i == 0)
      spdlog::info("HTTP: reads and answers with a system call each ({})",
                   opts_.io_uring ? why : "--no-io-uring");
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    threads_.emplace_back([this, wp = w.get()] { run_worker(wp); });
  }
  return true;
}

void HttpServer::run_worker(Worker* w) {
  event_base_dispatch(w->base);
  // A gateway (engine, dataplane client) belongs to this thread's loop: tear it down here.
  w->gateway.reset();
}

void HttpServer::accept_failed(int err) {
  metrics_.http_accept_error();
  std::lock_guard lock(accept_log_mu_);
  ++accept_errors_unlogged_;
  auto now = Clock::now();
  if (now - accept_logged_at_ < std::chrono::seconds(1)) return;
  spdlog::warn("accept: {} ({} since the last report); pausing accepts for {} ms",
               std::strerror(err), accept_errors_unlogged_, Worker::kAcceptBackoff.tv_usec / 1000);
  accept_logged_at_ = now;
  accept_errors_unlogged_ = 0;
}

void HttpServer::stop() {
  for (auto& w : workers_) {
    if (w->stop_ev) event_active(w->stop_ev, EV_TIMEOUT, 0);
  }
}

void HttpServer::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace dripgate::control
