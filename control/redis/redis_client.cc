#include "control/redis/redis_client.h"

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>

#include "control/redis/hiredis_shim.h"
#include "control/redis/reply_arena.h"
#include "control/redis/wall_clock.h"
#include "lua/lua_scripts.h"

namespace dripgate::control {

namespace {

// hiredis's libevent adapter (adapters/libevent.h) with one change: the read event persists.
// Its read event is one-shot, so every reply costs libevent a delete when it fires and an add
// when hiredis asks for the next read; with the base's epoll changelist that pair still ends in
// an epoll_ctl(MOD), a system call, per reply read. hiredis keeps
// reading wanted for as long as the context is attached, so a persistent event means the same
// and its addRead is a no-op on an event already pending. The events are freed by hiredis's
// cleanup hook when it frees the context.
struct LibeventEvents {
  redisAsyncContext* ac = nullptr;
  event* rev = nullptr;
  event* wev = nullptr;
  // rev, wev are added: hiredis asks for reading again after every read and write, and for
  // writing after every command, and event_add on an event already pending still takes the
  // base's lock and checks it: these flags make a repeated ask free.
  bool reading = false;
  bool writing = false;

  ~LibeventEvents() {
    if (rev) event_free(rev);
    if (wev) event_free(wev);
  }
};

bool attach_libevent(redisAsyncContext* ac, event_base* base) {
  auto owned = std::make_unique<LibeventEvents>();
  LibeventEvents* e = owned.get();
  e->ac = ac;
  e->rev = event_new(
      base, hiredis::socket_of(ac), EV_READ | EV_PERSIST,
      [](evutil_socket_t, short, void* arg) {
        redisAsyncHandleRead(static_cast<LibeventEvents*>(arg)->ac);
      },
      e);
  e->wev = event_new(
      base, hiredis::socket_of(ac), EV_WRITE,
      [](evutil_socket_t, short, void* arg) {
        auto* e = static_cast<LibeventEvents*>(arg);
        e->writing = false;  // fired: a one-shot event is no longer pending
        redisAsyncHandleWrite(e->ac);
      },
      e);
  if (!e->rev || !e->wev) return false;
  hiredis::install_events(ac, owned.release(),
                          {.add_read =
                               [](void* d) {
                                 auto* e = static_cast<LibeventEvents*>(d);
                                 if (!e->reading) e->reading = event_add(e->rev, nullptr) == 0;
                               },
                           .del_read =
                               [](void* d) {
                                 auto* e = static_cast<LibeventEvents*>(d);
                                 event_del(e->rev);
                                 e->reading = false;
                               },
                           .add_write =
                               [](void* d) {
                                 auto* e = static_cast<LibeventEvents*>(d);
                                 if (!e->writing) e->writing = event_add(e->wev, nullptr) == 0;
                               },
                           .del_write =
                               [](void* d) {
                                 auto* e = static_cast<LibeventEvents*>(d);
                                 event_del(e->wev);
                                 e->writing = false;
                               },
                           .cleanup = [](void* d) { delete static_cast<LibeventEvents*>(d); }});
  // As the adapter: a write event for the connect's completion, reading from the start.
  e->reading = event_add(e->rev, nullptr) == 0;
  e->writing = event_add(e->wev, nullptr) == 0;
  return true;
}

size_t digits(size_t v) {
  if (v < 10) return 1;
  if (v < 100) return 2;
  size_t n = 3;
  for (v /= 1000; v > 0; v /= 10) ++n;
  return n;
}

// v in decimal at w (room for it), returning its end: the lengths of a command's arguments
// are mostly one or two digits, written here without a call (inlined: twice per argument).
[[gnu::always_inline]] inline char* put_decimal(char* w, size_t v) {
  if (v < 10) {
    *w = static_cast<char>('0' + v);
    return w + 1;
  }
  if (v < 100) {
    w[0] = static_cast<char>('0' + v / 10);
    w[1] = static_cast<char>('0' + v % 10);
    return w + 2;
  }
  return std::to_chars(w, w + 20, v).ptr;
}

// A command in the Redis protocol, in one malloc'ed buffer as hiredis's own (freed by
// redisFreeCommand): written here with to_chars because redisFormatCommandArgv costs a sprintf
// per argument, which showed in the daemon's profile. each(f) calls f(arg) for every argument.
// *out of *cap bytes is written over when the command fits (a recycled call's buffer), else
// replaced by a new one.
template <class Each>
int format_command(char** out, size_t* cap, size_t argc, Each each) {
  size_t total = 1 + digits(argc) + 2;
  each([&](std::string_view a) { total += 1 + digits(a.size()) + 2 + a.size() + 2; });
  if (!*out || *cap < total) {
    char* fresh = static_cast<char*>(std::malloc(total));
    if (!fresh) throw std::bad_alloc();
    if (*out) redisFreeCommand(*out);
    *out = fresh;
    *cap = total;
  }
  char* buf = *out;
  char* w = buf;
  auto line = [&](char kind, size_t n) {
    *w++ = kind;
    w = put_decimal(w, n);
    *w++ = '\r';
    *w++ = '\n';
  };
  line('*', argc);
  each([&](std::string_view a) {
    line('$', a.size());
    std::memcpy(w, a.data(), a.size());
    w += a.size();
    *w++ = '\r';
    *w++ = '\n';
  });
  return static_cast<int>(total);
}

// format_command over a list of arguments.
int format_command(char** out, size_t* cap, std::span<const std::string_view> argv) {
  return format_command(out, cap, argv.size(), [&](auto f) {
    for (auto a : argv) f(a);
  });
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

// AUTH and SELECT must succeed before a connection serves; the others sent at connect (SCRIPT
// LOAD, CONFIG GET, TIME) may be refused and it serves all the same. Every one of them must be
// answered, though: a Redis that does not answer its setup would not answer calls either.
bool gates_ready(std::string_view what) {
  return what == "AUTH" || what == "SELECT";
}

timeval to_timeval(Clock::duration d) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  if (us < 0) us = 0;
  return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

}  // namespace

RedisOptions RedisOptions::from(const config::Redis& r) {
  RedisOptions o;
  o.host = r.host;
  o.port = r.port;
  o.unix_path = r.unix_path;
  o.user = r.user;
  o.password = r.password;
  o.db = r.db;
  o.timeout_ms = r.timeout_ms > 0 ? r.timeout_ms : 50;
  o.connect_timeout_ms = std::max(500, o.timeout_ms);
  o.pool_size = r.pool_size > 0 ? r.pool_size : 1;
  // Redis runs an admission script in 15 to 30 us, so within timeout_ms it answers at most some
  // 64 calls per millisecond of it, across the pool: a connection with more than its share in
  // flight could not have the last one answered in time anyway. At least 256, so that a short
  // timeout does not refuse a burst that a healthy Redis takes. An admission with every gate is
  // under 1 KiB on the wire (an undo with its snapshot about 1.5 KiB, SCRIPT LOAD is setup and
  // not counted): 1 KiB a call bounds the bytes a frozen Redis leaves in the kernel and hiredis.
  o.max_in_flight = std::max<size_t>(
      256, static_cast<size_t>(o.timeout_ms) * 64 / static_cast<size_t>(o.pool_size));
  o.max_in_flight_bytes = o.max_in_flight * 1024;
  return o;
}

struct RedisClient::Pending {
  Conn* conn = nullptr;
  Callback cb;
  char* cmd = nullptr;  // the formatted command, kept for the NOSCRIPT retry
  size_t cap = 0;       // cmd's size: a recycled call writes its command over it when it fits
  int len = 0;
  LateReply late;  // for a reply that comes after cb was answered with a timeout
  const lua::Script* script = nullptr;
  bool retried = false;
  bool answered = false;  // cb ran (timeout); the command is still on the wire
  bool setup = false;     // sent at connect (AUTH, SELECT, ...): bounded by the connect deadline
  bool queue = false;     // WhenStalled::kQueue: held again when its connection never came up
  bool asking = false;    // sent right behind an ASKING (a cluster's ASK redirect)
  Clock::time_point start;
  Clock::time_point deadline;

