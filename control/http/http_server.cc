#include "control/http/http_server.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/id.h"
#include "common/json_writer.h"
#include "control/gateway/gateway.h"
#include "control/http/api.h"
#include "control/http/http_request.h"
#include "control/http/io_batch.h"
#include "control/registry/brake_sync.h"
#include "control/registry/reload.h"
#include "control/registry/tenant_registry.h"

namespace dripgate::control {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a stopping worker waits for requests in flight (each bounded by the Redis timeout).
constexpr std::chrono::seconds kDrainLimit{10};
// How long a worker stops accepting after accept() failed (out of file descriptors, mostly): the
// connection waits in the backlog, and retrying at once would spin on it.
constexpr timeval kAcceptBackoff{0, 100 * 1000};
// File descriptors the daemon needs besides its HTTP connections (Redis pools, the dataplane
// socket, the log, the listener per worker).
constexpr int kSpareFds = 64;
// A request line and headers larger than this get 431.
constexpr size_t kMaxHead = 16 * 1024;
// After an answer to a request that could not be read to its end (413, 431, 400), the rest the
// client sends is read and dropped for up to this long before the socket is closed: closing with
// unread bytes would reset the connection, and the client could lose the answer.
constexpr timeval kLinger{1, 0};
// Connections accepted per wakeup at most, so that one worker's burst of accepts does not hold
// up the requests of its open connections.
constexpr int kAcceptBatch = 32;
// What one read() takes at most (a worker's buffer, shared by its connections).
constexpr size_t kReadChunk = 64 * 1024;
// Operations per io_uring submission, and what a batched read takes of a connection at once (an
// admission request is a few hundred bytes; a larger one takes several passes, each read at
// once as the socket stays readable): 256 x 4 KiB = 1 MiB per worker.
constexpr unsigned kBatch = 256;
constexpr size_t kBatchRead = 4096;

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

// The tenant registry's list: at most this many tenants a page (100 when the client says none).
constexpr size_t kMaxPage = 1000;
constexpr size_t kDefaultPage = 100;

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

struct HttpServer::Worker {
  struct Conn;
  // Idle connections, longest idle first (each joins at the back when it becomes idle), linked
  // through the connections themselves: joining and leaving on every request allocates nothing.
  struct IdleQueue {
    Conn* head = nullptr;
    Conn* tail = nullptr;
  };

  // One accepted connection. Its requests are read one at a time: the parser stops at the end
  // of each and goes on once it is answered, so pipelined requests are answered in order, and
  // what arrives meanwhile waits in `pending`. Answers go to `out` and leave in one send() when
  // the bytes read so far are handled (or the asynchronous answer arrives); EV_WRITE is watched
  // only after a short write.
  struct Conn {
    Conn(Worker* w, int fd_, HttpRequestParser::Limits limits)
        : worker(w), fd(fd_), parser(limits) {}
    ~Conn() {
      leave_queue();
      for (event* ev : {read_ev, write_ev, deadline})
        if (ev) event_free(ev);
      if (fd >= 0) close(fd);
    }
    Worker* worker;
    int fd;
    size_t slot = 0;  // in worker->conns
    event* read_ev = nullptr;
    event* write_ev = nullptr;  // made on the first short write
    event* deadline = nullptr;  // a complete request within request_timeout_s; or the linger
    // Since accept or the last answer: what the request deadline runs from. The deadline's
    // timer is not moved for every request; it checks this when it fires (on_deadline).
    Clock::time_point idle_since{};
    HttpRequestParser parser;
    std::string pending;  // read, not parsed yet
    std::string out;      // answers not written yet, from out_at
    size_t out_at = 0;
    bool busy = false;         // a request is in progress: dispatched, not answered
    bool in_dispatch = false;  // inside the parse loop (an answer now is not the last word)
    bool close_after = false;  // close once `out` is written
    bool linger = false;       // closing after an error: reading what comes and dropping it
    bool reading = true;       // read_ev is added
    bool peer_closed = false;  // EOF read: answer what was complete, then close
    bool orphan = false;       // closed while busy: freed when its answer comes
    bool queued_read = false;  // in worker->to_read
    bool queued_send = false;  // in worker->to_send
    // While idle: the worker's unused or kept queue and the neighbours in it.
    IdleQueue* queue = nullptr;
    Conn* prev = nullptr;
    Conn* next = nullptr;

    bool output_waits() const { return out_at < out.size(); }
    void leave_queue() {
      if (!queue) return;
      (prev ? prev->next : queue->head) = next;
      (next ? next->prev : queue->tail) = prev;
      queue = nullptr;
      prev = next = nullptr;
    }
    void enter_queue(IdleQueue& q) {
      leave_queue();
      queue = &q;
      prev = q.tail;
      (q.tail ? q.tail->next : q.head) = this;
      q.tail = this;
    }
  };
  // A handler's request is its connection's current one (one at a time per connection); it
  // stays valid until answered, the connection being kept until then.
  using Request = Conn;

