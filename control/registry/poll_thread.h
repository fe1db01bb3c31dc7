// A thread of its own with an event loop and one Redis connection that calls `poll` every
// period: what keeps a daemon's copy of state shared in Redis current (the tenant registry,
// tenant_registry.h; the brake, brake_sync.h). Polling rather than pub/sub: a missed message
// cannot leave a daemon stale, and it works unchanged on a cluster.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "control/redis/redis_calls.h"

struct event;
struct event_base;

namespace dripgate::control {

class PollThread {
 public:
  // redis: the daemon's settings (one connection; its timeout raised to at least 1 s: nobody
  // waits on it). scripts: those the polls call. what: named in messages.
  PollThread(const config::Redis& redis, std::chrono::milliseconds period,
             std::vector<const lua::Script*> scripts, std::string what);
  ~PollThread();  // stops and joins
  PollThread(const PollThread&) = delete;
  PollThread& operator=(const PollThread&) = delete;

  // Starts calling poll (on the loop thread: the first call now, then every period) and waits
  // up to `wait` for loaded(); false when not loaded yet (polling goes on). `error` says why
  // the thread could not start.
  bool start(std::function<void()> poll, std::chrono::milliseconds wait, std::string& error);
  void stop();
  // Waits up to `wait` for loaded(), for a caller that started several pollers at once.
  bool wait_loaded(std::chrono::milliseconds wait);
  // On the loop thread, once the first state is in force: start() returns.
  void set_loaded();
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  // Loop thread only; null once stopping.
  RedisCalls* redis() { return redis_.get(); }
  bool stopping() const { return stopping_; }
  std::chrono::milliseconds period() const { return period_; }

 private:
  static void on_timer(int fd, short what, void* arg);
  static void on_stop(int fd, short what, void* arg);

  config::Redis redis_cfg_;
  std::chrono::milliseconds period_;
  std::vector<const lua::Script*> scripts_;
  std::string what_;
  std::function<void()> poll_;
  event_base* base_ = nullptr;
  event* timer_ = nullptr;
  event* stop_ev_ = nullptr;
  std::unique_ptr<RedisCalls> redis_;
  std::thread thread_;
  bool stopping_ = false;  // loop thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> loaded_{false};
};

}  // namespace dripgate::control