  Pending() = default;
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending() {
    if (cmd) redisFreeCommand(cmd);
  }
  // As new, but for cmd's buffer.
  void reset() {
    conn = nullptr;
    cb = nullptr;
    len = 0;
    late = nullptr;
    script = nullptr;
    retried = answered = setup = queue = asking = false;
    start = deadline = {};
  }
};

// A call's Pending and its command buffer are reused by the next call: two allocations and
// frees fewer per call. A few are kept, as many as a burst of calls in flight needs.
RedisClient::Pending* RedisClient::acquire() {
  if (spare_.empty()) return new Pending;
  Pending* p = spare_.back();
  spare_.pop_back();
  return p;
}

void RedisClient::recycle(Pending* p) {
  if (spare_.size() >= kMaxSpare) {
    delete p;
    return;
  }
  p->reset();
  spare_.push_back(p);
}

struct RedisClient::Conn {
  RedisClient* client = nullptr;
  redisAsyncContext* ac = nullptr;
  // Where ac's replies are built. It outlives every ac of this Conn: ~RedisClient frees them
  // before the Conns go. A dropped ac parses nothing more, so its replacement may share it.
  ReplyArena arena;
  // kHandshake: TCP is up, AUTH/SELECT not answered yet; only kUp counts as connected and
  // restarts the backoff, so a refused password backs off like a refused connect.
  enum class State { kDown, kConnecting, kHandshake, kUp } state = State::kDown;
  std::deque<Pending*> pending;  // in issue order = reply order
  event* timer = nullptr;        // command and connect deadlines
  Clock::time_point timer_at;    // when timer fires, while it is pending
  event* reconnect = nullptr;
  Clock::time_point connect_deadline;
  int setup_left = 0;          // setup replies still awaited
  size_t in_flight = 0;        // calls written and not answered (setup commands not counted)
  size_t in_flight_bytes = 0;  // their commands' bytes
  // Failed since it was last ready (stalled, refused, dropped): while it reconnects, new calls
  // fail fast rather than wait behind a handshake a frozen Redis may never answer. Only the
  // first connect of a client takes calls before it is ready.
  bool retrying = false;
  Clock::time_point probe_at;  // the next TIME on this connection (clock_offset_ms)
  int backoff_ms = 0;
  // TCP connected since the last connect(): commands may have been written, so a command whose
  // reply does not come may have run.
  bool reached = false;
  bool logged_down = false;
  bool unflushed = false;   // commands queued since the last flush
  std::string fail_reason;  // for the commands flushed by a failure we initiated

