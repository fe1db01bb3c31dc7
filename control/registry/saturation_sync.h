// The scraper of the model gates' saturation (config::Saturation, admission/saturation.h): one
// thread per daemon that, for every global model and model_tokens gate with a `saturation` in
// the configuration in force, GETs its URL every interval_ms (scrape.h; gates naming the same
// URL in the same round share one GET), reads its metric (common/prom_text.h), runs the gate's
// law and publishes the shares through the ConfigStore, where each worker reads them with one
// atomic load per request. Each daemon scrapes on its own: the daemons sharing a Redis see the
// same signal and so move alike, and a gate read at slightly different rates by two daemons
// is as a brake read within a poll of each other. A reload is followed within a second: new
// gates start at their configured rate, changed ones keep their share within their new bounds,
// removed ones are forgotten.
//
// Logs one line per change of state, never per scrape: a gate's scrapes start failing (with
// the cause) or answer again, a gate is held back (its share below its configured rate), above
// it (max_share > 1) or back at it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "control/admission/config_snapshot.h"
#include "control/admission/saturation.h"
#include "control/metrics/metrics.h"

namespace dripgate::control {

class SaturationSync {
 public:
  using Clock = SaturationLaw::Clock;

  // metrics: where the shares, signals and failures are shown (may be null).
  SaturationSync(ConfigStore& store, Metrics* metrics);
  ~SaturationSync();  // stops and joins
  SaturationSync(const SaturationSync&) = delete;
  SaturationSync& operator=(const SaturationSync&) = delete;

  void start();
  void stop();

 private:
  struct Gate {
    std::string kind, model;  // "model" | "model_tokens", the model's name
    SaturationLaw law;
    Clock::time_point due;
    bool failing = false;
    int side = 0;  // the share against the configured rate: -1 below, 0 at, 1 above
  };
  using Key = std::pair<std::string, std::string>;  // kind, model

  void run();
  // The gates of the configuration in force, their laws kept across reloads.
  void follow_config(Clock::time_point now);
  // Scrapes the gates due at `now`; true when a share moved.
  bool scrape_due(Clock::time_point now);
  void read(Gate& g, const std::string& body, Clock::time_point at);
  void failed(Gate& g, std::string_view cause, const std::string& error, Clock::time_point at);
  void note_share(Gate& g, double before);
  void publish();

  ConfigStore& store_;
  Metrics* metrics_;
  std::map<Key, Gate> gates_;  // the scraper's thread only
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace dripgate::control