  HttpServer* server = nullptr;
  int index = 0;
  event_base* base = nullptr;
  int listen_fd = -1;  // this worker's copy of the listening socket, in its own epoll set
  event* listen_ev = nullptr;
  std::unique_ptr<Gateway> gateway;
  event* stop_ev = nullptr;
  event* drain_ev = nullptr;
  event* resume_ev = nullptr;  // accepting again after an accept() error
  int inflight = 0;
  bool draining = false;
  bool stopped = false;   // the connections are gone: a late answer has nowhere to go
  std::string_view path;  // of the request being dispatched (valid until its handler returns)
  Clock::time_point drain_deadline{};
  int cap = 0;   // this worker's share of max_connections
  int open = 0;  // connections holding a socket (orphans do not)
  HttpRequestParser::Limits limits;
  // libevent's common timeouts (one queue per duration, O(1) to add and remove) for the
  // request deadline, armed at accept and again when it fires in a request, and the linger.
  const timeval* request_timeout = nullptr;
  Clock::duration request_limit{};  // request_timeout_s
  const timeval* linger_timeout = nullptr;
  IdleQueue unused, kept;  // never completed a request; kept alive between requests
  std::vector<std::unique_ptr<Conn>> conns;
  std::array<char, kReadChunk> rbuf{};
  std::string scratch;  // a connection's pending bytes while they are parsed
  // Every admission's answer is rendered here and copied into its connection's output before
  // anything else can render (reply() reads it only in write_answer), so one serves them all.
  api::Response admit_answer;
  std::vector<std::pair<std::string, std::string>> query;  // a request's parameters
  time_t date_at = 0;
  std::string date;  // "Date: ...\r\n" for date_at
  // The reads and the answers of one loop pass, each done together after it (io_batch.h): one
  // submission for the tens of requests one epoll_wait finds, and one for the tens of answers a
  // Redis reply batch makes, instead of a read() or send() each. Null: the system calls.
  std::unique_ptr<IoBatch> io;
  std::vector<Conn*> to_read, to_send;  // Conn::queued_read, queued_send; a closed one: null
  std::vector<IoBatch::Op> ops;
  std::vector<char> read_slots;  // kBatchRead bytes per op of a read batch
  event* read_ev = nullptr;      // made active by the first connection queued in a pass
  event* send_ev = nullptr;

  ~Worker() {
    stopped = true;
    gateway.reset();
    drop_all();
    for (event* ev : {listen_ev, stop_ev, drain_ev, resume_ev, read_ev, send_ev})
      if (ev) event_free(ev);
    if (listen_fd >= 0) close(listen_fd);
    if (base) event_base_free(base);
  }

  // ---- connections: the cap, the request deadline, accept errors ----
  //
  // Each worker keeps its own share of max_connections and decides alone, in the order it
  // accepted: with one count for all workers, a worker could count in a connection accepted
  // after one that another worker then refused, and a slot freed on one worker could go to a
  // connection the other had already turned away.
  //
  // At its share, a worker closes the connection idle longest with no request in progress (one
  // that never completed a request before a kept-alive one: a flood of silent connections then
  // never pushes out a client that has been served) and refuses the newcomer only when every
  // connection has a request in progress. A request in progress is never cut, and a flood of
  // idle connections cannot lock real clients out until the request timeout frees slots. No
  // time grace: a connection goes only after every idle one accepted before it, so a new client
  // has until share - 1 more connections arrive to send its request, however fast they come; a
  // grace of T would let a flood that reconnects faster than share / T keep every connection
  // too young to evict, and real clients refused.