  bool connecting() const { return state == State::kConnecting || state == State::kHandshake; }
  // Being torn down by hiredis (an error or EOF): the pending callbacks run before the
  // disconnect callback marks it down, and a command written from one of them is refused.
  bool closing() const { return ac && hiredis::closing(ac); }

  ~Conn() {
    if (timer) event_free(timer);
    if (reconnect) event_free(reconnect);
  }
};

struct RedisClient::Posted {
  event* ev = nullptr;
  std::function<void()> fn;
  RedisClient* client = nullptr;
};

void RedisClient::run_posted(int, short, void* arg) {
  auto* p = static_cast<Posted*>(arg);
  p->client->posted_.erase(p);
  auto fn = std::move(p->fn);
  event_free(p->ev);
  delete p;
  fn();
}

RedisClient::RedisClient(event_base* base, RedisOptions opts,
                         std::vector<const lua::Script*> scripts, RedisObserver* observer)
    : base_(base), opts_(std::move(opts)), scripts_(std::move(scripts)), observer_(observer) {
  if (observer_) observer_->up(false);
  flush_ev_ = event_new(base_, -1, 0, &RedisClient::on_flush, this);
  int n = std::max(1, opts_.pool_size);
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<Conn>();
    c->client = this;
    c->timer = evtimer_new(base_, &RedisClient::on_timer, c.get());
    c->reconnect = evtimer_new(base_, &RedisClient::on_reconnect, c.get());
    c->backoff_ms = opts_.backoff_min_ms;
    conns_.push_back(std::move(c));
  }
  for (auto& c : conns_) connect(c.get());
}

RedisClient::~RedisClient() {
  shutting_down_ = true;
  for (auto& c : conns_) {
    event_del(c->reconnect);
    event_del(c->timer);
    if (c->ac) {
      auto* ac = c->ac;
      c->fail_reason = "redis: client shut down";
      c->ac = nullptr;
      c->state = Conn::State::kDown;
      redisAsyncFree(ac);  // runs the pending callbacks with a null reply
    }
  }
  for (Pending* p : held_) complete(p, nullptr, "redis: client shut down");
  held_.clear();
  // Deferred callbacks still run, so nobody waits forever or leaks their context.
  while (!posted_.empty()) {
    Posted* p = *posted_.begin();
    posted_.erase(posted_.begin());
    auto fn = std::move(p->fn);
    event_free(p->ev);
    delete p;
    fn();
  }
  // Last: the callbacks above may still queue commands (which send() no longer flushes).
  event_free(flush_ev_);
  for (Pending* p : spare_) delete p;
}

void RedisClient::post(std::function<void()> fn) {
  auto* p = new Posted;
  p->fn = std::move(fn);
  p->client = this;
  p->ev = evtimer_new(base_, &RedisClient::run_posted, p);
  posted_.insert(p);
  timeval zero{0, 0};
  evtimer_add(p->ev, &zero);
}

void RedisClient::set_connected(Conn* c, bool is) {
  static_cast<void>(c);
  int before = connected_count_.fetch_add(is ? 1 : -1, std::memory_order_relaxed);
  int after = before + (is ? 1 : -1);
  if (observer_ && (before == 0) != (after == 0)) observer_->up(after > 0);
  if (before == 0 && after > 0)
    spdlog::info("redis: connected to {}", opts_.unix_path.empty()
                                               ? opts_.host + ":" + std::to_string(opts_.port)
                                               : opts_.unix_path);
  if (before > 0 && after == 0) spdlog::warn("redis: no connection left; reconnecting");
}

void RedisClient::connect(Conn* c) {
  if (shutting_down_) return;
  redisAsyncContext* ac = opts_.unix_path.empty()
                              ? redisAsyncConnect(opts_.host.c_str(), opts_.port)
                              : redisAsyncConnectUnix(opts_.unix_path.c_str());
  const bool failed = !ac || ac->err || !attach_libevent(ac, base_);
  if (failed) {
    std::string why = ac && ac->err ? ac->errstr : "out of memory";
    if (ac) redisAsyncFree(ac);
    c->retrying = true;
    if (observer_) observer_->error("connect");
    if (!c->logged_down) spdlog::warn("redis: cannot connect: {}", why);
    c->logged_down = true;
    schedule_reconnect(c);
    return;
  }
  ac->data = c;
  c->arena.attach(hiredis::reader_of(ac));
  redisAsyncSetConnectCallback(ac, &RedisClient::on_connect_cb);
  redisAsyncSetDisconnectCallback(ac, &RedisClient::on_disconnect_cb);
  c->ac = ac;
  c->state = Conn::State::kConnecting;
  c->reached = false;
  c->connect_deadline = Clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
  c->setup_left = 0;

  // Pipelined behind the connect: hiredis sends them once the socket is writable, before any
  // request that picks this connection, so an EVALSHA never overtakes its SCRIPT LOAD.
  std::string db = std::to_string(opts_.db);
  if (!opts_.password.empty()) {
    // An ACL user authenticates as itself; without one, AUTH names the default user.
    if (opts_.user.empty())
      setup(c, {"AUTH", opts_.password}, "AUTH");
    else
      setup(c, {"AUTH", opts_.user, opts_.password}, "AUTH");
  }
  if (opts_.db != 0) setup(c, {"SELECT", db}, "SELECT");
  for (const auto* s : scripts_) setup(c, {"SCRIPT", "LOAD", s->text}, "SCRIPT LOAD");
  // What admit.lua's conversion of reservation windows depends on (kListpackBreakerBytes);
  // answered or refused, the connection serves either way.
  setup(c, {"CONFIG", "GET", "hash-max-listpack-value"}, "CONFIG GET");
  // Last, so that its reply is read right after Redis ran it (clock_offset_ms).
  setup(c, {"TIME"}, "TIME");
  arm_timer(c);
}

void RedisClient::setup(Conn* c, std::vector<std::string_view> argv, const char* what) {
  auto* p = acquire();
  p->setup = true;
  p->len = format_command(&p->cmd, &p->cap, argv);
  p->cb = [this, c, what](const redisReply* r, std::string_view) { on_setup_reply(c, what, r); };
  ++c->setup_left;
  send(c, p);
}

void RedisClient::on_setup_reply(Conn* c, const char* what, const redisReply* r) {
  if (!r || shutting_down_) return;  // the connection failed; handled there
  const std::string_view name(what);
  if (name == "CONFIG GET")
    on_listpack_value(r);
  else if (name == "TIME")
    on_time(r);
  else if (r->type == REDIS_REPLY_ERROR && !on_setup_error(c, what, r))
    return;  // the connection was dropped
  if (--c->setup_left == 0 && c->state == Conn::State::kHandshake) on_ready(c);
}

// Redis's clock from a TIME reply read just now: Redis ran it between the write and now, so the
// offset is exact to within the reply's way back (kSkewAllowanceMs covers that).
void RedisClient::on_time(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
    return;  // refused (an ACL): the unmeasured allowance stays
  const int64_t redis_ms =
      std::atoll(r->element[0]->str) * 1000 + std::atoll(r->element[1]->str) / 1000;
  clock_offset_ms_.store(redis_ms - wall_ms(), std::memory_order_relaxed);
}

int64_t RedisClient::deadline_for(int64_t offset, int64_t give_up_ms) {
  const int64_t now_ms = wall_ms();
  if (offset == kUnknownOffset) return now_ms + give_up_ms + kUnmeasuredSkewMs;
  return now_ms + offset + give_up_ms + kSkewAllowanceMs;
}

// A TIME on a connection that serves, every kClockProbe, so that the offset follows clocks that
// drift or are stepped while a connection lives for days. Its reply is not waited for.
void RedisClient::probe_clock(Conn* c) {
  c->probe_at = Clock::now() + kClockProbe;
  auto* p = acquire();
  const std::string_view argv[] = {"TIME"};
  p->len = format_command(&p->cmd, &p->cap, argv);
  p->cb = [this](const redisReply* r, std::string_view) { on_time(r); };
  send(c, p);
}

// A setup command refused: false when that drops the connection (AUTH or SELECT).
bool RedisClient::on_setup_error(Conn* c, const char* what, const redisReply* r) {
  std::string why = std::string("redis: ") + what + " failed: " + std::string(r->str, r->len);
  if (!gates_ready(what)) {
    // Each pooled connection loads each script, again at every reconnect: a Redis that refuses
    // them all (loading its dataset after a restart, an ACL without SCRIPT) would write a line
    // per script and connection. One line a second, with the count since.
    if (observer_) observer_->error("script_load");
    auto now = Clock::now();
    if (now < script_log_next_) {
      ++script_log_quiet_;
      return true;
    }
    script_log_next_ = now + std::chrono::seconds(1);
    if (script_log_quiet_ == 0)
      spdlog::error("{}", why);
    else
      spdlog::error("{} ({} more refused since the last line)", why,
                    std::exchange(script_log_quiet_, 0));
    return true;
  }
  // Every pooled connection meets the same refusal at about the same time: one line per
  // backoff step says it all.
  auto now = Clock::now();
  if (now >= auth_log_next_) {
    auth_log_next_ = now + std::chrono::milliseconds(c->backoff_ms);
    spdlog::error("{}; retrying in {} ms", why, c->backoff_ms);
  }
  auth_failed_.store(true, std::memory_order_relaxed);
  fail_connection(c, why, "auth", false);
  return false;
}

void RedisClient::on_listpack_value(const redisReply* r) {
  // The last value read by any connection of any client in the process, -1 for none readable:
  // a finding is logged when it differs from the one before.
  static std::atomic<long> last{0};
  // CONFIG may be renamed away or refused by an ACL, and a Redis before 7.0 does not know the
  // name (an empty answer): then nothing is known, which is no reason to refuse service.
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    if (last.exchange(-1) == -1) return;
    std::string why =
        r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "no such setting";
    spdlog::info(
        "redis: cannot read hash-max-listpack-value ({}); reservation windows become hash tables "
        "only if it is below {}",
        why, kListpackBreakerBytes);
    return;
  }
  long value = std::atol(r->element[1]->str);
  if (last.exchange(value) == value || value < kListpackBreakerBytes) return;
  spdlog::warn(
      "redis: hash-max-listpack-value is {}: reservation windows stay listpacks up to "
      "hash-max-listpack-entries fields, each admission scanning them; set it below {}",
      value, kListpackBreakerBytes);
}

