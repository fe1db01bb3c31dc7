#include "control/dataplane_client.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "control/metrics.h"

namespace dripgate::control {
namespace {

using json = nlohmann::json;

// A missing dataplane is retried at most this often, so a burst of admissions does not turn
// into a burst of failing connects.
constexpr std::chrono::milliseconds kRetryInterval{200};
constexpr size_t kMaxLine = 64 * 1024;

json flow_object(const Flow& f) {
  return {
      {"src", f.src}, {"sport", f.sport}, {"dst", f.dst}, {"dport", f.dport}, {"proto", f.proto}};
}

}  // namespace

DataplaneClient::DataplaneClient(event_base* base, std::string socket_path, Metrics* metrics,
                                 int timeout_ms)
    : base_(base),
      path_(std::move(socket_path)),
      metrics_(metrics),
      timeout_(timeout_ms),
      timer_(evtimer_new(base, &DataplaneClient::on_timer, this)),
      flush_ev_(event_new(base, -1, 0, &DataplaneClient::on_flush, this)) {}

DataplaneClient::~DataplaneClient() {
  if (bev_) bufferevent_free(bev_);
  bev_ = nullptr;
  if (timer_) event_free(timer_);
  if (flush_ev_) event_free(flush_ev_);
  // Callers still waiting hear "unavailable"; they must not outlive the client's loop anyway.
  for (auto& b : batches_)
    for (auto& d : b.dones)
      if (d) d("unavailable");
  while (!pending_.empty()) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    for (auto& d : p.dones)
      if (d) d("unavailable");
  }
}

void DataplaneClient::tag(const Flow& flow, const std::string& cls, int ttl_s, Done done) {
  if (!ensure_connected()) {
    finish(Pending{"tag", {std::move(done)}, {}}, "unavailable");
    return;
  }
  auto it = std::find_if(batches_.begin(), batches_.end(),
                         [&](const Batch& b) { return b.cls == cls && b.ttl_s == ttl_s; });
  if (it == batches_.end()) it = batches_.insert(batches_.end(), Batch{cls, ttl_s, {}, {}});
  it->flows.push_back(flow);
  it->dones.push_back(std::move(done));
  if (it->flows.size() >= kMaxBatch) {
    Batch full = std::move(*it);
    batches_.erase(it);
    send_batch(full);
    return;
  }
  if (batches_.size() == 1 && it->flows.size() == 1) event_active(flush_ev_, EV_TIMEOUT, 0);
}

void DataplaneClient::on_flush(int, short, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  auto batches = std::move(self->batches_);
  self->batches_.clear();
  for (auto& b : batches) self->send_batch(b);
}

void DataplaneClient::send_batch(Batch& b) {
  json j = {{"op", "tag"}, {"class", b.cls}, {"ttl_s", b.ttl_s}};
  if (b.flows.size() == 1) {
    j["flow"] = flow_object(b.flows[0]);
  } else {
    json flows = json::array();
    for (const auto& f : b.flows) flows.push_back(flow_object(f));
    j["flows"] = std::move(flows);
  }
  send("tag", j.dump(), std::move(b.dones));
}

void DataplaneClient::untag(const Flow& flow, Done done) {
  json j = {{"op", "untag"}, {"flow", flow_object(flow)}};
  std::vector<Done> dones;
  dones.push_back(std::move(done));
  send("untag", j.dump(), std::move(dones));
}

void DataplaneClient::finish(Pending p, const std::string& result, size_t ok) {
  for (size_t i = 0; i < p.dones.size(); ++i) {
    const std::string& r = i < ok ? std::string("ok") : result;
    if (metrics_) metrics_->dataplane(p.op, r);
    if (p.dones[i]) p.dones[i](r);
  }
}

void DataplaneClient::send(const std::string& op, std::string line, std::vector<Done> dones) {
  Pending p{op, std::move(dones), std::chrono::steady_clock::now() + timeout_};
  if (!ensure_connected()) {
    finish(std::move(p), "unavailable");
    return;
  }
  line += '\n';
  if (bufferevent_write(bev_, line.data(), line.size()) != 0) {
    close_connection("unavailable", "write failed");
    finish(std::move(p), "unavailable");
    return;
  }
  pending_.push_back(std::move(p));
  if (pending_.size() == 1) arm_timer();
}

