// libprotobuf's log messages, through spdlog and rate-limited.
//
// By itself libprotobuf writes every message to stderr, and some are written once per bad
// request: a string field with invalid UTF-8 logs an ERROR each time a request carrying one is
// parsed, so the input, not the daemon, would decide how much is logged. Here each place in
// libprotobuf that logs (its file and line) gets one line at once, then at most one line per
// interval carrying how many were held back since; every message is counted in
// dripgate_protobuf_log_messages_total{level}.
#pragma once

#include <google/protobuf/stubs/logging.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "control/metrics/metrics.h"

namespace dripgate::control {

class ProtobufLog {
 public:
  // Installs the handler, counting in `metrics` (which outlives this). libprotobuf's handler is
  // process-wide and SetLogHandler is not thread-safe: one ProtobufLog at a time, made before
  // any thread uses protobuf and destroyed after the last has stopped.
  explicit ProtobufLog(Metrics& metrics,
                       std::chrono::steady_clock::duration interval = std::chrono::seconds(10));
  ~ProtobufLog();  // puts back the handler it replaced
  ProtobufLog(const ProtobufLog&) = delete;
  ProtobufLog& operator=(const ProtobufLog&) = delete;

 private:
  static void handle(google::protobuf::LogLevel level, const char* file, int line,
                     const std::string& message);
  void log(google::protobuf::LogLevel level, const char* file, int line,
           const std::string& message);

  // One place in libprotobuf that logs: when it last wrote a line, and how many of its messages
  // were held back since.
  struct Site {
    std::chrono::steady_clock::time_point written;
    uint64_t held = 0;
  };

  Metrics& metrics_;
  const std::chrono::steady_clock::duration interval_;
  google::protobuf::LogHandler* previous_;
  std::mutex mu_;
  std::map<std::pair<std::string, int>, Site> sites_;
};

}  // namespace dripgate::control