void RedisClient::on_ready(Conn* c) {
  c->state = Conn::State::kUp;
  c->backoff_ms = opts_.backoff_min_ms;
  c->logged_down = false;
  c->retrying = false;
  c->probe_at = Clock::now() + kClockProbe;
  auth_failed_.store(false, std::memory_order_relaxed);
  set_connected(c, true);
  // The held undo calls go first, before any new call can pick this connection.
  drain_held(c);
  arm_timer(c);
}

// Held kQueue calls, in call order, as far as c has room.
void RedisClient::drain_held(Conn* c) {
  while (!held_.empty() && c->state == Conn::State::kUp && !c->closing() &&
         has_room(c, static_cast<size_t>(held_.front()->len))) {
    Pending* p = held_.front();
    held_.pop_front();
    send(c, p);
  }
}

void RedisClient::schedule_reconnect(Conn* c) {
  if (shutting_down_) return;
  timeval tv = to_timeval(std::chrono::milliseconds(c->backoff_ms));
  evtimer_add(c->reconnect, &tv);
  c->backoff_ms = std::min(opts_.backoff_max_ms, c->backoff_ms * 2);
}

void RedisClient::on_reconnect(int, short, void* arg) {
  auto* c = static_cast<Conn*>(arg);
  c->client->connect(c);
}