bool DataplaneClient::ensure_connected() {
  if (bev_) return true;
  auto now = std::chrono::steady_clock::now();
  if (now < next_attempt_) return false;
  next_attempt_ = now + kRetryInterval;

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof(addr.sun_path)) {
    if (!outage_logged_) {
      spdlog::warn("dataplane: control socket path '{}' is unusable; flows are not tagged", path_);
      outage_logged_ = true;
    }
    return false;
  }
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // A unix stream connect completes or fails at once (EAGAIN only with a full backlog).
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    if (!outage_logged_) {
      spdlog::warn("dataplane: cannot connect to {}: {}; admissions go on without flow tagging",
                   path_, std::strerror(err));
      outage_logged_ = true;
    }
    return false;
  }
  bev_ = bufferevent_socket_new(base_, fd, BEV_OPT_CLOSE_ON_FREE);
  if (!bev_) {
    close(fd);
    return false;
  }
  bufferevent_setcb(bev_, &DataplaneClient::on_read, nullptr, &DataplaneClient::on_event, this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
  if (outage_logged_) spdlog::info("dataplane: connected to {} again", path_);
  outage_logged_ = false;
  return true;
}

void DataplaneClient::close_connection(const std::string& result_for_pending, const char* why) {
  if (bev_) {
    bufferevent_free(bev_);
    bev_ = nullptr;
  }
  if (!outage_logged_) {
    spdlog::warn("dataplane: connection to {} closed ({}); admissions go on without flow tagging",
                 path_, why);
    outage_logged_ = true;
  }
  // Answers can no longer be matched to requests: everything in flight fails.
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& p : pending) finish(std::move(p), result_for_pending);
}

void DataplaneClient::arm_timer() {
  if (pending_.empty()) {
    evtimer_del(timer_);
    return;
  }
  auto left = pending_.front().deadline - std::chrono::steady_clock::now();
  auto us =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(left).count());
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  evtimer_add(timer_, &tv);
}

void DataplaneClient::on_read(bufferevent* bev, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  evbuffer* in = bufferevent_get_input(bev);
  for (;;) {
    size_t len = 0;
    char* line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
    if (!line) break;
    std::string text(line, len);
    free(line);
    if (self->pending_.empty()) {
      spdlog::warn("dataplane: unexpected answer '{}'", text);
      continue;
    }
    Pending p = std::move(self->pending_.front());
    self->pending_.pop_front();
    json j = json::parse(text, nullptr, false);
    bool ok = !j.is_discarded() && j.is_object() && j.value("ok", false) == true;
    size_t tagged = 0;  // a batch the dataplane refused part way: the first ones are tagged
    if (!ok) {
      std::string err =
          (!j.is_discarded() && j.is_object() && j.contains("error")) ? j["error"].dump() : text;
      spdlog::warn("dataplane: {} refused: {}", p.op, err);
      if (!j.is_discarded() && j.is_object() && j.contains("tagged") && j["tagged"].is_number())
        tagged = j["tagged"].get<size_t>();
    }
    self->finish(std::move(p), ok ? "ok" : "error", tagged);
    if (!self->bev_) return;  // a callback may not close us, but stay safe
  }
  if (evbuffer_get_length(in) > kMaxLine) {
    self->close_connection("error", "answer line too long");
    return;
  }
  self->arm_timer();
}

void DataplaneClient::on_event(bufferevent*, short what, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
  // The dataplane closes clients that stay quiet; with nothing in flight that is no outage: the
  // next call reconnects.
  if ((what & BEV_EVENT_EOF) && self->pending_.empty()) {
    spdlog::debug("dataplane: idle connection to {} closed by the dataplane", self->path_);
    bufferevent_free(self->bev_);
    self->bev_ = nullptr;
    return;
  }
  self->close_connection("unavailable", (what & BEV_EVENT_EOF) ? "EOF" : "socket error");
}

void DataplaneClient::on_timer(int, short, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  if (self->pending_.empty()) return;
  if (std::chrono::steady_clock::now() >= self->pending_.front().deadline) {
    self->close_connection("timeout", "no answer in time");
    return;
  }
  self->arm_timer();
}

void FlowRegistry::put(const std::string& request_id, const Flow& flow) {
  std::lock_guard lock(mu_);
  auto it = map_.find(request_id);
  if (it != map_.end()) {
    it->second.first = flow;
    return;
  }
  if (capacity_ == 0) return;
  while (map_.size() >= capacity_) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(request_id);
  map_.emplace(request_id, std::make_pair(flow, std::prev(order_.end())));
}

std::optional<Flow> FlowRegistry::take(const std::string& request_id) {
  std::lock_guard lock(mu_);
  auto it = map_.find(request_id);
  if (it == map_.end()) return std::nullopt;
  Flow f = std::move(it->second.first);
  order_.erase(it->second.second);
  map_.erase(it);
  return f;
}

size_t FlowRegistry::size() const {
  std::lock_guard lock(mu_);
  return map_.size();
}

}  // namespace dripgate::control
