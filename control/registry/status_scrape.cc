#include "control/registry/status_scrape.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include "common/http_url.h"
#include "common/prom_text.h"
#include "control/registry/scrape.h"

namespace dripgate::control {

namespace {

using common::PromSample;

std::string_view label(const PromSample& s, std::string_view name) {
  for (const auto& [n, v] : s.labels)
    if (n == name) return v;
  return {};
}

// What a counter gained per second between two readings dt_s apart (a reset reads as 0).
double per_s(double now, double before, double dt_s) {
  return dt_s > 0 ? std::max(0.0, now - before) / dt_s : NAN;
}

double le_value(std::string_view le) {
  if (le == "+Inf") return std::numeric_limits<double>::infinity();
  std::string s(le);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty() ? v : NAN;
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr std::string_view kBytes = "dripgate_dataplane_sent_bytes_total";
constexpr std::string_view kPackets = "dripgate_dataplane_sent_packets_total";
constexpr std::string_view kConfigured = "dripgate_dataplane_drip_configured_bytes_per_second";
constexpr std::string_view kDepth = "dripgate_dataplane_queue_depth_packets";
constexpr std::string_view kLimit = "dripgate_dataplane_queue_limit_packets";
constexpr std::string_view kDrops = "dripgate_dataplane_drops_total";
constexpr std::string_view kIatBucket = "dripgate_iat_interarrival_seconds_bucket";
constexpr std::string_view kBurst = "dripgate_iat_burst_factor";

// A gauge seen for the first time replaces NaN; seen again (several ports) adds up.
void add(double& to, double v) {
  to = std::isnan(to) ? v : to + v;
}

// A histogram of many buckets (the probe's log-linear edges: hundreds) kept to the bounds
// nearest below each power of ten, and +Inf: what a page can draw. Cumulative counts, so
// dropping a bound merges its bucket into the next.
std::map<double, double> coarse(const std::map<double, double>& cumulative) {
  constexpr size_t kMaxBuckets = 24;
  if (cumulative.size() <= kMaxBuckets) return cumulative;
  std::map<double, double> out;
  for (double decade = 1e-9; decade <= 1e3; decade *= 10) {
    auto it = cumulative.upper_bound(decade * (1 + 1e-9));
    if (it != cumulative.begin()) out.insert(*std::prev(it));
  }
  out.insert(*cumulative.rbegin());
  return out;
}

}  // namespace

std::string read_dataplane_metrics(std::string_view body, int64_t at_ms,
                                   const StatusReading* before, StatusReading& into) {
  static constexpr std::string_view kNames[] = {kBytes, kPackets, kConfigured,
                                                kDepth, kLimit,   kDrops};
  std::vector<PromSample> samples;
  if (std::string why = common::read_prom_samples(body, kNames, samples); !why.empty()) return why;
  std::map<std::string, ClassStatus, std::less<>> classes;
  for (const PromSample& s : samples) {
    const std::string_view cls = label(s, "class");
    // Series without a class are the port's (its rate, unshaped frames); only their drops (a
    // malformed frame, an unknown flow) are shown, as a row without a class.
    if (cls.empty() && s.name != kDrops) continue;
    ClassStatus& c = classes[std::string(cls)];
    c.cls = cls;
    if (s.name == kBytes) c.sent_bytes += s.value;
    if (s.name == kPackets) c.sent_packets += s.value;
    if (s.name == kConfigured) add(c.configured_bytes_per_s, s.value);
    if (s.name == kDepth) add(c.queue_depth, s.value);
    if (s.name == kLimit) add(c.queue_limit, s.value);
    if (s.name == kDrops) c.drops[std::string(label(s, "cause"))].total += s.value;
  }
  const bool rates = before && before->dataplane.at_ms > 0 && at_ms > before->dataplane.at_ms;
  const double dt = rates ? static_cast<double>(at_ms - before->dataplane.at_ms) / 1000 : 0;
  into.classes.clear();
  for (auto& [name, c] : classes) {
    const ClassStatus* was = nullptr;
    if (rates)
      for (const ClassStatus& b : before->classes)
        if (b.cls == name) was = &b;
    if (was) {
      c.sent_bytes_per_s = per_s(c.sent_bytes, was->sent_bytes, dt);
      c.sent_packets_per_s = per_s(c.sent_packets, was->sent_packets, dt);
      for (auto& [cause, d] : c.drops) {
        auto it = was->drops.find(cause);
        d.per_s = per_s(d.total, it == was->drops.end() ? 0 : it->second.total, dt);
      }
    }
    into.classes.push_back(std::move(c));
  }
  return {};
}

std::string read_iat_metrics(std::string_view body, const StatusReading* before,
                             StatusReading& into) {
  static constexpr std::string_view kNames[] = {kIatBucket, kBurst};
  std::vector<PromSample> samples;
  if (std::string why = common::read_prom_samples(body, kNames, samples); !why.empty()) return why;
  // iface -> le -> cumulative count
  std::map<std::string, std::map<double, double>> buckets;
  std::map<std::string, std::map<std::string, double>> bursts;
  for (const PromSample& s : samples) {
    const std::string iface(label(s, "iface"));
    if (s.name == kBurst) {
      bursts[iface][std::string(label(s, "window"))] = s.value;
      continue;
    }
    const double le = le_value(label(s, "le"));
    if (!std::isnan(le)) buckets[iface][le] += s.value;
  }
  into.ifaces.clear();
  for (const auto& [iface, all] : buckets) {
    IatStatus f;
    f.iface = iface;
    const std::map<double, double> cumulative = coarse(all);
    double below = 0;
    for (const auto& [le, n] : cumulative) {
      f.le.push_back(le);
      f.counts.push_back(std::max(0.0, n - below));
      below = std::max(below, n);
    }
    f.recent.assign(f.counts.size(), 0);
    if (before)
      for (const IatStatus& b : before->ifaces)
        if (b.iface == iface && b.le == f.le)
          for (size_t i = 0; i < f.counts.size(); ++i)
            f.recent[i] = std::max(0.0, f.counts[i] - b.counts[i]);
    if (auto it = bursts.find(iface); it != bursts.end()) f.burst_factor = it->second;
    into.ifaces.push_back(std::move(f));
  }
  for (auto& [iface, windows] : bursts)  // an interface with burst factors and no histogram
    if (!buckets.count(iface)) into.ifaces.push_back(IatStatus{iface, {}, {}, {}, windows});
  return {};
}

StatusScrape::StatusScrape(const ConfigStore& store) : store_(store) {}

StatusScrape::~StatusScrape() {
  stop();
}

void StatusScrape::start() {
  thread_ = std::thread([this] { run(); });
}

void StatusScrape::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const StatusReading> StatusScrape::watched() {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count();
  const int64_t was = watched_at_.exchange(now, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  // Nobody watched for a while: the thread sleeps until told.
  if (now - was > kWatchMs.count()) cv_.notify_all();
  return latest_;
}

void StatusScrape::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto now = Clock::now();
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    const bool watched = now_ms - watched_at_.load(std::memory_order_relaxed) <= kWatchMs.count();
    if (watched && now - scraped_at_ >= kInterval) {
      scraped_at_ = now;
      lock.unlock();
      scrape();
      lock.lock();
      continue;
    }
    if (watched)
      cv_.wait_until(lock, scraped_at_ + kInterval);
    else
      cv_.wait(lock);
  }
}

void StatusScrape::scrape() {
  const config::Control::Status& cfg = store_.current()->cfg.control.status;
  std::shared_ptr<const StatusReading> before;
  {
    std::lock_guard lock(mu_);
    before = latest_;
  }
  auto next = std::make_shared<StatusReading>(before ? *before : StatusReading{});
  auto one = [&](const std::string& url, StatusSource& src, auto read) {
    if (url != src.url) src = StatusSource{url, {}, 0};  // configured anew: nothing of the old one
    if (url.empty()) return;
    const std::optional<common::HttpUrl> u = common::parse_http_url(url);  // checked at load
    scrape::Result r = u ? scrape::http_get(*u, kTimeout, scrape::kMaxBodyBytes, &stop_)
                         : scrape::Result{scrape::Failure::kConnect, {}, "bad url"};
    if (r.failure != scrape::Failure::kNone) {
      src.error = std::string(scrape::failure_name(r.failure)) + ": " + r.error;
      return;
    }
    const int64_t at = unix_ms();
    if (std::string why = read(r.body, at); !why.empty()) {
      src.error = "parse: " + why;
      return;
    }
    src.error.clear();
    src.at_ms = at;
  };
  const StatusReading* prev = before.get();
  one(cfg.dataplane_metrics_url, next->dataplane, [&](std::string_view body, int64_t at) {
    return read_dataplane_metrics(body, at, prev, *next);
  });
  if (next->dataplane.url.empty()) next->classes.clear();
  one(cfg.iat_metrics_url, next->iat,
      [&](std::string_view body, int64_t) { return read_iat_metrics(body, prev, *next); });
  if (next->iat.url.empty()) next->ifaces.clear();
  std::lock_guard lock(mu_);
  latest_ = std::move(next);
}

}  // namespace dripgate::control