void RedisClient::on_connect_cb(const redisAsyncContext* ac, int status) {
  auto* c = static_cast<Conn*>(ac->data);
  if (!c || c->ac != ac) return;
  RedisClient* self = c->client;
  if (status == REDIS_OK) {
    c->state = Conn::State::kHandshake;
    c->reached = true;
    if (c->setup_left == 0) self->on_ready(c);
    return;
  }
  // hiredis frees the context after this callback and flushes its commands with null replies.
  std::string why = std::string("redis: cannot connect: ") + (ac->errstr ? ac->errstr : "error");
  if (!c->logged_down) spdlog::warn("{}", why);
  c->logged_down = true;
  if (self->observer_) self->observer_->error("connect");
  c->fail_reason = why;
  c->ac = nullptr;
  c->state = Conn::State::kDown;
  c->retrying = true;
  event_del(c->timer);
  self->schedule_reconnect(c);
}

void RedisClient::on_disconnect_cb(const redisAsyncContext* ac, int) {
  auto* c = static_cast<Conn*>(ac->data);
  if (!c || c->ac != ac) return;  // a failure we initiated; already handled
  RedisClient* self = c->client;
  if (self->observer_) self->observer_->error("disconnect");
  bool was_up = c->state == Conn::State::kUp;
  c->ac = nullptr;
  c->state = Conn::State::kDown;
  c->retrying = true;
  event_del(c->timer);
  if (was_up) self->set_connected(c, false);
  self->schedule_reconnect(c);
}

