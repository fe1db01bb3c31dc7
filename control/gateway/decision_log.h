// The decision log (control.decision_log): one JSON line per sampled admission decision, for
// "who was limited, on which model, and why":
//   {"time":"2026-12-01T06:13:27.123Z","tenant":"ws-a","user":"u1","model":"llama-70b",
//    "gates":["tenant","user","model"],"result":"refused","gate":"model","reason":"rate",
//    "remaining":{"tenant":3,"user":1,"model":0}}
// An admission a shadow-mode gate would have refused adds "shadow_refused" (that gate) and
// "shadow_retry_after_ms" (its result stays "allowed": the request was admitted); one decided
// under the service-wide brake adds "brake" (the factor its enforced rates were cut to).
// Written off the request path: a decision is appended to its worker's buffer, and a timer
// (every second, or sooner once the buffer holds 64 KiB) writes the buffer with one write() to
// a file opened O_APPEND. Each write holds whole lines, so the workers' lines never interleave.
// API keys are never written.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "control/admission/admission.h"

struct event;
struct event_base;

namespace dripgate::control {

// The log file, opened once for every worker (append, create 0640).
class DecisionLogFile {
 public:
  // nullptr with `error` set when the file cannot be opened.
  static std::unique_ptr<DecisionLogFile> open(const std::string& path, std::string& error);
  ~DecisionLogFile();
  DecisionLogFile(const DecisionLogFile&) = delete;
  DecisionLogFile& operator=(const DecisionLogFile&) = delete;
  int fd() const { return fd_; }

 private:
  explicit DecisionLogFile(int fd) : fd_(fd) {}
  int fd_;
};

// Who asked, as the log names them.
struct DecisionWho {
  std::string tenant, user, model, tool;
};

// One worker's writer, on that worker's loop; the file outlives it.
class DecisionLog {
 public:
  // sample: the share of decisions written, (0, 1]; front: who asked ("http", "grpc"), written
  // in every line, as the metrics label it.
  DecisionLog(event_base* base, const DecisionLogFile& file, double sample, std::string front);
  ~DecisionLog();  // writes what is buffered
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  // Whether the next decision is written (drawn per decision).
  bool sampled();
  // result: the metrics' label ("allowed", "refused", ...).
  void record(const DecisionWho& who, const AdmitResult& r, std::string_view result);
  void flush();

 private:
  static void on_timer(int, short, void* arg);

  int fd_;
  double sample_;
  std::string front_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> draw_{0.0, 1.0};
  std::string buf_;
  event* timer_ = nullptr;
  bool warned_ = false;
};

}  // namespace dripgate::control
