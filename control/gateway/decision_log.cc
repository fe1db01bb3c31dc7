#include "control/gateway/decision_log.h"

#include <event2/event.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "common/json_writer.h"

namespace dripgate::control {
namespace {

constexpr size_t kFlushBytes = 64 * 1024;
constexpr timeval kFlushEvery{1, 0};

// "2026-12-01T06:13:27.123Z" into buf (clock_gettime through the vDSO: no syscall).
std::string_view utc_millis(char (&buf)[32]) {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  int m = std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return std::string_view(buf, n + static_cast<size_t>(m));
}

}  // namespace

std::unique_ptr<DecisionLogFile> DecisionLogFile::open(const std::string& path,
                                                       std::string& error) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    error = "control.decision_log.path: cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::unique_ptr<DecisionLogFile>(new DecisionLogFile(fd));
}

DecisionLogFile::~DecisionLogFile() {
  ::close(fd_);
}

DecisionLog::DecisionLog(event_base* base, const DecisionLogFile& file, double sample,
                         std::string front)
    : fd_(file.fd()), sample_(sample), front_(std::move(front)), rng_(std::random_device{}()) {
  timer_ = event_new(base, -1, EV_PERSIST, &DecisionLog::on_timer, this);
  event_add(timer_, &kFlushEvery);
}

DecisionLog::~DecisionLog() {
  if (timer_) event_free(timer_);
  flush();
}

bool DecisionLog::sampled() {
  return sample_ >= 1.0 || draw_(rng_) < sample_;
}

void DecisionLog::record(const DecisionWho& who, const AdmitResult& r, std::string_view result) {
  JsonWriter w(buf_);
  w.begin_object();
  char time[32];
  w.key("time").string(utc_millis(time));
  w.key("front").string(front_);
  w.key("tenant").string(who.tenant);
  for (auto [name, value] : {std::pair<const char*, const std::string*>{"user", &who.user},
                             {"model", &who.model},
                             {"tool", &who.tool}})
    if (!value->empty()) w.key(name).string(*value);
  w.key("gates").begin_array();
  for (const auto& g : r.remaining) w.string(g.gate);
  w.end_array();
  w.key("result").string(result);
  if (!r.gate.empty()) w.key("gate").string(r.gate);
  if (!r.reason.empty()) w.key("reason").string(r.reason);
  if (!r.shadow_refused.empty()) {
    w.key("shadow_refused").string(r.shadow_refused);
    w.key("shadow_retry_after_ms").integer(r.shadow_retry_ms);
  }
  // The factor the brake cut this request's enforced rates to (absent: not braked).
  if (r.brake < 1) w.key("brake").number(r.brake);
  // How long it waited for its gate (absent: it could not wait).
  if (r.waited_ms >= 0) w.key("waited_ms").integer(r.waited_ms);
  w.key("remaining").begin_object();
  for (const auto& g : r.remaining) w.key(g.gate).number(g.value);
  w.end_object();
  w.end_object();
  buf_ += '\n';
  if (buf_.size() >= kFlushBytes) flush();
}

void DecisionLog::flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    ssize_t n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Dropped rather than kept: a full disk must not grow the daemon's memory.
      if (!warned_) spdlog::warn("decision log: write: {}; lines dropped", std::strerror(errno));
      warned_ = true;
      break;
    }
    done += static_cast<size_t>(n);
  }
  buf_.clear();
}

void DecisionLog::on_timer(int, short, void* arg) {
  auto* log = static_cast<DecisionLog*>(arg);
  if (!log->buf_.empty()) log->flush();
}

}  // namespace dripgate::control
