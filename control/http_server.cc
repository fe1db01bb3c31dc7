#include "control/http_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "common/id.h"
#include "control/api.h"
#include "control/gateway.h"
#include "control/reload.h"
#include "control/tenant_registry.h"

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

bool asks_to_close(evhttp_request* req) {
  const char* c = evhttp_find_header(evhttp_request_get_input_headers(req), "Connection");
  return (c && strcasecmp(c, "close") == 0) ||
         evhttp_request_get_command(req) == EVHTTP_REQ_CONNECT;
}

const char* reason_phrase(int status) {
  switch (status) {
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
    case 429:
      return "Too Many Requests";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

const char* method_name(evhttp_cmd_type m) {
  switch (m) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_PUT:
      return "PUT";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    default:
      return "?";
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
  // One accepted connection: its deadline for a complete request and, while no request is in
  // progress on it, its place in an eviction queue.
  struct Conn {
    Worker* worker = nullptr;
    evhttp_connection* evcon = nullptr;
    event* deadline = nullptr;
    bool closing = false;  // answered a client that asked to close: the deadline is now
    // While idle: the worker's unused or kept queue and where in it. None while a request is
    // in progress (complete, not yet answered).
    std::list<Conn*>* queue = nullptr;
    std::list<Conn*>::iterator at;
    ~Conn() {
      leave_queue();
      if (deadline) event_free(deadline);
    }
    void leave_queue() {
      if (queue) queue->erase(at);
      queue = nullptr;
    }
    void enter_queue(std::list<Conn*>& q) {
      leave_queue();
      queue = &q;
      at = q.insert(q.end(), this);
    }
  };

  HttpServer* server = nullptr;
  int index = 0;
  event_base* base = nullptr;
  evhttp* http = nullptr;
  evhttp_bound_socket* bound = nullptr;
  std::unique_ptr<Gateway> gateway;
  event* stop_ev = nullptr;
  event* drain_ev = nullptr;
  int inflight = 0;
  bool draining = false;
  bool http_freed = false;
  bool in_evhttp_cb = false;  // inside evhttp's request callback: evhttp may not free the request
  std::string path;           // of the request being dispatched (valid until its handler returns)
  Clock::time_point drain_deadline{};
  int cap = 0;  // this worker's share of max_connections
  // Idle connections, longest idle first (each joins at the back when it becomes idle): those
  // that never completed a request, and kept-alive ones between requests.
  std::list<Conn*> unused, kept;
  std::unordered_map<evhttp_connection*, std::unique_ptr<Conn>> conns;
  std::vector<bufferevent*> fresh;  // accepted since the last adopt_ev, each with a reference
  event* adopt_ev = nullptr;
  event* resume_ev = nullptr;  // accepting again after an accept() error

  ~Worker() {
    gateway.reset();
    if (http) evhttp_free(http);  // closes the connections (on_closed)
    release_fresh();
    conns.clear();
    for (event* ev : {stop_ev, drain_ev, adopt_ev, resume_ev})
      if (ev) event_free(ev);
    if (base) event_base_free(base);
  }

  // ---- connections: the cap, the request deadline, accept errors ----
  //
  // evhttp accepts and owns its connections and has no cap or per-request deadline of its own
  // (its timeout restarts with every byte read). It lets us create each connection's
  // bufferevent, though: on_new_connection notes it, and adopt() (run right after, before any
  // byte is read) finds the evhttp_connection that evhttp made the bufferevent's callback
  // argument, makes room for it or refuses it, arms its deadline and a close callback that
  // counts it out.
  //
  // Each worker keeps its own share of max_connections and decides alone, in the order it
  // accepted: with one count for all workers, a worker could count in a connection accepted
  // after one that another worker (preempted between accept() and adopt()) then refused, and a
  // slot freed on one worker could go to a connection the other had already turned away.
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

  static bufferevent* on_new_connection(event_base* base, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    bufferevent* bev = bufferevent_socket_new(base, -1, 0);  // as evhttp's own
    if (!bev) return nullptr;
    bufferevent_incref(bev);  // adopt() may run after evhttp freed it (a failed setup)
    w->fresh.push_back(bev);
    event_active(w->adopt_ev, EV_TIMEOUT, 0);
    return bev;
  }

  static void on_adopt(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    std::vector<bufferevent*> batch;
    batch.swap(w->fresh);
    for (bufferevent* bev : batch) {
      w->adopt(bev);
      bufferevent_decref(bev);
    }
  }

  void release_fresh() {
    for (bufferevent* bev : fresh) bufferevent_decref(bev);
    fresh.clear();
  }

  void adopt(bufferevent* bev) {
    void* arg = nullptr;
    bufferevent_getcb(bev, nullptr, nullptr, nullptr, &arg);
    auto* evcon = static_cast<evhttp_connection*>(arg);
    if (!evcon || evhttp_connection_get_bufferevent(evcon) != bev) return;  // freed meanwhile
    if (static_cast<int>(conns.size()) >= cap) {
      Conn* victim = longest_idle();
      if (!victim) {
        server->metrics_.http_connection_refused();
        evhttp_connection_free(evcon);
        return;
      }
      server->metrics_.http_connection_evicted();
      evhttp_connection_free(victim->evcon);  // on_closed frees victim
    }
    server->metrics_.http_connection_opened();
    auto c = std::make_unique<Conn>();
    c->worker = this;
    c->evcon = evcon;
    c->deadline = evtimer_new(base, &Worker::on_deadline, c.get());
    evhttp_connection_set_closecb(evcon, &Worker::on_closed, c.get());
    arm(*c, server->opts_.request_timeout_s);
    c->enter_queue(unused);
    conns.emplace(evcon, std::move(c));
  }

  Conn* longest_idle() {
    for (std::list<Conn*>* q : {&unused, &kept})
      if (!q->empty()) return q->front();
    return nullptr;
  }

  static void arm(Conn& c, int seconds) {
    timeval tv{seconds, 0};
    evtimer_add(c.deadline, &tv);
  }

  // Only armed while evhttp reads a request (or is done answering one), never while a handler
  // owns it, so freeing the connection here is what evhttp does on its own timeouts.
  static void on_deadline(evutil_socket_t, short, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    if (!c->closing) c->worker->server->metrics_.http_request_timeout();
    evhttp_connection_free(c->evcon);  // on_closed frees c
  }

  static void on_closed(evhttp_connection* evcon, void* arg) {
    Worker* w = static_cast<Conn*>(arg)->worker;
    w->server->metrics_.http_connection_closed();
    w->conns.erase(evcon);
  }

  // A complete request arrived: no deadline while it is handled; the next one's starts when it
  // is answered. A client that asked to close has its connection closed right after the answer.
  void request_arrived(evhttp_request* req) {
    evhttp_connection* evcon = evhttp_request_get_connection(req);
    auto it = evcon ? conns.find(evcon) : conns.end();
    if (it == conns.end()) return;
    evtimer_del(it->second->deadline);
    it->second->leave_queue();
    evhttp_request_set_on_complete_cb(req, &Worker::on_answered, it->second.get());
  }

  static void on_answered(evhttp_request* req, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    // evhttp closes such a connection itself, except after a CONNECT.
    c->closing = asks_to_close(req);
    arm(*c, c->closing ? 0 : c->worker->server->opts_.request_timeout_s);
    if (!c->closing) c->enter_queue(c->worker->kept);
  }

  // evconnlistener passes its accept callback's argument (evhttp's), so the worker is found by
  // its thread.
  static thread_local Worker* current;

  static void on_accept_error(evconnlistener* lev, void*) {
    Worker* w = current;
    w->server->accept_failed(EVUTIL_SOCKET_ERROR());
    evconnlistener_disable(lev);
    evtimer_add(w->resume_ev, &kAcceptBackoff);
  }

  static void on_resume(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    if (!w->draining && w->bound) evconnlistener_enable(evhttp_bound_socket_get_listener(w->bound));
  }

  void reply(evhttp_request* req, const api::Response& r,
             const char* content_type = "application/json") {
    evkeyvalq* h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", content_type);
    for (const auto& [k, v] : r.headers) evhttp_add_header(h, k.c_str(), v.c_str());
    // HEAD: the headers of the answer without its body. evhttp would send a body it was given
    // (without a Content-Length) and adds no Content-Length of its own.
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
      evhttp_add_header(h, "Content-Length", std::to_string(r.body.size()).c_str());
    else
      evbuffer_add(evhttp_request_get_output_buffer(req), r.body.data(), r.body.size());
    // Taken before the reply: evhttp may free the request (and the connection) from there on.
    bufferevent* bev = nullptr;
    if (!in_evhttp_cb) {
      evhttp_connection* evcon = evhttp_request_get_connection(req);
      bev = evcon ? evhttp_connection_get_bufferevent(evcon) : nullptr;
    }
    evhttp_send_reply(req, r.status, reason_phrase(r.status), nullptr);
    server->metrics_.http_request(r.status);
    if (bev) write_now(bev);
  }

  // evhttp writes a reply only once epoll reports the socket writable, which costs an
  // epoll_ctl to watch EPOLLOUT, a wakeup, and an epoll_ctl to unwatch it, per request. The
  // socket almost always has room, so write here and run evhttp's write-done step (which frees
  // the request and starts reading the next one); a short write or an error is left to the
  // bufferevent, which handles it as before. Not from evhttp's own request callback: there
  // the write-done step could free the connection under evhttp's feet.
  static void write_now(bufferevent* bev) {
    evbuffer* out = bufferevent_get_output(bev);
    if (evbuffer_get_length(out) == 0) return;
    // A socket bufferevent keeps its output's start frozen outside its own write callback.
    evbuffer_unfreeze(out, 1);
    int n = evbuffer_write(out, bufferevent_getfd(bev));
    evbuffer_freeze(out, 1);
    if (n > 0 && evbuffer_get_length(out) == 0)
      bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS);
  }

  // Answers an asynchronous request unless the server was torn down meanwhile.
  void finish(evhttp_request* req, const api::Response& r) {
    --inflight;
    if (!http_freed) reply(req, r);
  }

  std::string body_of(evhttp_request* req) {
    evbuffer* in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    std::string s(n, '\0');
    if (n) evbuffer_copyout(in, s.data(), n);
    return s;
  }

  // ---- one handler per endpoint: parse, ask the gateway, render ----

  void handle_admit(evhttp_request* req) {
    AdmitRequest ar;
    if (auto e = api::parse_admit(body_of(req), ar)) {
      server->metrics_.admission("", "", "bad_request");
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->admit(std::move(ar), [this, req](const AdmitDecision& d) {
      finish(req, api::render_admit(d.result, d.flow_tag));
    });
  }

  void handle_settle(evhttp_request* req) {
    SettleRequest sr;
    if (auto e = api::parse_settle(body_of(req), sr)) {
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->settle(std::move(sr),
                    [this, req](const SettleResult& r) { finish(req, api::render_settle(r)); });
  }

  void handle_charge(evhttp_request* req) {
    ChargeRequest cr;
    if (auto e = api::parse_charge(body_of(req), cr)) {
      server->metrics_.charge("", "bad_request");
      return reply(req, api::render_error(400, e->str()));
    }
    ++inflight;
    gateway->charge(std::move(cr),
                    [this, req](const ChargeResult& r) { finish(req, api::render_charge(r)); });
  }

  void handle_release(evhttp_request* req) {
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
  void handle_healthz(evhttp_request* req) {
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
    reply(req,
          api::Response{status == "ok" || status == "degraded" ? 200 : 503, {}, j.dump() + "\n"});
  }

  // For orchestrators: ready to decide admissions (Redis answers; a configuration is always in
  // force once serving: the daemon does not start without one); 503 with the reasons otherwise.
  void handle_readyz(evhttp_request* req) {
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
  void handle_reload(evhttp_request* req) {
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
  std::string tenant_of(evhttp_request* req) {
    std::string id = path.substr(std::min(path.size(), kTenantsPath.size()));
    if (common::valid_id(id)) return id;
    reply(req, api::render_error(400, "tenant: must match [A-Za-z0-9._-]{1,64} (in the path)"));
    return {};
  }

  void handle_tenant_put(evhttp_request* req) {
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

  void handle_tenant_get(evhttp_request* req) {
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

  void handle_tenant_delete(evhttp_request* req) {
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

  // GET /v1/admin/tenants?cursor=<last id of the previous page>&limit=<1..1000>: the registry's
  // tenants in id order.
  void handle_tenant_list(evhttp_request* req) {
    const std::shared_ptr<const TenantDirectory>& dir = gateway->registry();
    if (!dir) return reply(req, api::render_error(503, "the tenant registry is not read yet"));
    evkeyvalq q{};
    const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
    const char* query = uri ? evhttp_uri_get_query(uri) : nullptr;
    if (query && evhttp_parse_query_str(query, &q) != 0)
      return reply(req, api::render_error(400, "the query string is malformed"));
    std::string cursor;
    size_t limit = kDefaultPage;
    std::string error;
    for (evkeyval* kv = q.tqh_first; kv && error.empty(); kv = kv->next.tqe_next) {
      std::string_view key = kv->key, value = kv->value;
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
        error = std::string(key) + ": unknown parameter (cursor, limit)";
      }
    }
    evhttp_clear_headers(&q);
    if (!error.empty()) return reply(req, api::render_error(400, error));
    // One more than asked says whether a next page exists.
    std::vector<TenantDirectory::Entry> page = dir->page(cursor, limit + 1);
    const bool more = page.size() > limit;
    if (more) page.pop_back();
    reply(req, api::render_tenant_page(page, more, dir->version()));
  }

  void handle_metrics(evhttp_request* req) {
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
    evhttp_cmd_type method;
    Auth auth;
    void (Worker::*handle)(evhttp_request*);
  };
  static constexpr Route kRoutes[] = {
      {"/v1/admit", EVHTTP_REQ_POST, Auth::kApi, &Worker::handle_admit},
      {"/v1/settle", EVHTTP_REQ_POST, Auth::kApi, &Worker::handle_settle},
      {"/v1/charge", EVHTTP_REQ_POST, Auth::kApi, &Worker::handle_charge},
      {"/v1/release", EVHTTP_REQ_POST, Auth::kApi, &Worker::handle_release},
      {"/v1/admin/reload", EVHTTP_REQ_POST, Auth::kAdmin, &Worker::handle_reload},
      {"/v1/admin/tenants", EVHTTP_REQ_GET, Auth::kAdmin, &Worker::handle_tenant_list},
      // A path ending in '/' is a prefix: the rest is the resource (a tenant id).
      {kTenantsPath, EVHTTP_REQ_GET, Auth::kAdmin, &Worker::handle_tenant_get},
      {kTenantsPath, EVHTTP_REQ_PUT, Auth::kAdmin, &Worker::handle_tenant_put},
      {kTenantsPath, EVHTTP_REQ_DELETE, Auth::kAdmin, &Worker::handle_tenant_delete},
      {"/healthz", EVHTTP_REQ_GET, Auth::kNone, &Worker::handle_healthz},
      {"/readyz", EVHTTP_REQ_GET, Auth::kNone, &Worker::handle_readyz},
      {"/metrics", EVHTTP_REQ_GET, Auth::kNone, &Worker::handle_metrics},
  };

  // Whether the request may use the route; answers it when not. The tokens come from the
  // configuration in force, so a reload rotates them.
  bool authorized(evhttp_request* req, Auth auth) {
    if (auth == Auth::kNone) return true;
    const config::Control& c = gateway->snapshot()->cfg.control;
    const std::string& token = auth == Auth::kAdmin ? c.admin_token : c.auth_token;
    if (token.empty()) {
      if (auth == Auth::kApi) return true;
      reply(req, api::render_error(404, "the admin API is off: set control.admin_token"));
      return false;
    }
    const char* got = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (api::token_matches(token, got)) return true;
    api::Response r = api::render_error(
        401, got ? "invalid bearer token" : "missing bearer token (Authorization: Bearer …)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"dripgate\"");
    reply(req, r);
    return false;
  }

  static void on_request(evhttp_request* req, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    w->in_evhttp_cb = true;
    w->dispatch(req);
    w->in_evhttp_cb = false;
  }

  void dispatch(evhttp_request* req) {
    request_arrived(req);
    const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
    const char* p = uri ? evhttp_uri_get_path(uri) : nullptr;
    path = p ? p : "";
    // CONNECT's target is an authority, so evhttp parses no path out of it.
    if (path.empty() && evhttp_request_get_uri(req)) path = evhttp_request_get_uri(req);
    const Route* route = nullptr;
    std::string allow;  // the methods of the path
    for (const Route& r : kRoutes) {
      bool match = r.path == path || (r.path.back() == '/' && path.size() > r.path.size() &&
                                      path.starts_with(r.path));
      if (!match) continue;
      allow += (allow.empty() ? "" : ", ") + std::string(method_name(r.method));
      if (evhttp_request_get_command(req) == r.method) route = &r;
    }
    if (allow.empty()) return reply(req, api::render_error(404, "no such path: " + path));
    if (!route) {
      api::Response r = api::render_error(405, "use " + allow);
      r.headers.emplace_back("Allow", allow);
      return reply(req, r);
    }
    if (authorized(req, route->auth)) (this->*route->handle)(req);
  }

  static void on_stop(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    if (w->draining) return;
    w->draining = true;
    w->drain_deadline = Clock::now() + kDrainLimit;
    if (w->bound) evconnlistener_disable(evhttp_bound_socket_get_listener(w->bound));
    evtimer_del(w->resume_ev);
    timeval tv{0, 5000};
    event_add(w->drain_ev, &tv);
  }

  static void on_drain(evutil_socket_t, short, void* arg) {
    auto* w = static_cast<Worker*>(arg);
    if (w->inflight > 0 && Clock::now() < w->drain_deadline) return;  // persistent: next tick
    if (w->inflight > 0)
      spdlog::warn("worker {}: {} requests abandoned at shutdown", w->index, w->inflight);
    event_del(w->drain_ev);
    // Closes idle keep-alive connections too.
    evhttp_free(w->http);
    w->http = nullptr;
    w->http_freed = true;
    w->release_fresh();
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
    // The changelist folds the add/del pairs that evhttp and hiredis make within one loop
    // iteration into at most one epoll_ctl per fd (each base has its own epoll set, so the
    // per-worker dup of the listening socket is never in the same set twice).
    event_config* ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    w->http = w->base ? evhttp_new(w->base) : nullptr;
    if (!w->http) {
      error = "cannot create an event loop";
      return false;
    }
    evhttp_set_max_body_size(w->http, opts_.max_body);
    evhttp_set_max_headers_size(w->http, 16 * 1024);
    // evhttp's own timeout restarts with every byte, so it only drops a client that stops
    // reading its answer; a second later than the request deadline (Conn), which it never
    // pre-empts.
    evhttp_set_timeout(w->http, opts_.request_timeout_s + 1);
    // Every method reaches the route table, which answers 405 with Allow (evhttp: 501).
    evhttp_set_allowed_methods(w->http, 0xffff);
    evhttp_set_gencb(w->http, &Worker::on_request, w.get());
    evhttp_set_bevcb(w->http, &Worker::on_new_connection, w.get());
    int fd = dup(listen_fd_);  // each evhttp closes its own copy when freed
    if (fd < 0) {
      error = std::string("dup: ") + std::strerror(errno);
      return false;
    }
    w->bound = evhttp_accept_socket_with_handle(w->http, fd);
    if (!w->bound) {
      close(fd);
      error = "cannot accept on " + opts_.listen;
      return false;
    }
    w->gateway =
        std::make_unique<Gateway>(store_, w->base, flows_, metrics_, opts_.dataplane_timeout_ms,
                                  decisions_.get(), "http", opts_.fallback);
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(w->bound),
                                &Worker::on_accept_error);
    w->stop_ev = event_new(w->base, -1, 0, &Worker::on_stop, w.get());
    w->drain_ev = event_new(w->base, -1, EV_PERSIST, &Worker::on_drain, w.get());
    w->adopt_ev = event_new(w->base, -1, 0, &Worker::on_adopt, w.get());
    w->resume_ev = evtimer_new(w->base, &Worker::on_resume, w.get());
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    threads_.emplace_back([this, wp = w.get()] { run_worker(wp); });
  }
  return true;
}

thread_local HttpServer::Worker* HttpServer::Worker::current = nullptr;

void HttpServer::run_worker(Worker* w) {
  Worker::current = w;
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
