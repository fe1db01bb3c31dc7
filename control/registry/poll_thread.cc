#include "control/registry/poll_thread.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <algorithm>
#include <utility>

namespace dripgate::control {

PollThread::PollThread(const config::Redis& redis, std::chrono::milliseconds period,
                       std::vector<const lua::Script*> scripts, std::string what)
    : redis_cfg_(redis), period_(period), scripts_(std::move(scripts)), what_(std::move(what)) {
  redis_cfg_.pool_size = 1;
  redis_cfg_.timeout_ms = std::max(redis_cfg_.timeout_ms, 1000);
}

PollThread::~PollThread() {
  stop();
  for (event* ev : {timer_, stop_ev_})
    if (ev) event_free(ev);
  if (base_) event_base_free(base_);
}

bool PollThread::start(std::function<void()> poll, std::chrono::milliseconds wait,
                       std::string& error) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  poll_ = std::move(poll);
  base_ = event_base_new();
  if (!base_) {
    error = what_ + ": cannot create an event loop";
    return false;
  }
  redis_ = make_redis_calls(base_, redis_cfg_, scripts_);
  timer_ = event_new(base_, -1, EV_PERSIST, &PollThread::on_timer, this);
  stop_ev_ = event_new(base_, -1, 0, &PollThread::on_stop, this);
  timeval tv{static_cast<time_t>(period_.count() / 1000),
             static_cast<suseconds_t>(period_.count() % 1000 * 1000)};
  event_add(timer_, &tv);
  event_active(timer_, EV_TIMEOUT, 0);  // the first poll now
  thread_ = std::thread([this] {
    event_base_dispatch(base_);
    // The client belongs to this loop: its last callbacks ("client shut down") run here.
    stopping_ = true;
    redis_.reset();
  });
  return wait_loaded(wait);
}

bool PollThread::wait_loaded(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, wait, [this] { return loaded(); });
}

void PollThread::stop() {
  if (stop_ev_ && thread_.joinable()) event_active(stop_ev_, EV_TIMEOUT, 0);
  if (thread_.joinable()) thread_.join();
}

void PollThread::set_loaded() {
  if (loaded()) return;
  std::lock_guard lock(mu_);
  loaded_.store(true, std::memory_order_release);
  cv_.notify_all();
}

void PollThread::on_timer(int, short, void* arg) {
  auto* t = static_cast<PollThread*>(arg);
  if (t->redis_ && t->poll_) t->poll_();
}

void PollThread::on_stop(int, short, void* arg) {
  event_base_loopexit(static_cast<PollThread*>(arg)->base_, nullptr);
}

}  // namespace dripgate::control
