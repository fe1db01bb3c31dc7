// An asynchronous Redis client on a libevent base: a small pool of hiredis async connections,
// each connected (TCP, AUTH, SELECT, SCRIPT LOAD, CONFIG GET, TIME) with a timeout, reconnection
// with exponential backoff that restarts only once the whole setup was answered, EVALSHA with
// transparent NOSCRIPT -> SCRIPT LOAD -> retry. At connect it also reads the Redis setting the
// scripts depend on (kListpackBreakerBytes) and says when it does not hold, and Redis's clock
// (TIME), so that a script call can carry its deadline on Redis's clock (script_deadline_ms).
//
// Every command is answered by its own deadline (sent + timeout_ms), whatever its connection is
// doing. A connection on which any command, or its setup, is unanswered past its deadline is
// stalled (Redis stopped, or a kernel that accepts for a frozen Redis): it is dropped at once,
// never reused, and rebuilt with backoff; while a pool that lost its connections reconnects,
// calls fail fast unwritten instead of each waiting its timeout behind a handshake that may
// never be answered. A command written on a dropped connection may have run or not (a stopped
// Redis runs what it had read once it is continued): its LateReply learns so (with no reply),
// so it can undo by what Redis holds; the scripts that take tokens refuse to run past the
// deadline they carry. Each connection bounds what it has written and not had answered
// (max_in_flight calls, max_in_flight_bytes): a call beyond both the pool's room fails fast.
//
// hiredis 0.14 (Debian 12) has no redisAsyncSetTimeout and no connect timeout, so both are
// libevent timers here. One client per event_base; not thread-safe; callbacks run on the base.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/inline_function.h"
#include "config/config.h"

struct event;
struct event_base;
struct redisReply;
struct redisAsyncContext;

namespace dripgate::lua {
struct Script;
}

namespace dripgate::control {

using common::InlineFunction;

// Observes Redis round trips; implemented by the metrics registry.
struct RedisObserver {
  virtual ~RedisObserver() = default;
  virtual void round_trip(double seconds) = 0;
  virtual void error(const std::string& kind) = 0;
  virtual void up(bool is_up) = 0;
};

// lua/admit.lua turns a reservation window from a listpack into a hash table by writing (and
// deleting at once) a field value of this many bytes; Redis converts a hash only for a value
// longer than its hash-max-listpack-value (64 by default). RedisClient checks that setting at
// connect (CONFIG GET) and warns when it is this or more: the windows then stay listpacks up to
// hash-max-listpack-entries fields, admissions are slower, and nothing else changes. Every
// connection of every client asks; a finding is logged once per process until another one.
inline constexpr long kListpackBreakerBytes = 72;

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_path;  // used instead of host:port when set
  std::string user;       // Redis ACL user; empty: the default user
  std::string password;
  int db = 0;
  int timeout_ms = 50;           // per command, from sending to reply
  int connect_timeout_ms = 500;  // TCP connect plus the whole setup (AUTH ... TIME)
  int pool_size = 4;
  // Per connection, what may be written and not yet answered (from() derives both from
  // timeout_ms and pool_size); a call that finds no connection with room fails fast.
  size_t max_in_flight = 1024;
  size_t max_in_flight_bytes = 1 << 20;
  int backoff_min_ms = 20;  // first reconnect delay, doubled per failure
  int backoff_max_ms = 1000;

  static RedisOptions from(const config::Redis& r);
};

class RedisClient {
 public:
  // reply: the reply (may be an error reply, e.g. a script error) or nullptr, then error says
  // why no reply came ("redis: timeout after 50 ms", "redis: not connected", ...). Called
  // exactly once, always from the event loop, never from inside evalsha()/command().
  using Callback = InlineFunction<void(const redisReply* reply, std::string_view error)>;
  // What became of a command after its Callback was answered with an error: reply != nullptr,
  // the reply of a command answered with a timeout (it ran after all; undo it); nullptr, the
  // connection went away after the command was written and before its reply (it may or may not
  // have run; undo it by what Redis holds). Runs on the loop, at most once, never while the
  // client shuts down.
  using LateReply = InlineFunction<void(const redisReply* reply)>;
  // A call made while no connection takes new calls (none up, or every one up full): kFailFast
  // answers it at once ("redis: not connected", "redis: too many calls in flight") without
  // writing it; kQueue, for the undo calls that must reach Redis once it answers again, holds it
  // (up to kMaxHeld) until a connection is up or has room.
  enum class WhenStalled { kFailFast, kQueue };
  static constexpr size_t kMaxHeld = 65536;

  // scripts: loaded (SCRIPT LOAD) on every new connection; must outlive the client.
  RedisClient(event_base* base, RedisOptions opts, std::vector<const lua::Script*> scripts,
              RedisObserver* observer = nullptr);
  ~RedisClient();  // pending callbacks get "redis: client shut down"
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // asking: for a Redis Cluster's ASK redirect (control/redis_cluster.h), the call goes out
  // right behind an ASKING on the same connection (ASKING admits only the next command into a
  // slot being imported), again so before a NOSCRIPT retry.
  //
  // EVALSHA script numkeys keys... args...
  void evalsha(const lua::Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> args, Callback cb, LateReply late = {},
               WhenStalled stalled = WhenStalled::kFailFast, bool asking = false);
  // Any command, e.g. {"GET", key}.
  void command(std::span<const std::string_view> argv, Callback cb, bool asking = false);

