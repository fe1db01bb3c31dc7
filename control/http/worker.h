// The HTTP server's worker, private to control/http/: one per thread, with its event loop, its
// Gateway and its connections. A Connection is the transport's (socket, parser, buffers,
// timers; connection.cc); a Request is what a handler gets of it (handlers.h): the request
// being answered and the way to answer it. The route table between them is router.cc.
#pragma once

#include <event2/event.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "control/gateway/gateway.h"
#include "control/http/api.h"
#include "control/http/http_request.h"
#include "control/http/http_server.h"
#include "control/http/inbox.h"
#include "control/http/io_batch.h"
#include "control/http/tls_context.h"

namespace dripgate::control::http {

using Clock = std::chrono::steady_clock;

struct Worker;
struct Connection;

// Idle connections, longest idle first (each joins at the back when it becomes idle), linked
// through the connections themselves: joining and leaving on every request allocates nothing.
struct IdleQueue {
  Connection* head = nullptr;
  Connection* tail = nullptr;
};

// One accepted connection. Its requests are read one at a time: the parser stops at the end of
// each and goes on once it is answered, so pipelined requests are answered in order, and what
// arrives meanwhile waits in `pending`. Answers go to `out` and leave in one send() when the
// bytes read so far are handled (or the asynchronous answer arrives); EV_WRITE is watched only
// after a short write.
struct Connection {
  Connection(Worker* w, int fd_, HttpRequestParser::Limits limits)
      : worker(w), fd(fd_), parser(limits) {}
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Worker* worker;
  int fd;
  size_t slot = 0;  // in worker->conns
  event* read_ev = nullptr;
  event* write_ev = nullptr;  // made on the first short write
  event* deadline = nullptr;  // a complete request within request_timeout_s; or the linger
  // Since accept or the last answer: what the request deadline runs from. The deadline's timer
  // is not moved for every request; it checks this when it fires (on_deadline).
  Clock::time_point idle_since{};
  HttpRequestParser parser;
  // TLS (control.tls): reads and writes go through it, never through the worker's io_uring
  // batches; null: plaintext.
  SslPtr ssl;
  bool tls_read_wants_write = false;  // a read (handshake) waits for the socket to take bytes
  std::string pending;                // read, not parsed yet
  std::string out;                    // answers not written yet, from out_at
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
  // The gateway's handle of the request in progress while it may wait for a gate (0: none): a
  // connection closed meanwhile abandons it.
  uint64_t waiter = 0;
  // While idle: the worker's unused or kept queue and the neighbours in it.
  IdleQueue* queue = nullptr;
  Connection* prev = nullptr;
  Connection* next = nullptr;

  bool output_waits() const { return out_at < out.size(); }
  void leave_queue();
  void enter_queue(IdleQueue& q);
};

// What a handler gets: its connection's current request (one at a time per connection). It
// stays valid until answered, the connection being kept (or, closed meanwhile, orphaned) until
// then. A handler answers exactly once: at once with answer(), or after defer() with finish()
// from a callback on the worker's loop (another thread's goes there through the worker's Inbox).
// Two pointers, copied into the callbacks that answer it.
class Request {
 public:
  Request(Worker* w, Connection* c) : worker_(w), conn_(c) {}
  Worker& worker() const { return *worker_; }
  const HttpRequest& http() const { return conn_->parser.request(); }
  std::string_view path() const { return http().path; }
  const std::string& body() const { return http().body; }
  // The connection's socket (getpeername: who is calling).
  int fd() const { return conn_->fd; }

  void answer(const api::Response& r, std::string_view content_type = "application/json") const;
  // The answer comes later (from a Redis reply): the worker counts it in flight until finish().
  void defer() const;
  void finish(const api::Response& r) const;
  // The deferred request may wait in the gateway's queue under this handle (0: it may not).
  void waiting(uint64_t handle) const { conn_->waiter = handle; }