void RedisClient::fail_connection(Conn* c, const std::string& why, const char* kind, bool log) {
  if (!c->ac) return;
  if (observer_) observer_->error(kind);
  // Once per outage and connection: a frozen Redis fails every reconnect's setup in turn.
  if (log && !c->logged_down) spdlog::warn("{}; dropping the connection", why);
  c->logged_down = c->logged_down || log;
  bool was_up = c->state == Conn::State::kUp;
  auto* ac = c->ac;
  c->fail_reason = why;
  c->ac = nullptr;
  c->state = Conn::State::kDown;
  c->retrying = true;
  event_del(c->timer);
  if (was_up) set_connected(c, false);
  redisAsyncFree(ac);  // pending callbacks run now (or right after the current hiredis callback)
  schedule_reconnect(c);
}

bool RedisClient::has_room(const Conn* c, size_t len) const {
  return c->in_flight < opts_.max_in_flight &&
         c->in_flight_bytes + len <= opts_.max_in_flight_bytes;
}

RedisClient::Conn* RedisClient::pick(WhenStalled when_stalled, size_t len) {
  // The calls of one loop iteration go on one connection while its batch is unflushed: one
  // write (and one reply read) per iteration instead of one per pooled connection. The pool
  // still spreads the load over iterations.
  if (batch_ && batch_->unflushed && batch_->state == Conn::State::kUp && !batch_->closing() &&
      has_room(batch_, len))
    return batch_;
  size_t n = conns_.size();
  Conn* connecting = nullptr;
  for (size_t i = 0; i < n; ++i) {
    Conn* c = conns_[(next_ + i) % n].get();
    if (c->closing() || !has_room(c, len)) continue;
    if (c->state == Conn::State::kUp) {
      next_ = (next_ + i + 1) % n;
      batch_ = c;
      return c;
    }
    // Behind the first handshake a call waits (the daemon is starting); behind a reconnect it
    // fails fast, since the Redis that failed the last one may not answer this one either. An
    // undo is written there all the same: it must reach Redis once it answers.
    if (c->connecting() && !connecting && (!c->retrying || when_stalled == WhenStalled::kQueue))
      connecting = c;
  }
  return connecting;
}

void RedisClient::refuse(Callback cb) {
  bool any_up = up();
  std::string why = any_up ? "redis: too many calls in flight"
                    : auth_failed_.load(std::memory_order_relaxed) ? "redis: authentication failed"
                                                                   : "redis: not connected";
  post([cb = std::move(cb), why = std::move(why)] { cb(nullptr, why); });
}

void RedisClient::arm_timer(Conn* c) {
  Clock::time_point when = Clock::time_point::max();
  if (c->connecting()) when = c->connect_deadline;
  // Deadlines grow in queue order (a NOSCRIPT retry keeps its earlier one and is answered by
  // the full scan in answer_overdue), so the first call still waiting is the next one due.
  for (const Pending* p : c->pending) {
    if (p->answered || p->setup) continue;
    when = std::min(when, p->deadline);
    break;
  }
  if (when == Clock::time_point::max()) return;
  if (evtimer_pending(c->timer, nullptr) && c->timer_at <= when) return;
  c->timer_at = when;
  timeval tv = to_timeval(when - Clock::now());
  evtimer_add(c->timer, &tv);
}

// The calls past their deadline are answered "timeout", and their connection is stalled: it is
// dropped first (its other calls answered "connection lost", all of them handed to their
// LateReply), so that nothing those callbacks send goes on it. True when it was.
bool RedisClient::answer_overdue(Conn* c, Clock::time_point now) {
  std::vector<Callback> due;
  for (Pending* p : c->pending) {
    if (p->answered || p->setup || p->deadline > now) continue;
    p->answered = true;
    due.push_back(std::move(p->cb));
  }
  if (due.empty()) return false;
  std::string why = "redis: timeout after " + std::to_string(opts_.timeout_ms) + " ms";
  fail_connection(c, "redis: a call unanswered for " + std::to_string(opts_.timeout_ms) + " ms",
                  "stall");
  for (auto& cb : due) {
    if (observer_) observer_->error("timeout");
    cb(nullptr, why);
  }
  return true;
}

