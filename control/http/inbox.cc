#include "control/http/inbox.h"

#include <utility>

namespace dripgate::control {

bool Inbox::open(event_base* base) {
  std::lock_guard lock(mu_);
  wake_ = event_new(base, -1, 0, &Inbox::on_wake, this);
  return wake_ != nullptr;
}

void Inbox::post(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (!wake_) return;
  tasks_.push_back(std::move(task));
  event_active(wake_, EV_TIMEOUT, 0);
}

void Inbox::close() {
  std::lock_guard lock(mu_);
  if (wake_) event_free(wake_);
  wake_ = nullptr;
  tasks_.clear();
}

void Inbox::on_wake(evutil_socket_t, short, void* arg) {
  auto* inbox = static_cast<Inbox*>(arg);
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(inbox->mu_);
    tasks.swap(inbox->tasks_);
  }
  for (auto& task : tasks) task();
}

}  // namespace dripgate::control
