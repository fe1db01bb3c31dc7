#include "control/rls/protobuf_log.h"

#include <spdlog/spdlog.h>

#include <atomic>

namespace dripgate::control {
namespace {

// The one installed, for libprotobuf's handler, a plain function.
std::atomic<ProtobufLog*> g_installed{nullptr};

// The message as one printable ASCII line of bounded length: libprotobuf names fields and types,
// but a line in the log must not be shaped by whatever a message might carry.
std::string printable(const std::string& message) {
  constexpr size_t kMaxChars = 512;
  std::string out;
  for (char c : message.substr(0, kMaxChars)) out += c >= 0x20 && c < 0x7f ? c : '?';
  if (message.size() > kMaxChars) out += "...";
  return out;
}

}  // namespace

ProtobufLog::ProtobufLog(Metrics& metrics, std::chrono::steady_clock::duration interval)
    : metrics_(metrics), interval_(interval) {
  g_installed.store(this);
  previous_ = google::protobuf::SetLogHandler(&ProtobufLog::handle);
}

ProtobufLog::~ProtobufLog() {
  google::protobuf::SetLogHandler(previous_);
  g_installed.store(nullptr);
  // What was held back after a place's last line would otherwise be in the metric alone.
  for (const auto& [where, site] : sites_)
    if (site.held)
      spdlog::warn("protobuf: {} more messages from {}:{} held back since its last line", site.held,
                   where.first, where.second);
}

void ProtobufLog::handle(google::protobuf::LogLevel level, const char* file, int line,
                         const std::string& message) {
  if (ProtobufLog* self = g_installed.load()) self->log(level, file, line, message);
}

void ProtobufLog::log(google::protobuf::LogLevel level, const char* file, int line,
                      const std::string& message) {
  using google::protobuf::LogLevel;
  static constexpr const char* kNames[] = {"info", "warning", "error", "fatal"};
  static constexpr spdlog::level::level_enum kLevels[] = {
      spdlog::level::info, spdlog::level::warn, spdlog::level::err, spdlog::level::critical};
  const int i = level < LogLevel::LOGLEVEL_INFO || level > LogLevel::LOGLEVEL_FATAL ? 2 : level;
  metrics_.protobuf_log(kNames[i]);
  uint64_t held = 0;
  {
    std::lock_guard lock(mu_);
    Site& site = sites_[{file ? file : "", line}];
    const auto now = std::chrono::steady_clock::now();
    // A fatal message ends the process: never held back.
    if (level != LogLevel::LOGLEVEL_FATAL && site.written.time_since_epoch().count() != 0 &&
        now - site.written < interval_) {
      ++site.held;
      return;
    }
    held = site.held;
    site = {now, 0};
  }
  if (held == 0)
    spdlog::log(kLevels[i], "protobuf: {} ({}:{})", printable(message), file ? file : "?", line);
  else
    spdlog::log(kLevels[i],
                "protobuf: {} ({}:{}; {} more from there held back since its last line)",
                printable(message), file ? file : "?", line, held);
}

}  // namespace dripgate::control