void RedisClient::on_timer(int, short, void* arg) {
  auto* c = static_cast<Conn*>(arg);
  RedisClient* self = c->client;
  auto now = Clock::now();
  if (c->connecting() && now >= c->connect_deadline) {
    // Not answered in time, TCP or any of the setup (a kernel accepts for a frozen Redis): a
    // stall like any other, so the calls written behind the handshake go with it.
    self->fail_connection(
        c, "redis: connect timeout after " + std::to_string(self->opts_.connect_timeout_ms) + " ms",
        "stall");
    return;
  }
  if (self->answer_overdue(c, now)) return;
  self->arm_timer(c);
}

void RedisClient::send(Conn* c, Pending* p) {
  p->conn = c;
  if (!p->retried) {
    // The call's own deadline, whatever the connection is doing; a retry keeps it.
    p->start = Clock::now();
    p->deadline = p->setup ? Clock::time_point::max()
                           : p->start + std::chrono::milliseconds(opts_.timeout_ms);
  }
  if (p->asking) {
    // No deadline of its own (the call behind it has one); its reply is dropped.
    auto* asking = acquire();
    asking->setup = true;
    std::string_view argv[] = {"ASKING"};
    asking->len = format_command(&asking->cmd, &asking->cap, argv);
    asking->cb = [](const redisReply*, std::string_view) {};
    asking->conn = c;
    if (redisAsyncFormattedCommand(c->ac, &RedisClient::on_reply, asking, asking->cmd,
                                   static_cast<size_t>(asking->len)) == REDIS_OK)
      c->pending.push_back(asking);
    else
      recycle(asking);
  }
  if (redisAsyncFormattedCommand(c->ac, &RedisClient::on_reply, p, p->cmd,
                                 static_cast<size_t>(p->len)) != REDIS_OK) {
    if (p->queue && !shutting_down_) return post([this, p] { dispatch(p, WhenStalled::kQueue); });
    Callback cb = std::move(p->cb);
    recycle(p);
    post([cb = std::move(cb)] { cb(nullptr, "redis: connection is closing"); });
    return;
  }
  c->pending.push_back(p);
  if (!p->setup) {
    ++c->in_flight;
    c->in_flight_bytes += static_cast<size_t>(p->len);
  }
  arm_timer(c);
  // hiredis's libevent adapter writes only once epoll reports the socket writable: an
  // epoll_ctl to watch EPOLLOUT, a wakeup and an epoll_ctl to unwatch it per connection and
  // batch. A flush event activated now runs after the callbacks of this loop iteration, so
  // it still writes all of their commands at once, and the watch/unwatch pair folds away in
  // the changelist.
  if (c->state != Conn::State::kConnecting && !shutting_down_) {
    c->unflushed = true;
    if (!event_pending(flush_ev_, EV_TIMEOUT, nullptr)) event_active(flush_ev_, EV_TIMEOUT, 0);
  }
}

void RedisClient::on_flush(int, short, void* arg) {
  auto* self = static_cast<RedisClient*>(arg);
  for (auto& c : self->conns_) {
    if (!c->unflushed) continue;
    c->unflushed = false;
    // Only once connected: before that hiredis's write handler completes the connect.
    if (c->ac && c->state != Conn::State::kConnecting) redisAsyncHandleWrite(c->ac);
  }
}

// A written command whose reply will never come: it may have run. Its LateReply learns so on
// the loop, once the connection is gone (an undo sent from inside hiredis's teardown would meet
// a closing context).
void RedisClient::lost(LateReply late) {
  if (!late) return;
  if (shutting_down_) {
    if (observer_) observer_->error("late_lost");
    return;
  }
  if (observer_) observer_->error("lost");
  post([late = std::move(late)] { late(nullptr); });
}

void RedisClient::complete(Pending* p, const redisReply* reply, std::string_view error) {
  Callback cb = std::move(p->cb);
  recycle(p);
  cb(reply, error);
}