 private:
  Worker* worker_;
  Connection* conn_;  // not read by finish() once the worker stopped: it may be gone
};

struct Worker {
  Worker() = default;
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  HttpServer* server = nullptr;
  const ConfigStore* store = nullptr;
  Metrics* metrics = nullptr;
  ReloadThread* reloads = nullptr;  // where POST /v1/admin/reload asks (null: 404)
  const TlsContext* tls = nullptr;  // HTTPS; null: plaintext
  StatusScrape* status = nullptr;   // the status page's scrape; null: none
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();  // answers from other threads
  int index = 0;
  event_base* base = nullptr;
  int listen_fd = -1;  // this worker's copy of the listening socket, in its own epoll set
  event* listen_ev = nullptr;
  std::unique_ptr<Gateway> gateway;
  WaitBudget* waits = nullptr;  // the daemon's, shared with the other workers and the gRPC front
  event* stop_ev = nullptr;
  event* drain_ev = nullptr;
  event* resume_ev = nullptr;  // accepting again after an accept() error
  int inflight = 0;
  bool draining = false;
  bool stopped = false;  // the connections are gone: a late answer has nowhere to go
  Clock::time_point drain_deadline{};
  int cap = 0;   // this worker's share of max_connections
  int open = 0;  // connections holding a socket (orphans do not)
  HttpRequestParser::Limits limits;
  // libevent's common timeouts (one queue per duration, O(1) to add and remove) for the request
  // deadline, armed at accept and again when it fires in a request, and the linger.
  const timeval* request_timeout = nullptr;
  Clock::duration request_limit{};  // request_timeout_s
  const timeval* linger_timeout = nullptr;
  IdleQueue unused, kept;  // never completed a request; kept alive between requests
  std::vector<std::unique_ptr<Connection>> conns;
  // How long a worker stops accepting after accept() failed (out of file descriptors, mostly):
  // the connection waits in the backlog, and retrying at once would spin on it.
  static constexpr timeval kAcceptBackoff{0, 100 * 1000};
  // What one read() takes at most, into a buffer shared by the worker's connections.
  static constexpr size_t kReadChunk = 64 * 1024;
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
  // Connection::queued_read, queued_send; a closed one: null.
  std::vector<Connection*> to_read, to_send;
  std::vector<IoBatch::Op> ops;
  // What a batched read takes of a connection at once (an admission request is a few hundred
  // bytes; a larger one takes several passes, each read at once as the socket stays readable).
  static constexpr size_t kBatchRead = 4096;
  std::vector<char> read_slots;  // kBatchRead bytes per op of a read batch
  event* read_ev = nullptr;      // made active by the first connection queued in a pass
  event* send_ev = nullptr;

  // The worker's events, made by HttpServer::start.
  static void on_listen(evutil_socket_t, short, void* arg);
  static void on_resume(evutil_socket_t, short, void* arg);
  static void on_stop(evutil_socket_t, short, void* arg);
  static void on_drain(evutil_socket_t, short, void* arg);
  static void on_read_batch(evutil_socket_t, short, void* arg);
  static void on_send_batch(evutil_socket_t, short, void* arg);

  // Answers c's request in progress (Request::answer).
  void reply(Connection* c, const api::Response& r, std::string_view content_type);
  // Answers an asynchronous request unless the worker stopped meanwhile, or drops it when its
  // connection went meanwhile (Request::finish).
  void finish(Connection* c, const api::Response& r);

 private:
  static void on_readable(evutil_socket_t, short, void* arg);
  static void on_writable(evutil_socket_t, short, void* arg);
  static void on_deadline(evutil_socket_t, short, void* arg);

  void adopt(int fd);
  void drop_all();
  Connection* longest_idle();
  bool close_conn(Connection* c);
  void destroy(Connection* c);
  void got(Connection* c, ssize_t n, const char* data);
  void tls_read(Connection* c);
  ssize_t tls_send(Connection* c);
  void watch_writable(Connection* c);
  template <class Make, class Done>
  void run_batch(std::vector<Connection*>& batch, bool Connection::*queued, Make make, Done done);
  void io_failed();
  void pause_reading(Connection* c);
  void resume_reading(Connection* c);
  void peer_closed(Connection* c);
  void parse(Connection* c, const char* data, size_t n);
  void parse_pending(Connection* c);
  void write_answer(Connection* c, const api::Response& r, std::string_view content_type, bool head,
                    int minor, bool keep_alive);
  const std::string& date_header();
  bool flush(Connection* c);
  bool send_soon(Connection* c);
  void written(Connection* c);
  bool done_with(Connection* c);
};

inline void Request::answer(const api::Response& r, std::string_view content_type) const {
  worker_->reply(conn_, r, content_type);
}
inline void Request::defer() const {
  ++worker_->inflight;
}
inline void Request::finish(const api::Response& r) const {
  worker_->finish(conn_, r);
}

}  // namespace dripgate::control::http