  static void on_listen(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    for (int i = 0; i < kAcceptBatch && !w->draining; ++i) {
      int fd = accept4(w->listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        w->adopt(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      w->server->accept_failed(errno);
      event_del(w->listen_ev);
      evtimer_add(w->resume_ev, &kAcceptBackoff);
      return;
    }
  }

  static void on_resume(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    if (!w->draining) event_add(w->listen_ev, nullptr);
  }

  void adopt(int fd) {
    if (open >= cap) {
      Conn* victim = longest_idle();
      if (!victim) {
        server->metrics_.http_connection_refused();
        close(fd);
        return;
      }
      server->metrics_.http_connection_evicted();
      close_conn(victim);
    }
    // Answers are written whole; Nagle would hold a second pipelined answer for the ACK of the
    // first.
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>(this, fd, limits);
    c->read_ev = event_new(base, fd, EV_READ | EV_PERSIST, &Worker::on_readable, c.get());
    c->deadline = evtimer_new(base, &Worker::on_deadline, c.get());
    if (!c->read_ev || !c->deadline || event_add(c->read_ev, nullptr) != 0) return;
    server->metrics_.http_connection_opened();
    ++open;
    c->idle_since = Clock::now();
    arm(*c, request_timeout);
    c->enter_queue(unused);
    c->slot = conns.size();
    conns.push_back(std::move(c));
  }

  // Frees every connection at once (the queues and this pass's batches are dropped first: a
  // connection leaving its queue would touch neighbours already freed).
  void drop_all() {
    to_read.clear();
    to_send.clear();
    for (auto& c : conns) c->queue = nullptr;
    unused = kept = IdleQueue{};
    conns.clear();
    open = 0;
  }

  Conn* longest_idle() {
    for (IdleQueue* q : {&unused, &kept})
      if (q->head) return q->head;
    return nullptr;
  }

  static void arm(Conn& c, const timeval* tv) { evtimer_add(c.deadline, tv); }

  // Frees the connection; one with a request in progress loses its socket now and is freed
  // when the answer comes (which then goes nowhere). Returns false (for flush's "c is gone").
  bool close_conn(Conn* c) {
    unqueue(c, c->queued_read, to_read);
    unqueue(c, c->queued_send, to_send);
    if (c->fd >= 0) {
      server->metrics_.http_connection_closed();
      --open;
    }
    if (c->busy) {
      c->orphan = true;
      c->leave_queue();
      for (event** ev : {&c->read_ev, &c->write_ev, &c->deadline}) {
        if (*ev) event_free(*ev);
        *ev = nullptr;
      }
      close(c->fd);
      c->fd = -1;
      return false;
    }
    destroy(c);
    return false;
  }

  void destroy(Conn* c) {
    unqueue(c, c->queued_read, to_read);
    unqueue(c, c->queued_send, to_send);
    size_t at = c->slot;
    if (at + 1 != conns.size()) {
      std::swap(conns[at], conns.back());
      conns[at]->slot = at;
    }
    conns.pop_back();  // frees c
  }

  // A request is awaited from accept or the last answer (idle_since), never while one is in
  // progress. The timer stays armed across requests (a delete when one arrives and an add after
  // its answer cost more than the rest of the connection's bookkeeping): when it fires during a
  // request it waits another full timeout, and when the wait began later than it was armed it
  // waits for the rest.
  static void on_deadline(evutil_socket_t, short, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    Worker* w = c->worker;
    if (!c->linger) {
      if (c->busy) return arm(*c, w->request_timeout);
      const Clock::duration left = c->idle_since + w->request_limit - Clock::now();
      if (left > Clock::duration::zero()) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(left).count() + 1;
        const timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
        evtimer_add(c->deadline, &tv);
        return;
      }
      w->server->metrics_.http_request_timeout();
    }
    w->close_conn(c);
  }

  // ---- reading: one read() per readiness, parsed in place; pipelined requests in order ----

  static void on_readable(evutil_socket_t, short, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    Worker* w = c->worker;
    if (w->io) return w->queue(c, c->queued_read, w->to_read, w->read_ev);
    ssize_t n = read(c->fd, w->rbuf.data(), w->rbuf.size());
    w->got(c, n < 0 ? -errno : n, w->rbuf.data());
  }

  // What a read gave c: n bytes at data, 0 at the end of the stream, or -errno.
  void got(Conn* c, ssize_t n, const char* data) {
    if (n < 0) {
      if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) close_conn(c);
      return;
    }
    if (n == 0) return peer_closed(c);
    if (c->linger) return;  // dropped
    if (c->busy || c->output_waits()) {
      // Waits for the request in progress (or for the client to read its answers); within
      // bounds, beyond which reading pauses until it is parsed.
      c->pending.append(data, static_cast<size_t>(n));
      if (c->pending.size() > limits.max_head + limits.max_body) pause_reading(c);
      return;
    }
    if (c->pending.empty()) {
      parse(c, data, static_cast<size_t>(n));
    } else {
      c->pending.append(data, static_cast<size_t>(n));
      parse_pending(c);
    }
    send_soon(c);
  }

  // Puts c in a batch of this loop pass (its event made active by the first one).
  static void queue(Conn* c, bool& queued, std::vector<Conn*>& batch, event* ev) {
    if (queued) return;
    queued = true;
    if (batch.empty()) event_active(ev, EV_READ, 0);
    batch.push_back(c);
  }

  static void unqueue(Conn* c, bool& queued, std::vector<Conn*>& batch) {
    if (!queued) return;
    queued = false;
    auto at = std::find(batch.begin(), batch.end(), c);
    if (at != batch.end()) *at = nullptr;
  }

  // Runs make(c)'s op for each connection of the batch, one submission per io->capacity() of
  // them, then done(c, op) for each in order, as after its own read() or send(). Each is taken
  // out of the batch before it is handled, which may free it (a peer that closed). When the
  // ring fails, the connections not reached stay in the batch for the caller.
  template <class Make, class Done>
  void run_batch(std::vector<Conn*>& batch, bool Conn::*queued, Make make, Done done) {
    const size_t cap = io->capacity();
    for (size_t from = 0; from < batch.size() && io; from += cap) {
      const size_t to = std::min(batch.size(), from + cap);
      ops.clear();
      for (size_t i = from; i < to; ++i)
        if (Conn* c = batch[i]) ops.push_back(make(c));
      const bool ok = io->run(ops);
      size_t k = 0;
      for (size_t i = from; i < to; ++i) {
        Conn* c = std::exchange(batch[i], nullptr);
        if (!c) continue;  // closed meanwhile
        c->*queued = false;
        done(c, ops[k++]);
      }
      if (!ok) io_failed();
    }
  }

  // The pass's readable connections, kBatchRead bytes each; then each goes on as after a read().
  static void on_read_batch(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    w->run_batch(
        w->to_read, &Conn::queued_read,
        [w](Conn* c) {
          return IoBatch::Op{c->fd, w->read_slots.data() + w->ops.size() * kBatchRead, kBatchRead,
                             false, 0};
        },
        [w](Conn* c, const IoBatch::Op& op) { w->got(c, op.result, op.data); });
    // After a failed ring, the rest are read by a system call when they are found readable again.
    for (Conn* c : w->to_read)
      if (c) c->queued_read = false;
    w->to_read.clear();
  }

