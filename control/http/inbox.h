// Tasks other threads hand to an event loop's thread, run there in the order posted: a reload's
// answer to the HTTP worker that asked (from the reload thread), a gRPC call to the loop that
// owns its Gateway (from gRPC's threads). Held by whoever may post (a shared_ptr where the poster
// may outlive the loop), so that a task posted after the loop stopped finds the inbox closed and
// is dropped, instead of reaching a freed loop.
#pragma once

#include <event2/event.h>

#include <functional>
#include <mutex>
#include <vector>

namespace dripgate::control {

class Inbox {
 public:
  Inbox() = default;
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;
  ~Inbox() { close(); }

  // On the loop's thread, or before it runs, and before anything is posted; false when the
  // event cannot be made. The loop must have been made after evthread_use_pthreads(), so that
  // another thread's post wakes it.
  bool open(event_base* base);
  // Any thread; wakes the loop. Dropped once closed.
  void post(std::function<void()> task);
  // On the loop's thread (or once it has stopped), before its event_base goes: no task runs
  // after it, and those waiting are dropped.
  void close();

 private:
  static void on_wake(evutil_socket_t, short, void* arg);

  std::mutex mu_;
  event* wake_ = nullptr;  // null: closed (or never opened)
  std::vector<std::function<void()>> tasks_;
};

}  // namespace dripgate::control