void RedisClient::on_reply(redisAsyncContext* ac, void* r, void* priv) {
  auto* p = static_cast<Pending*>(priv);
  Conn* c = p->conn;
  RedisClient* self = c->client;
  if (!c->pending.empty() && c->pending.front() == p) {
    c->pending.pop_front();
  } else {
    auto it = std::find(c->pending.begin(), c->pending.end(), p);
    if (it != c->pending.end()) c->pending.erase(it);
  }
  if (!p->setup) {
    --c->in_flight;
    c->in_flight_bytes -= static_cast<size_t>(p->len);
  }
  auto* reply = static_cast<const redisReply*>(r);
  // Room again on a connection that serves: the undo calls held for it go now.
  if (reply && !self->held_.empty() && c->ac == ac) self->drain_held(c);
  if (p->answered) {
    // Its caller was told "timeout" already. A NOSCRIPT error means it did not run at all: not
    // counted as late, but told all the same (an undo that did not run must be sent again).
    LateReply late = std::move(p->late);
    self->recycle(p);
    if (!reply) return self->lost(std::move(late));
    bool ran = !(reply->type == REDIS_REPLY_ERROR &&
                 std::string_view(reply->str, reply->len).starts_with("NOSCRIPT"));
    if (ran && self->observer_) self->observer_->error("late");
    if (late) late(reply);
    return;
  }
  if (!reply && !c->reached && p->queue && !self->shutting_down_) {
    // Never written (the connection it waited on failed to come up): it must still reach Redis.
    self->dispatch(p, WhenStalled::kQueue);
    return;
  }
  if (!reply) {
    std::string why = c->ac == ac ? std::string("redis: connection lost: ") +
                                        (ac->errstr && ac->errstr[0] ? ac->errstr : "closed")
                                  : c->fail_reason;
    LateReply late = c->reached ? std::move(p->late) : LateReply{};
    self->complete(p, nullptr, why);
    self->lost(std::move(late));
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && p->script && !p->retried && c->ac == ac &&
      std::string_view(reply->str, reply->len).starts_with("NOSCRIPT")) {
    // The script cache was flushed (SCRIPT FLUSH, restart, failover): load it and run the same
    // command again, pipelined on this connection so the load is in place before the retry.
    if (self->observer_) self->observer_->error("noscript");
    p->retried = true;
    auto* load = self->acquire();
    const std::string_view argv[] = {"SCRIPT", "LOAD", p->script->text};
    load->len = format_command(&load->cmd, &load->cap, argv);
    load->cb = [](const redisReply*, std::string_view) {};
    self->send(c, load);
    self->send(c, p);
    return;
  }
  if (self->observer_) {
    self->observer_->round_trip(std::chrono::duration<double>(Clock::now() - p->start).count());
    if (reply->type == REDIS_REPLY_ERROR) self->observer_->error("reply");
  }
  self->complete(p, reply, {});
}

void RedisClient::dispatch(Pending* p, WhenStalled stalled) {
  p->queue = stalled == WhenStalled::kQueue;
  if (Conn* c = pick(stalled, static_cast<size_t>(p->len))) {
    // Not on a connection one call from full: the bound holds for the probe too.
    if (c->state == Conn::State::kUp && c->in_flight + 2 <= opts_.max_in_flight &&
        Clock::now() >= c->probe_at)
      probe_clock(c);
    return send(c, p);
  }
  if (stalled == WhenStalled::kQueue && !shutting_down_ && held_.size() < kMaxHeld) {
    held_.push_back(p);
    return;
  }
  if (stalled == WhenStalled::kQueue && observer_) observer_->error("late_lost");
  if (stalled == WhenStalled::kFailFast && observer_) observer_->error("fail_fast");
  Callback cb = std::move(p->cb);
  recycle(p);
  refuse(std::move(cb));
}

void RedisClient::evalsha(const lua::Script& script, std::span<const std::string_view> keys,
                          std::span<const std::string_view> args, Callback cb, LateReply late,
                          WhenStalled stalled, bool asking) {
  char numkeys[24];
  auto nk = std::to_chars(numkeys, numkeys + sizeof numkeys, keys.size()).ptr - numkeys;
  auto* p = acquire();
  p->script = &script;
  p->cb = std::move(cb);
  p->late = std::move(late);
  p->asking = asking;
  p->len = format_command(&p->cmd, &p->cap, 3 + keys.size() + args.size(), [&](auto f) {
    f("EVALSHA");
    f(script.sha1);
    f(std::string_view(numkeys, static_cast<size_t>(nk)));
    for (auto k : keys) f(k);
    for (auto v : args) f(v);
  });
  dispatch(p, stalled);
}

void RedisClient::command(std::span<const std::string_view> argv, Callback cb, bool asking) {
  auto* p = acquire();
  p->cb = std::move(cb);
  p->asking = asking;
  p->len = format_command(&p->cmd, &p->cap, argv);
  dispatch(p, WhenStalled::kFailFast);
}

}  // namespace dripgate::control
