// Loading the configuration while serving: at start, on SIGHUP and on POST /v1/admin/reload.
// A reload loads the file again, applies the command-line overrides again, refuses the file when
// it has errors or changes a setting that only a restart applies, and otherwise publishes a new
// snapshot (config_snapshot.h): every request that starts after reload() returns runs on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "config/config.h"
#include "control/admission/config_snapshot.h"
#include "control/metrics/metrics.h"

namespace dripgate::control {

// A stable hash of a configuration file's bytes, "fnv1a64:<16 hex>" (FNV-1a, 64 bit): tells
// apart the files loaded, for /healthz; not a defence against anyone.
std::string config_hash(std::string_view text);

// What a load gives: the config (when no errors) and the hash of the text it was read from.
struct Loaded {
  std::optional<config::Config> cfg;
  std::vector<config::Error> errors;
  std::string hash;
};

// The command-line overrides, applied to every load of the file; returns why they cannot be
// (an error whose file is the option, e.g. "--redis").
using Overrides = std::function<std::optional<config::Error>(config::Config&)>;

// path empty: the embedded default.
Loaded load_config(const std::string& path, const Overrides& overrides);

// The settings that change only on a restart (listen address, worker count, Redis, dataplane
// socket, connection limits), one error per field that differs between running and next.
std::vector<config::Error> restart_only_changes(const config::Config& running,
                                                const config::Config& next);

struct ReloadOutcome {
  bool ok = false;
  std::vector<std::string> errors;  // "file:line:col: path: message"
  std::string hash;                 // of the configuration in force afterwards
};

class Reloader {
 public:
  // store and metrics outlive the reloader.
  Reloader(std::string path, Overrides overrides, ConfigStore& store, Metrics& metrics);

  // Thread-safe, one at a time. Logs the outcome (each error on its own line) and counts it.
  ReloadOutcome reload();

 private:
  std::string path_;
  Overrides overrides_;
  ConfigStore& store_;
  Metrics& metrics_;
  std::mutex mu_;
};

// The reloads SIGHUP and POST /v1/admin/reload ask for, run on a thread of their own, one at a
// time: neither the thread that waits for signals nor an HTTP worker's loop ever waits on a
// reload, so SIGTERM is acted on, and every connection is served, however long one takes (a
// file on a hung mount). Requests that arrive during a reload make one more reload after it,
// not one each: the file may have changed since it was read, and one read of the latest file
// serves them all. Each reload is Reloader::reload(), in force from the first request after it
// was counted.
class ReloadThread {
 public:
  // Gets a reload's outcome, on the reload thread.
  using Done = std::function<void(const ReloadOutcome&)>;

  // reloader outlives the thread, or the process ends first (stop() false).
  explicit ReloadThread(Reloader& reloader);
  ReloadThread(const ReloadThread&) = delete;
  ReloadThread& operator=(const ReloadThread&) = delete;
  // stop() without a time limit, unless stop() was called.
  ~ReloadThread();

  // Asks for a reload; never waits. done, if any, gets the outcome of the first reload that
  // begins after this call (one in progress read the file before it). After stop(), or when
  // the thread stops before that reload begins, done is dropped uncalled.
  void request(Done done = {});
  // Takes no more requests and waits up to `grace` for the reload in progress. false: it is
  // still running, and the thread is left to it (it ends after it): the caller must end the
  // process without destroying what the reloader uses.
  bool stop(std::chrono::milliseconds grace);

 private:
  // Shared with the thread, so that a thread left to a stuck reload never outlives it.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool pending = false, stopping = false, busy = false;
    std::vector<Done> waiting;  // the next reload's askers
  };
  static void run(Reloader& reloader, const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

}  // namespace dripgate::control
