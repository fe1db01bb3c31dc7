// The worker's transport: accepting and adopting connections under the cap, evicting the
// longest idle, the request deadline, reading (a read() each or a loop pass's reads in one
// io_uring submission), framing by http_request.h, answering into the connection's output and
// sending it (likewise batched), closing, and draining at stop. What a request means is the
// router's (router.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <utility>

#include "common/json_writer.h"
#include "control/http/router.h"
#include "control/http/worker.h"

namespace dripgate::control::http {
namespace {

// How long a stopping worker waits for requests in flight (each bounded by the Redis timeout).
constexpr std::chrono::seconds kDrainLimit{10};
// Connections accepted per wakeup at most, so that one worker's burst of accepts does not hold
// up the requests of its open connections.
constexpr int kAcceptBatch = 32;

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
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

void arm(Connection& c, const timeval* tv) {
  evtimer_add(c.deadline, tv);
}

// Puts c in a batch of this loop pass (its event made active by the first one).
void queue(Connection* c, bool& queued, std::vector<Connection*>& batch, event* ev) {
  if (queued) return;
  queued = true;
  if (batch.empty()) event_active(ev, EV_READ, 0);
  batch.push_back(c);
}

void unqueue(Connection* c, bool& queued, std::vector<Connection*>& batch) {
  if (!queued) return;
  queued = false;
  auto at = std::find(batch.begin(), batch.end(), c);
  if (at != batch.end()) *at = nullptr;
}

// A complete request arrived: no deadline while it is handled; the next one's starts when it is
// answered.
void request_arrived(Connection* c) {
  c->leave_queue();
  c->busy = true;
}

}  // namespace

Connection::~Connection() {
  leave_queue();
  for (event* ev : {read_ev, write_ev, deadline})
    if (ev) event_free(ev);
  if (fd >= 0) close(fd);
}

void Connection::leave_queue() {
  if (!queue) return;
  (prev ? prev->next : queue->head) = next;
  (next ? next->prev : queue->tail) = prev;
  queue = nullptr;
  prev = next = nullptr;
}

void Connection::enter_queue(IdleQueue& q) {
  leave_queue();
  queue = &q;
  prev = q.tail;
  (q.tail ? q.tail->next : q.head) = this;
  q.tail = this;
}

Worker::~Worker() {
  stopped = true;
  inbox->close();  // its event is on base, freed below; a late post is dropped
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
// accepted: with one count for all workers, a worker could count in a connection accepted after
// one that another worker then refused, and a slot freed on one worker could go to a connection
// the other had already turned away.
//
// At its share, a worker closes the connection idle longest with no request in progress (one
// that never completed a request before a kept-alive one: a flood of silent connections then
// never pushes out a client that has been served) and refuses the newcomer only when every
// connection has a request in progress. A request in progress is never cut, and a flood of idle
// connections cannot lock real clients out until the request timeout frees slots. No time
// grace: a connection goes only after every idle one accepted before it, so a new client has
// until share - 1 more connections arrive to send its request, however fast they come; a grace
// of T would let a flood that reconnects faster than share / T keep every connection too young
// to evict, and real clients refused.

void Worker::on_listen(evutil_socket_t, short, void* arg) {
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

void Worker::on_resume(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  if (!w->draining) event_add(w->listen_ev, nullptr);
}

void Worker::adopt(int fd) {
  if (open >= cap) {
    Connection* victim = longest_idle();
    if (!victim) {
      metrics->http_connection_refused();
      close(fd);
      return;
    }
    metrics->http_connection_evicted();
    close_conn(victim);
  }
  // Answers are written whole; Nagle would hold a second pipelined answer for the ACK of the
  // first.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto c = std::make_unique<Connection>(this, fd, limits);
  if (tls && !(c->ssl = tls->accept(fd))) return;
  c->read_ev = event_new(base, fd, EV_READ | EV_PERSIST, &Worker::on_readable, c.get());
  c->deadline = evtimer_new(base, &Worker::on_deadline, c.get());
  if (!c->read_ev || !c->deadline || event_add(c->read_ev, nullptr) != 0) return;
  metrics->http_connection_opened();
  ++open;
  c->idle_since = Clock::now();
  arm(*c, request_timeout);
  c->enter_queue(unused);
  c->slot = conns.size();
  conns.push_back(std::move(c));
}

// Frees every connection at once (the queues and this pass's batches are dropped first: a
// connection leaving its queue would touch neighbours already freed).
void Worker::drop_all() {
  to_read.clear();
  to_send.clear();
  for (auto& c : conns) c->queue = nullptr;
  unused = kept = IdleQueue{};
  conns.clear();
  open = 0;
}

Connection* Worker::longest_idle() {
  for (IdleQueue* q : {&unused, &kept})
    if (q->head) return q->head;
  return nullptr;
}

// Frees the connection; one with a request in progress loses its socket now and is freed when
// the answer comes (which then goes nowhere). Returns false (for flush's "c is gone").
bool Worker::close_conn(Connection* c) {
  unqueue(c, c->queued_read, to_read);
  unqueue(c, c->queued_send, to_send);
  if (c->fd >= 0) {
    metrics->http_connection_closed();
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
    // A request waiting for a gate leaves the queue now; its answer (later) frees c.
    if (const uint64_t waiter = std::exchange(c->waiter, 0)) gateway->abandon(waiter);
    return false;
  }
  destroy(c);
  return false;
}

void Worker::destroy(Connection* c) {
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
void Worker::on_deadline(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<Connection*>(arg);
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
    w->metrics->http_request_timeout();
  }
  w->close_conn(c);
}

// ---- reading: one read() per readiness, parsed in place; pipelined requests in order ----

void Worker::on_readable(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<Connection*>(arg);
  Worker* w = c->worker;
  if (c->ssl) return w->tls_read(c);
  if (w->io) return queue(c, c->queued_read, w->to_read, w->read_ev);
  ssize_t n = read(c->fd, w->rbuf.data(), w->rbuf.size());
  w->got(c, n < 0 ? -errno : n, w->rbuf.data());
}

// What a read gave c: n bytes at data, 0 at the end of the stream, or -errno.
void Worker::got(Connection* c, ssize_t n, const char* data) {
  if (n < 0) {
    if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) close_conn(c);
    return;
  }
  if (n == 0) return peer_closed(c);
  if (c->linger) return;  // dropped
  if (c->busy || c->output_waits()) {
    // Waits for the request in progress (or for the client to read its answers); within bounds,
    // beyond which reading pauses until it is parsed.
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

// Runs make(c)'s op for each connection of the batch, one submission per io->capacity() of
// them, then done(c, op) for each in order, as after its own read() or send(). Each is taken out
// of the batch before it is handled, which may free it (a peer that closed). When the ring
// fails, the connections not reached stay in the batch for the caller.
template <class Make, class Done>
void Worker::run_batch(std::vector<Connection*>& batch, bool Connection::*queued, Make make,
                       Done done) {
  const size_t cap = io->capacity();
  for (size_t from = 0; from < batch.size() && io; from += cap) {
    const size_t to = std::min(batch.size(), from + cap);
    ops.clear();
    for (size_t i = from; i < to; ++i)
      if (Connection* c = batch[i]) ops.push_back(make(c));
    const bool ok = io->run(ops);
    size_t k = 0;
    for (size_t i = from; i < to; ++i) {
      Connection* c = std::exchange(batch[i], nullptr);
      if (!c) continue;  // closed meanwhile
      c->*queued = false;
      done(c, ops[k++]);
    }
    if (!ok) io_failed();
  }
}

// The pass's readable connections, kBatchRead bytes each; then each goes on as after a read().
void Worker::on_read_batch(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  w->run_batch(
      w->to_read, &Connection::queued_read,
      [w](Connection* c) {
        return IoBatch::Op{c->fd, w->read_slots.data() + w->ops.size() * kBatchRead, kBatchRead,
                           false, 0};
      },
      [w](Connection* c, const IoBatch::Op& op) { w->got(c, op.result, op.data); });
  // After a failed ring, the rest are read by a system call when they are found readable again.
  for (Connection* c : w->to_read)
    if (c) c->queued_read = false;
  w->to_read.clear();
}

void Worker::pause_reading(Connection* c) {
  if (!c->reading) return;
  event_del(c->read_ev);
  c->reading = false;
}

// EOF: the client sends no more. Requests complete before it are still answered (a client may
// shut down its side after sending); otherwise the connection goes now.
void Worker::peer_closed(Connection* c) {
  c->peer_closed = true;
  pause_reading(c);  // an EOF stays readable
  // A client that goes while its request waits for a gate no longer wants it (a proxy gives up
  // on its upstream call this way), and its place goes to the next.
  if ((!c->busy || c->waiter) && !c->output_waits() && c->pending.empty()) close_conn(c);
}

// Parses data[0, n) for c (no request in progress), answering what it can at once; what is left
// when a request goes asynchronous waits in c->pending. Does not write.
void Worker::parse(Connection* c, const char* data, size_t n) {
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
    dispatch(Request(this, c));
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
void Worker::parse_pending(Connection* c) {
  scratch.swap(c->pending);
  parse(c, scratch.data(), scratch.size());
  scratch.clear();
  resume_reading(c);
}

// A paused connection is read again once nothing holds it back: its answers written (all of
// them: flush calls this when they are), its pending bytes within bounds.
void Worker::resume_reading(Connection* c) {
  if (c->reading || c->peer_closed || c->close_after || c->output_waits() ||
      c->pending.size() > limits.max_head + limits.max_body)
    return;
  event_add(c->read_ev, nullptr);
  c->reading = true;
  // Bytes TLS has already taken off the socket make it readable no more.
  if (c->ssl && SSL_has_pending(c->ssl.get())) event_active(c->read_ev, EV_READ, 0);
}

// ---- writing: each answer whole into c->out, sent in one send() ----

void Worker::write_answer(Connection* c, const api::Response& r, std::string_view content_type,
                          bool head, int minor, bool keep_alive) {
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
  metrics->http_request(r.status);
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
const std::string& Worker::date_header() {
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
bool Worker::flush(Connection* c) {
  while (c->output_waits()) {
    ssize_t n =
        c->ssl ? tls_send(c)
               : send(c->fd, c->out.data() + c->out_at, c->out.size() - c->out_at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return close_conn(c);
    if (n > 0) c->out_at += static_cast<size_t>(n);
    if (!c->output_waits()) break;
    watch_writable(c);
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

// Sends c's output after this loop pass with the others' (then flush's work), or now without a
// ring or while c waits for EV_WRITE (its output goes in order, after what is waiting).
bool Worker::send_soon(Connection* c) {
  if (c->queued_send) return true;
  if (!io || c->ssl || !c->output_waits() ||
      (c->write_ev && event_pending(c->write_ev, EV_WRITE, nullptr)))
    return flush(c);
  queue(c, c->queued_send, to_send, send_ev);
  return true;
}

// The pass's answers; then each connection goes on as after a send() (flush: the rest of a short
// write, a close its answer asked for).
void Worker::on_send_batch(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  w->run_batch(
      w->to_send, &Connection::queued_send,
      [](Connection* c) {
        return IoBatch::Op{c->fd, c->out.data() + c->out_at, c->out.size() - c->out_at, true, 0};
      },
      [w](Connection* c, const IoBatch::Op& op) {
        if (op.result > 0) c->out_at += static_cast<size_t>(op.result);
        if (op.result < 0 && op.result != -EAGAIN && op.result != -EINTR)
          w->close_conn(c);
        else
          w->written(c);
      });
  // After a failed ring, the rest by a system call each.
  if (!w->io)
    for (Connection* c : w->to_send)
      if (c && c->queued_send) {
        c->queued_send = false;
        w->written(c);
      }
  w->to_send.clear();
}

// The ring failed (not one operation): reads and answers go by system calls from now on.
void Worker::io_failed() {
  spdlog::warn("io_uring failed; reading and answering with a system call each from now on");
  io.reset();
}

void Worker::on_writable(evutil_socket_t, short, void* arg) {
  auto* c = static_cast<Connection*>(arg);
  if (std::exchange(c->tls_read_wants_write, false)) return c->worker->tls_read(c);
  c->worker->written(c);
}

void Worker::watch_writable(Connection* c) {
  if (!c->write_ev) c->write_ev = event_new(base, c->fd, EV_WRITE, &Worker::on_writable, c);
  if (c->write_ev) event_add(c->write_ev, nullptr);
}

// Some of c's output went out: the rest follows; requests that waited for it to drain go on.
void Worker::written(Connection* c) {
  if (flush(c) && !c->busy && !c->output_waits() && !c->pending.empty() && !c->close_after) {
    parse_pending(c);
    send_soon(c);
  }
}

// The last answer is out: close now, or after an error half-close and drop what the client
// still sends for a moment.
bool Worker::done_with(Connection* c) {
  if (!c->linger || c->peer_closed) return close_conn(c);
  if (c->ssl) SSL_shutdown(c->ssl.get());  // close_notify, if the socket takes it now
  shutdown(c->fd, SHUT_WR);
  if (!c->reading) {
    event_add(c->read_ev, nullptr);
    c->reading = true;
  }
  arm(*c, linger_timeout);
  c->enter_queue(unused);
  return true;
}

// Inside the parse loop an answer is one more in `out`; later (from a Redis reply) it is sent at
// once with those of the requests that were waiting behind it.
void Worker::reply(Connection* c, const api::Response& r, std::string_view content_type) {
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

void Worker::finish(Connection* c, const api::Response& r) {
  --inflight;
  if (stopped) return;
  c->waiter = 0;
  if (c->orphan) return destroy(c);
  reply(c, r, "application/json");
}

// ---- stopping: no more accepts, the requests in flight answered (bounded), then the loop ends

void Worker::on_stop(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  if (w->draining) return;
  w->draining = true;
  w->drain_deadline = Clock::now() + kDrainLimit;
  w->gateway->drain_waiters();
  event_del(w->listen_ev);
  evtimer_del(w->resume_ev);
  timeval tv{0, 5000};
  event_add(w->drain_ev, &tv);
}

void Worker::on_drain(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  // This pass's batches first (this timer may run before their events): the requests read are
  // handled, the answers written, before the connections go.
  if (w->io && !w->to_read.empty()) on_read_batch(-1, 0, w);
  if (w->io && !w->to_send.empty()) on_send_batch(-1, 0, w);
  if (w->inflight > 0 && Clock::now() < w->drain_deadline) return;  // persistent: next tick
  if (w->inflight > 0)
    spdlog::warn("worker {}: {} requests abandoned at shutdown", w->index, w->inflight);
  event_del(w->drain_ev);
  // Closes idle keep-alive connections too.
  w->stopped = true;
  w->inbox->close();  // an answer that comes now has no connection to go to
  for (auto& c : w->conns)
    if (c->fd >= 0) w->metrics->http_connection_closed();
  w->drop_all();
  event_base_loopexit(w->base, nullptr);
}

}  // namespace dripgate::control::http