  void pause_reading(Conn* c) {
    if (!c->reading) return;
    event_del(c->read_ev);
    c->reading = false;
  }

  // EOF: the client sends no more. Requests complete before it are still answered (a client may
  // shut down its side after sending); otherwise the connection goes now.
  void peer_closed(Conn* c) {
    c->peer_closed = true;
    pause_reading(c);  // an EOF stays readable
    if (!c->busy && !c->output_waits() && c->pending.empty()) close_conn(c);
  }

  // Parses data[0, n) for c (no request in progress), answering what it can at once; what is
  // left when a request goes asynchronous waits in c->pending. Does not write.
  void parse(Conn* c, const char* data, size_t n) {
    c->in_dispatch = true;
    // Never with no bytes: http-parser takes an empty feed for the end of the stream.
    while (!c->close_after && n > 0) {
      size_t used = 0;
      HttpRequestParser::Result r = c->parser.feed(data, n, used);
      data += used;
      n -= used;
      if (c->parser.take_continue()) c->out += "HTTP/1.1 100 Continue\r\n\r\n";
      if (r == HttpRequestParser::Result::kNeedMore) break;
      if (r == HttpRequestParser::Result::kError) {
        const int status = c->parser.error_status();
        write_answer(c, api::render_error(status, c->parser.error_message()), "application/json",
                     /*head=*/false, /*minor=*/1, /*keep_alive=*/false);
        c->linger = true;
        break;
      }
      request_arrived(c);
      dispatch(c);
      if (c->busy) {
        c->pending.assign(data, n);
        n = 0;
        break;
      }
      if (!c->close_after) c->parser.next();
    }
    c->in_dispatch = false;
    // Bytes after the answer that closes the connection are not read: dropped.
    if (c->close_after) c->pending.clear();
  }

  // The pending bytes of c, once nothing holds them back.
  void parse_pending(Conn* c) {
    scratch.swap(c->pending);
    parse(c, scratch.data(), scratch.size());
    scratch.clear();
    resume_reading(c);
  }

  // A paused connection is read again once nothing holds it back: its answers written (all of
  // them: flush calls this when they are), its pending bytes within bounds.
  void resume_reading(Conn* c) {
    if (c->reading || c->peer_closed || c->close_after || c->output_waits() ||
        c->pending.size() > limits.max_head + limits.max_body)
      return;
    event_add(c->read_ev, nullptr);
    c->reading = true;
  }

  // A complete request arrived: no deadline while it is handled; the next one's starts when it
  // is answered.
  static void request_arrived(Conn* c) {
    c->leave_queue();
    c->busy = true;
  }

  // ---- writing: each answer whole into c->out, sent in one send() ----

  void write_answer(Conn* c, const api::Response& r, std::string_view content_type, bool head,
                    int minor, bool keep_alive) {
    std::string& o = c->out;
    if (c->out_at == o.size()) {
      o.clear();
      c->out_at = 0;
    }
    // Every piece by its length (string_view literals): appending a C string measures it first.
    using namespace std::string_view_literals;
    o += minor == 0 ? "HTTP/1.0 "sv : "HTTP/1.1 "sv;
    append_integer(o, r.status);
    o += ' ';
    o += reason_phrase(r.status);
    o += "\r\n"sv;
    o += date_header();
    const bool has_body = r.status != 204 && r.status != 304;
    if (has_body) {
      o += "Content-Type: "sv;
      o += content_type;
      o += "\r\nContent-Length: "sv;
      append_integer(o, static_cast<int64_t>(r.body.size()));
      o += "\r\n"sv;
    }
    for (const auto& [k, v] : r.headers) {
      o += k;
      o += ": "sv;
      o += v;
      o += "\r\n"sv;
    }
    if (!keep_alive)
      o += "Connection: close\r\n"sv;
    else if (minor == 0)
      o += "Connection: keep-alive\r\n"sv;
    o += "\r\n"sv;
    if (has_body && !head) o += r.body;
    server->metrics_.http_request(r.status);
    c->busy = false;
    // Also bounds how long a client that does not read its answer holds the connection. The
    // timer, armed since accept, catches up when it fires.
    c->idle_since = Clock::now();
    if (keep_alive)
      c->enter_queue(kept);
    else
      c->close_after = true;
  }

  // The Date header, formatted again only when the second changes.
  const std::string& date_header() {
    time_t now = time(nullptr);
    if (now != date_at || date.empty()) {
      date_at = now;
      tm t{};
      gmtime_r(&now, &t);
      char buf[64];
      size_t n = strftime(buf, sizeof buf, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &t);
      date.assign(buf, n);
    }
    return date;
  }

