// An asynchronous Redis client on a libevent base: a small pool of hiredis async connections,
// each connected with a timeout, every command bounded by a timeout (a command that does not
// answer in time fails, and so does its connection, which is then rebuilt: a stuck Redis must
// not hold requests), reconnection with exponential backoff, the scripts loaded at connect and
// EVALSHA with transparent NOSCRIPT -> SCRIPT LOAD -> retry.
//
// hiredis 0.14 (Debian 12) has no redisAsyncSetTimeout and no connect timeout, so both are
// libevent timers here. One client per event_base; not thread-safe; callbacks run on the base.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "config/config.h"

struct event;
struct event_base;
struct redisReply;
struct redisAsyncContext;

namespace dripgate::lua {
struct Script;
}

namespace dripgate::control {

// Observes Redis round trips; implemented by the metrics registry.
struct RedisObserver {
  virtual ~RedisObserver() = default;
  virtual void round_trip(double seconds) = 0;
  virtual void error(const std::string& kind) = 0;
  virtual void up(bool is_up) = 0;
};

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_path;  // used instead of host:port when set
  std::string user;       // Redis ACL user; empty: the default user
  std::string password;
  int db = 0;
  int timeout_ms = 50;           // per command, from sending to reply
  int connect_timeout_ms = 500;  // TCP connect (plus AUTH/SELECT, pipelined behind it)
  int pool_size = 4;
  int backoff_min_ms = 20;  // first reconnect delay, doubled per failure
  int backoff_max_ms = 1000;

  static RedisOptions from(const config::Redis& r);
};

class RedisClient {
 public:
  // reply: the reply (may be an error reply, e.g. a script error) or nullptr, then error says
  // why no reply came ("redis: timeout after 50 ms", "redis: not connected", ...). Called
  // exactly once, always from the event loop, never from inside evalsha()/command().
  using Callback = std::function<void(const redisReply* reply, std::string_view error)>;

  // scripts: loaded (SCRIPT LOAD) on every new connection; must outlive the client.
  RedisClient(event_base* base, RedisOptions opts, std::vector<const lua::Script*> scripts,
              RedisObserver* observer = nullptr);
  ~RedisClient();  // pending callbacks get "redis: client shut down"
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // EVALSHA script numkeys keys... args...
  void evalsha(const lua::Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> args, Callback cb);
  // Any command, e.g. {"GET", key}.
  void command(std::span<const std::string_view> argv, Callback cb);

  // Runs fn on the event loop soon (not inside the caller).
  void post(std::function<void()> fn);

  // At least one connection is established. Readable from any thread.
  bool up() const { return connected_count_.load(std::memory_order_relaxed) > 0; }
  event_base* base() const { return base_; }

 private:
  struct Conn;
  struct Pending;
  struct Posted;
  friend struct Conn;

  Conn* pick();
  void send(Conn* c, Pending* p);
  void connect(Conn* c);
  void fail_connection(Conn* c, const std::string& why, const char* kind);
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
  size_t next_ = 0;
  bool shutting_down_ = false;
  std::unordered_set<Posted*> posted_;
  event* flush_ev_ = nullptr;  // writes the commands queued during one loop iteration
  std::atomic<int> connected_count_{0};
};

}  // namespace dripgate::control
