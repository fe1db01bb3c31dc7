// The status page's view of the dataplane and the receiver (control.status): a thread of its
// own that GETs their metrics endpoints (scrape.h, as the saturation scraper does) only while
// the page is watched: a status request says so (watched()), and the thread scrapes when the
// last reading is a second old and a request came within the last kWatchMs, each GET within
// kTimeout. An HTTP worker never waits on it: it takes the latest reading, published whole
// (one shared_ptr under a mutex held for its copy).
//
// From the dataplane: per class, what was sent (bytes and packets, summed over ports) and its
// rate since the previous reading, the configured rate, the queue's depth and limit, drops by
// cause (totals and rates). From the receiver: per interface, the inter-arrival histogram (its
// buckets' counts, and those of the last interval between readings) and the burst factors.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "control/admission/config_snapshot.h"

namespace dripgate::control {

struct StatusSource {
  std::string url;    // the configured URL; empty: not configured (the rest unset)
  std::string error;  // the last scrape's failure ("timeout: ..."), empty when it answered
  int64_t at_ms = 0;  // unix ms of the last answer; 0: none yet
};

struct ClassStatus {
  std::string cls;
  double sent_bytes = 0, sent_packets = 0;                  // totals
  double sent_bytes_per_s = NAN, sent_packets_per_s = NAN;  // NaN: one reading only
  double configured_bytes_per_s = NAN;                      // NaN: not exported (0: unlimited)
  double queue_depth = NAN, queue_limit = NAN;
  struct Drops {
    double total = 0, per_s = NAN;
  };
  std::map<std::string, Drops> drops;  // by cause
};

struct IatStatus {
  std::string iface;
  std::vector<double> le;      // the buckets' upper bounds (s), ascending; +Inf last
  std::vector<double> counts;  // per bucket (not cumulative), since the exporter started
  std::vector<double> recent;  // per bucket, between the last two readings (zeros: none)
  std::map<std::string, double> burst_factor;  // by window
};

struct StatusReading {
  StatusSource dataplane, iat;
  std::vector<ClassStatus> classes;
  std::vector<IatStatus> ifaces;
};

// The body of a dataplane's or receiver's metrics page read into `into` (rates against
// `before`, the previous reading, taken at before_ms); "" or why not (the page is not the
// format). Pure: the scraper's, and its tests'.
std::string read_dataplane_metrics(std::string_view body, int64_t at_ms,
                                   const StatusReading* before, StatusReading& into);
std::string read_iat_metrics(std::string_view body, const StatusReading* before,
                             StatusReading& into);

class StatusScrape {
 public:
  static constexpr std::chrono::milliseconds kInterval{1000};
  static constexpr std::chrono::milliseconds kWatchMs{5000};
  static constexpr std::chrono::milliseconds kTimeout{500};

  explicit StatusScrape(const ConfigStore& store);
  ~StatusScrape();  // stops and joins
  StatusScrape(const StatusScrape&) = delete;
  StatusScrape& operator=(const StatusScrape&) = delete;

  void start();
  void stop();
  // A status request: the page is watched (a scrape follows when one is due); the latest
  // reading, null before the first.
  std::shared_ptr<const StatusReading> watched();

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  void scrape();

  const ConfigStore& store_;
  std::atomic<int64_t> watched_at_{0};  // steady ms of the last status request
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // latest_, and the thread's sleep
  std::condition_variable cv_;
  std::shared_ptr<const StatusReading> latest_;
  Clock::time_point scraped_at_{};  // the thread's
  std::thread thread_;
};

}  // namespace dripgate::control