  // Sends what c->out holds; then closes c when its last answer said so. False when c is gone.
  bool flush(Conn* c) {
    while (c->output_waits()) {
      ssize_t n = send(c->fd, c->out.data() + c->out_at, c->out.size() - c->out_at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return close_conn(c);
      if (n > 0) c->out_at += static_cast<size_t>(n);
      if (!c->output_waits()) break;
      if (!c->write_ev) c->write_ev = event_new(base, c->fd, EV_WRITE, &Worker::on_writable, c);
      if (c->write_ev) event_add(c->write_ev, nullptr);
      return true;
    }
    c->out.clear();
    c->out_at = 0;
    resume_reading(c);
    if (c->busy) return true;
    if (c->close_after) return done_with(c);
    if (c->peer_closed && c->pending.empty()) return close_conn(c);
    return true;
  }

  // Sends c's output after this loop pass with the others' (then flush's work), or now without
  // a ring or while c waits for EV_WRITE (its output goes in order, after what is waiting).
  bool send_soon(Conn* c) {
    if (c->queued_send) return true;
    if (!io || !c->output_waits() || (c->write_ev && event_pending(c->write_ev, EV_WRITE, nullptr)))
      return flush(c);
    queue(c, c->queued_send, to_send, send_ev);
    return true;
  }

  // The pass's answers; then each connection goes on as after a send() (flush: the rest of a
  // short write, a close its answer asked for).
  static void on_send_batch(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    w->run_batch(
        w->to_send, &Conn::queued_send,
        [](Conn* c) {
          return IoBatch::Op{c->fd, c->out.data() + c->out_at, c->out.size() - c->out_at, true, 0};
        },
        [w](Conn* c, const IoBatch::Op& op) {
          if (op.result > 0) c->out_at += static_cast<size_t>(op.result);
          if (op.result < 0 && op.result != -EAGAIN && op.result != -EINTR)
            w->close_conn(c);
          else
            w->written(c);
        });
    // After a failed ring, the rest by a system call each.
    if (!w->io)
      for (Conn* c : w->to_send)
        if (c && c->queued_send) {
          c->queued_send = false;
          w->written(c);
        }
    w->to_send.clear();
  }

  // The ring failed (not one operation): reads and answers go by system calls from now on.
  void io_failed() {
    spdlog::warn("io_uring failed; reading and answering with a system call each from now on");
    io.reset();
  }

  static void on_writable(evutil_socket_t, short, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    c->worker->written(c);
  }

  // Some of c's output went out: the rest follows; requests that waited for it to drain go on.
  void written(Conn* c) {
    if (flush(c) && !c->busy && !c->output_waits() && !c->pending.empty() && !c->close_after) {
      parse_pending(c);
      send_soon(c);
    }
  }

  // The last answer is out: close now, or after an error half-close and drop what the client
  // still sends for a moment.
  bool done_with(Conn* c) {
    if (!c->linger || c->peer_closed) return close_conn(c);
    shutdown(c->fd, SHUT_WR);
    if (!c->reading) {
      event_add(c->read_ev, nullptr);
      c->reading = true;
    }
    arm(*c, linger_timeout);
    c->enter_queue(unused);
    return true;
  }

  // Answers c's request in progress. Inside the parse loop it is one more answer in `out`;
  // later (from a Redis reply) it is sent at once with those of the requests that were waiting
  // behind it.
  void reply(Request* c, const api::Response& r,
             std::string_view content_type = "application/json") {
    const HttpRequest& q = c->parser.request();
    const bool head = q.known_method && q.method == HTTP_HEAD;
    // A stopping worker tells its clients to go, so that kept-alive ones do not hold the drain.
    write_answer(c, r, content_type, head, q.minor, q.keep_alive && !draining);
    if (c->in_dispatch) return;
    if (!c->close_after) {
      c->parser.next();
      if (!c->pending.empty()) parse_pending(c);
    }
    send_soon(c);
  }

  // Answers an asynchronous request unless the server was torn down meanwhile, or drops it when
  // its connection went meanwhile.
  void finish(Request* req, const api::Response& r) {
    --inflight;
    if (stopped) return;
    if (req->orphan) return destroy(req);
    reply(req, r);
  }

  const std::string& body_of(Request* req) { return req->parser.request().body; }

  // ---- one handler per endpoint: parse, ask the gateway, render ----

  void handle_admit(Request* req) {
    AdmitRequest ar;
    if (auto e = api::parse_admit(body_of(req), ar)) {
      server->metrics_.admission("", "", "bad_request");
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->admit(std::move(ar), [this, req](const AdmitDecision& d) {
      api::render_admit(d.result, d.flow_tag, 0, admit_answer);
      finish(req, admit_answer);
    });
  }

  void handle_settle(Request* req) {
    SettleRequest sr;
    if (auto e = api::parse_settle(body_of(req), sr)) {
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->settle(std::move(sr),
                    [this, req](const SettleResult& r) { finish(req, api::render_settle(r)); });
  }

  void handle_charge(Request* req) {
    ChargeRequest cr;
    if (auto e = api::parse_charge(body_of(req), cr)) {
      server->metrics_.charge("", "bad_request");
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->charge(std::move(cr),
                    [this, req](const ChargeResult& r) { finish(req, api::render_charge(r)); });
  }

  void handle_release(Request* req) {
    ReleaseRequest rr;
    if (auto e = api::parse_release(body_of(req), rr)) {
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->release(std::move(rr), [this, req](const ReleaseDecision& d) {
      finish(req, api::render_release(d.result, d.flow_tag));
    });
  }

  // While Redis does not answer: "down" (503, the box cannot admit) under redis.on_failure
  // closed, else "degraded" (200, so a load balancer keeps the box) with the mode and the
  // outage's age.
  void handle_healthz(Request* req) {
    const auto& snap = gateway->snapshot();
    const int64_t since = gateway->outage_since_ms();
    const bool outage = !gateway->redis_up() || since != 0;
    const config::OnFailure mode = snap->cfg.redis.on_failure;
    // Down only when no tenant can be admitted: a plan failing open or local keeps the box.
    bool all_closed = mode == config::OnFailure::kClosed;
    for (const auto& [name, plan] : snap->cfg.plans)
      all_closed = all_closed && plan.on_failure.value_or(mode) == config::OnFailure::kClosed;
    std::string status = draining ? "stopping" : !outage ? "ok" : all_closed ? "down" : "degraded";
    json j = {{"status", status},
              {"redis", gateway->redis_state()},
              {"dataplane", gateway->dataplane_connected() ? "connected" : "not connected"},
              {"config_hash", snap->hash},
              {"worker", index}};
    if (outage) {
      j["mode"] = config::on_failure_name(mode);
      int64_t now =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
              .count();
      j["outage_s"] = since ? static_cast<double>(now - since) / 1000.0 : 0.0;
    }
    if (size_t n = gateway->journal_pending()) j["journal_pending"] = n;
    if (const auto& b = gateway->brake())
      j["brake"] = {{"factor", b->factor}, {"exempt_plans", b->exempt_plans}};
    reply(req,
          api::Response{status == "ok" || status == "degraded" ? 200 : 503, {}, j.dump() + "\n"});
  }

  // For orchestrators: ready to decide admissions (Redis answers; a configuration is always in
  // force once serving: the daemon does not start without one); 503 with the reasons otherwise.
  void handle_readyz(Request* req) {
    json why = json::array();
    if (draining) why.push_back("stopping");
    if (!gateway->redis_up())
      why.push_back(std::string("redis: ") + std::string(gateway->redis_state()));
    if (server->store_.registry_expected() && !gateway->registry())
      why.push_back("tenant registry: not read yet");
    json j = {{"ready", why.empty()}, {"config_hash", gateway->snapshot()->hash}};
    if (!why.empty()) j["why"] = why;
    reply(req, api::Response{why.empty() ? 200 : 503, {}, j.dump() + "\n"});
  }

  // Runs on this worker's loop: a reload takes milliseconds (a few KiB of YAML), and the other
  // workers keep serving meanwhile.
  void handle_reload(Request* req) {
    if (!server->reloader_) return reply(req, api::render_error(404, "no reload here"));
    ReloadOutcome r = server->reloader_->reload();
    json j = {{"status", r.ok ? "reloaded" : "refused"}, {"config_hash", r.hash}};
    if (!r.ok) j["errors"] = r.errors;
    reply(req, api::Response{r.ok ? 200 : 400, {}, j.dump() + "\n"});
  }

  // ---- the tenant registry (tenant_registry.h) ----
  //
  // PUT, DELETE and GET of one tenant go to Redis, so that an answer reflects every write made
  // before it, on any daemon; the list pages through this daemon's copy (at most a poll behind).

  static constexpr std::string_view kTenantsPath = "/v1/admin/tenants/";

  // The tenant id of /v1/admin/tenants/<id>; answers 400 and returns empty when it is no id.
  std::string tenant_of(Request* req) {
    std::string id(path.substr(std::min(path.size(), kTenantsPath.size())));
    if (common::valid_id(id)) return id;
    reply(req, api::render_error(400, "tenant: must match [A-Za-z0-9._-]{1,64} (in the path)"));
    return {};
  }

  void handle_tenant_put(Request* req) {
    std::string id = tenant_of(req);
    if (id.empty()) return;
    std::string plan;
    if (auto e = api::parse_tenant_plan(body_of(req), plan))
      return reply(req, api::render_error(400, e->str()));
    const config::Config& cfg = gateway->snapshot()->cfg;
    if (!cfg.plans.count(plan)) {
      std::string known;
      for (const auto& [name, p] : cfg.plans) known += (known.empty() ? "" : ", ") + name;
      return reply(req, api::render_error(400, "plan: unknown plan '" + plan +
                                                   "' (the configuration has: " + known + ")"));
    }
    ++inflight;
    registry::write(
        gateway->redis(), id, plan,
        [this, req, id, plan](const std::string& previous, const std::string& error) {
          if (!error.empty()) return finish(req, api::render_error(503, error));
          finish(req, api::render_tenant(previous.empty() ? 201 : 200, id, plan, "registry"));
        });
  }

  void handle_tenant_get(Request* req) {
    std::string id = tenant_of(req);
    if (id.empty()) return;
    ++inflight;
    registry::read(
        gateway->redis(), id,
        [this, req, id](const std::optional<std::string>& plan, const std::string& error) {
          if (!error.empty()) return finish(req, api::render_error(503, error));
          if (plan) return finish(req, api::render_tenant(200, id, *plan, "registry"));
          const config::Config& cfg = gateway->snapshot()->cfg;
          if (auto it = cfg.tenants.find(id); it != cfg.tenants.end())
            return finish(req, api::render_tenant(200, id, it->second.plan, "config"));
          finish(req, api::render_error(404, "tenant: '" + id +
                                                 "' is neither in the registry nor in "
                                                 "the configuration"));
        });
  }

  void handle_tenant_delete(Request* req) {
    std::string id = tenant_of(req);
    if (id.empty()) return;
    ++inflight;
    registry::write(
        gateway->redis(), id, "",
        [this, req, id](const std::string& previous, const std::string& error) {
          if (!error.empty()) return finish(req, api::render_error(503, error));
          if (!previous.empty()) return finish(req, api::Response{204, {}, {}});
          const bool in_file = gateway->snapshot()->cfg.tenants.count(id) > 0;
          finish(req, api::render_error(404, "tenant: '" + id + "' is not in the registry" +
                                                 (in_file ? " (the configuration file lists it: "
                                                            "edit the file and reload)"
                                                          : "")));
        });
  }

  // ---- the service-wide brake (brake_sync.h): every answer reflects Redis, not this daemon's
  // copy (at most a poll behind) ----

  void handle_brake_post(Request* req) {
    Brake b;
    if (auto e = api::parse_brake(body_of(req), b))
      return reply(req, api::render_error(400, e->str()));
    const config::Config& cfg = gateway->snapshot()->cfg;
    for (size_t i = 0; i < b.exempt_plans.size(); ++i)
      if (!cfg.plans.count(b.exempt_plans[i]))
        return reply(
            req, api::render_error(400, "exempt_plans: unknown plan '" + b.exempt_plans[i] + "'"));
    ++inflight;
    brake::set(gateway->redis(), b, [this, req, b](const std::string& error) {
      if (!error.empty()) return finish(req, api::render_error(503, error));
      finish(req, api::render_brake(200, &b));
    });
  }

  void handle_brake_get(Request* req) {
    ++inflight;
    brake::read(gateway->redis(),
                [this, req](const std::optional<Brake>& b, const std::string& error) {
                  if (!error.empty()) return finish(req, api::render_error(503, error));
                  finish(req, api::render_brake(200, b ? &*b : nullptr));
                });
  }

  void handle_brake_delete(Request* req) {
    ++inflight;
    brake::lift(gateway->redis(), [this, req](const std::string& error) {
      if (!error.empty()) return finish(req, api::render_error(503, error));
      finish(req, api::render_brake(200, nullptr));
    });
  }

  // GET /v1/admin/tenants?cursor=<last id of the previous page>&limit=<1..1000>: the registry's
  // tenants in id order.
  void handle_tenant_list(Request* req) {
    const std::shared_ptr<const TenantDirectory>& dir = gateway->registry();
    if (!dir) return reply(req, api::render_error(503, "the tenant registry is not read yet"));
    if (!parse_query(req->parser.request().query, query))
      return reply(req, api::render_error(400, "the query string is malformed"));
    std::string cursor;
    size_t limit = kDefaultPage;
    std::string error;
    for (const auto& [key, value] : query) {
      if (!error.empty()) break;
      if (key == "cursor") {
        if (!value.empty() && !common::valid_id(value))
          error = "cursor: must be the last tenant of the previous page (or empty)";
        cursor = value;
      } else if (key == "limit") {
        size_t n = 0;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > kMaxPage)
          error = "limit: must be an integer 1.." + std::to_string(kMaxPage);
        limit = n;
      } else {
        error = key + ": unknown parameter (cursor, limit)";
      }
    }
    if (!error.empty()) return reply(req, api::render_error(400, error));
    // One more than asked says whether a next page exists.
    std::vector<TenantDirectory::Entry> page = dir->page(cursor, limit + 1);
    const bool more = page.size() > limit;
    if (more) page.pop_back();
    reply(req, api::render_tenant_page(page, more, dir->version()));
  }

  void handle_metrics(Request* req) {
    reply(req, api::Response{200, {}, server->metrics_.render()},
          "text/plain; version=0.0.4; charset=utf-8");
  }

  // The route table. The API (POST) needs the bearer token when one is configured; the admin
  // API needs control.admin_token and is off without one (404, as if it did not exist: a box
  // that never configured it shows no admin surface); /healthz, /readyz and /metrics stay open
  // for probes and scrapers.
  enum class Auth { kNone, kApi, kAdmin };
  struct Route {
    std::string_view path;
    http_method method;
    Auth auth;
    void (Worker::*handle)(Request*);
  };
  static constexpr Route kRoutes[] = {
      {"/v1/admit", HTTP_POST, Auth::kApi, &Worker::handle_admit},
      {"/v1/settle", HTTP_POST, Auth::kApi, &Worker::handle_settle},
      {"/v1/charge", HTTP_POST, Auth::kApi, &Worker::handle_charge},
      {"/v1/release", HTTP_POST, Auth::kApi, &Worker::handle_release},
      {"/v1/admin/reload", HTTP_POST, Auth::kAdmin, &Worker::handle_reload},
      {"/v1/admin/tenants", HTTP_GET, Auth::kAdmin, &Worker::handle_tenant_list},
      {"/v1/admin/brake", HTTP_POST, Auth::kAdmin, &Worker::handle_brake_post},
      {"/v1/admin/brake", HTTP_GET, Auth::kAdmin, &Worker::handle_brake_get},
      {"/v1/admin/brake", HTTP_DELETE, Auth::kAdmin, &Worker::handle_brake_delete},
      // A path ending in '/' is a prefix: the rest is the resource (a tenant id).
      {kTenantsPath, HTTP_GET, Auth::kAdmin, &Worker::handle_tenant_get},
      {kTenantsPath, HTTP_PUT, Auth::kAdmin, &Worker::handle_tenant_put},
      {kTenantsPath, HTTP_DELETE, Auth::kAdmin, &Worker::handle_tenant_delete},
      {"/healthz", HTTP_GET, Auth::kNone, &Worker::handle_healthz},
      {"/readyz", HTTP_GET, Auth::kNone, &Worker::handle_readyz},
      {"/metrics", HTTP_GET, Auth::kNone, &Worker::handle_metrics},
  };

  // Whether the request may use the route; answers it when not. The tokens come from the
  // configuration in force, so a reload rotates them.
  bool authorized(Request* req, Auth auth) {
    if (auth == Auth::kNone) return true;
    const config::Control& c = gateway->snapshot()->cfg.control;
    const std::string& token = auth == Auth::kAdmin ? c.admin_token : c.auth_token;
    if (token.empty()) {
      if (auth == Auth::kApi) return true;
      reply(req, api::render_error(404, "the admin API is off: set control.admin_token"));
      return false;
    }
    const HttpRequest& q = req->parser.request();
    const char* got = q.has_authorization ? q.authorization.c_str() : nullptr;
    if (api::token_matches(token, got)) return true;
    api::Response r = api::render_error(
        401, got ? "invalid bearer token" : "missing bearer token (Authorization: Bearer …)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dripgate\"");
    reply(req, r);
    return false;
  }

  static bool matches(const Route& r, std::string_view path) {
    return r.path == path ||
           (r.path.back() == '/' && path.size() > r.path.size() && path.starts_with(r.path));
  }

  // Every method reaches the table: a path it has with another method is a 405 with Allow.
  void dispatch(Request* req) {
    const HttpRequest& q = req->parser.request();
    path = q.path;
    for (const Route& r : kRoutes) {
      if (!q.known_method || q.method != r.method || !matches(r, path)) continue;
      if (authorized(req, r.auth)) (this->*r.handle)(req);
      return;
    }
    std::string allow;  // the methods of the path
    for (const Route& r : kRoutes)
      if (matches(r, path))
        allow += (allow.empty() ? "" : ", ") + std::string(http_method_str(r.method));
    if (allow.empty())
      return reply(req, api::render_error(404, "no such path: " + std::string(path)));
    api::Response r = api::render_error(405, "use " + allow);
    r.headers.emplace_back("Allow", allow);
    reply(req, r);
  }

  static void on_stop(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    if (w->draining) return;
    w->draining = true;
    w->drain_deadline = Clock::now() + kDrainLimit;
    event_del(w->listen_ev);
    evtimer_del(w->resume_ev);
    timeval tv{0, 5000};
    event_add(w->drain_ev, &tv);
  }

  static void on_drain(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    // This pass's batches first (this timer may run before their events): the requests read
    // are handled, the answers written, before the connections go.
    if (w->io && !w->to_read.empty()) on_read_batch(-1, 0, w);
    if (w->io && !w->to_send.empty()) on_send_batch(-1, 0, w);
    if (w->inflight > 0 && Clock::now() < w->drain_deadline) return;  // persistent: next tick
    if (w->inflight > 0)
      spdlog::warn("worker {}: {} requests abandoned at shutdown", w->index, w->inflight);
    event_del(w->drain_ev);
    // Closes idle keep-alive connections too.
    w->stopped = true;
    for (auto& c : w->conns)
      if (c->fd >= 0) w->server->metrics_.http_connection_closed();
    w->drop_all();
    event_base_loopexit(w->base, nullptr);
  }
};

HttpServer::HttpServer(const ConfigStore& store, Metrics& metrics, ServerOptions opts,
                       Reloader* reloader)
    : store_(store), opts_(std::move(opts)), metrics_(metrics), reloader_(reloader) {}

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
    w->index = i;
    // Split as evenly as it goes; a worker holds at least one.
    w->cap = std::max(1, opts_.max_connections / n + (i < opts_.max_connections % n ? 1 : 0));
    w->limits = {.max_head = kMaxHead, .max_body = opts_.max_body};
    // The changelist folds the add/del pairs that hiredis makes within one loop iteration into
    // at most one epoll_ctl per fd (each base has its own epoll set, so the per-worker dup of
    // the listening socket is never in the same set twice).
    event_config* ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
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
    w->gateway =
        std::make_unique<Gateway>(store_, w->base, flows_, metrics_, opts_.dataplane_timeout_ms,
                                  decisions_.get(), "http", opts_.fallback);
    w->stop_ev = event_new(w->base, -1, 0, &Worker::on_stop, w.get());
    w->drain_ev = event_new(w->base, -1, EV_PERSIST, &Worker::on_drain, w.get());
    w->resume_ev = evtimer_new(w->base, &Worker::on_resume, w.get());
    std::string why;
    if (opts_.io_uring) w->io = IoBatch::create(kBatch, why);
    if (w->io) {
      w->read_ev = event_new(w->base, -1, 0, &Worker::on_read_batch, w.get());
      w->send_ev = event_new(w->base, -1, 0, &Worker::on_send_batch, w.get());
      w->read_slots.resize(w->io->capacity() * kBatchRead);
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
               std::strerror(err), accept_errors_unlogged_, kAcceptBackoff.tv_usec / 1000);
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