  // Runs fn on the event loop soon (not inside the caller).
  void post(std::function<void()> fn);

  // At least one connection is established. Readable from any thread.
  bool up() const { return connected_count_.load(std::memory_order_relaxed) > 0; }
  // The connections of the pool established now. Readable from any thread.
  int connected() const { return connected_count_.load(std::memory_order_relaxed); }
  // "up", "down", or "auth_failed" while down because AUTH or SELECT was refused. Readable from
  // any thread.
  std::string_view state() const {
    if (up()) return "up";
    return auth_failed_.load(std::memory_order_relaxed) ? "auth_failed" : "down";
  }
  event_base* base() const { return base_; }

  // Redis's clock minus this host's (ms), as last read (TIME at each connect, again every
  // kClockProbe on a busy connection); kUnknownOffset until a TIME was answered.
  static constexpr int64_t kUnknownOffset = INT64_MIN;
  int64_t clock_offset_ms() const { return clock_offset_ms_.load(std::memory_order_relaxed); }
  static constexpr std::chrono::seconds kClockProbe{10};
  // The deadline a script call sent now carries (unix ms on Redis's clock, lua/admit.lua's
  // `deadline`): past it the daemon has answered the call failed (give_up_ms from now), so the
  // script must not take anything. Redis's clock is this host's + clock_offset_ms(), read to
  // within the one-way latency of a TIME reply, then left to drift for up to kClockProbe:
  // kSkewAllowanceMs covers both (a clock stepped by more between two probes, or a cluster's
  // nodes further apart, lets a call run that late or refuses one early, as a 503). Unmeasured
  // (TIME refused, or a call queued behind the first handshake), kUnmeasuredSkewMs: Redis's
  // clock up to that far ahead of this host's never refuses a call sent in time.
  static constexpr int64_t kSkewAllowanceMs = 1000;
  static constexpr int64_t kUnmeasuredSkewMs = 60000;
  int64_t script_deadline_ms(int64_t give_up_ms) const {
    return deadline_for(clock_offset_ms(), give_up_ms);
  }
  static int64_t deadline_for(int64_t offset_ms, int64_t give_up_ms);

 private:
  struct Conn;
  struct Pending;
  struct Posted;
  friend struct Conn;

  Pending* acquire();
  void recycle(Pending* p);
  Conn* pick(WhenStalled stalled, size_t len);
  bool has_room(const Conn* c, size_t len) const;
  void drain_held(Conn* c);
  void probe_clock(Conn* c);
  void on_time(const redisReply* r);
  bool on_setup_error(Conn* c, const char* what, const redisReply* r);
  void dispatch(Pending* p, WhenStalled stalled);
  void send(Conn* c, Pending* p);
  void lost(LateReply late);
  void refuse(Callback cb);  // no connection takes the call: answered on the loop
  void connect(Conn* c);
  void setup(Conn* c, std::vector<std::string_view> argv, const char* what);
  void on_setup_reply(Conn* c, const char* what, const redisReply* r);
  void on_listpack_value(const redisReply* r);
  void on_ready(Conn* c);
  void fail_connection(Conn* c, const std::string& why, const char* kind, bool log = true);
  bool answer_overdue(Conn* c, std::chrono::steady_clock::time_point now);
  void schedule_reconnect(Conn* c);
  void arm_timer(Conn* c);
  void on_connected(Conn* c, bool ok, const char* errstr);
  void on_disconnected(Conn* c);
  void set_connected(Conn* c, bool is);
  void complete(Pending* p, const redisReply* reply, std::string_view error);

  static void on_reply(::redisAsyncContext* ac, void* reply, void* priv);
  static void on_connect_cb(const ::redisAsyncContext* ac, int status);
  static void on_disconnect_cb(const ::redisAsyncContext* ac, int status);
  static void on_timer(int fd, short what, void* arg);
  static void on_reconnect(int fd, short what, void* arg);
  static void run_posted(int fd, short what, void* arg);
  static void on_flush(int fd, short what, void* arg);

  event_base* base_;
  RedisOptions opts_;
  std::vector<const lua::Script*> scripts_;
  RedisObserver* observer_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::deque<Pending*> held_;  // kQueue calls waiting for a connection, in call order
  // Answered calls kept for reuse (acquire), at most kMaxSpare.
  static constexpr size_t kMaxSpare = 256;
  std::vector<Pending*> spare_;
  size_t next_ = 0;
  Conn* batch_ = nullptr;  // the connection this loop iteration's calls go on (see pick)
  bool shutting_down_ = false;
  std::unordered_set<Posted*> posted_;
  event* flush_ev_ = nullptr;  // writes the commands queued during one loop iteration
  std::atomic<int> connected_count_{0};
  std::atomic<bool> auth_failed_{false};
  std::atomic<int64_t> clock_offset_ms_{kUnknownOffset};
  // An AUTH/SELECT refusal is logged once per backoff step, not once per pooled connection.
  std::chrono::steady_clock::time_point auth_log_next_{};
  // A SCRIPT LOAD refusal: one line a second, counting the ones in between.
  std::chrono::steady_clock::time_point script_log_next_{};
  long script_log_quiet_ = 0;
};

}  // namespace dripgate::control
