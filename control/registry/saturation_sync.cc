#include "control/registry/saturation_sync.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/http_url.h"
#include "common/prom_text.h"
#include "control/registry/scrape.h"

namespace dripgate::control {

namespace {

using std::chrono::milliseconds;

// How often the configuration in force is looked at when no gate is due sooner.
constexpr milliseconds kFollowConfig{1000};

// The share a gate returns to without a signal: its configured rate, within its bounds.
double configured(const config::Saturation& c) {
  return std::clamp(1.0, c.min_share, c.max_share);
}

}  // namespace

SaturationSync::SaturationSync(ConfigStore& store, Metrics* metrics)
    : store_(store), metrics_(metrics) {}

SaturationSync::~SaturationSync() {
  stop();
}

void SaturationSync::start() {
  thread_ = std::thread([this] { run(); });
}

void SaturationSync::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SaturationSync::run() {
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    follow_config(now);
    scrape_due(now);
    publish();
    Clock::time_point wake = Clock::now() + kFollowConfig;
    for (const auto& [key, g] : gates_) wake = std::min(wake, g.due);
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, wake, [this] { return stop_.load(); });
  }
}

void SaturationSync::follow_config(Clock::time_point now) {
  const std::shared_ptr<const Snapshot> snap = store_.current();
  const config::GlobalGates& gg = snap->cfg.global_gates;
  std::map<Key, Gate> next;
  for (auto [kind, gates] :
       {std::pair<const char*, const std::map<std::string, config::Bucket>*>{"model", &gg.model},
        {"model_tokens", &gg.model_tokens}}) {
    for (const auto& [model, bucket] : *gates) {
      if (!bucket.saturation) continue;
      Key key{kind, model};
      if (auto it = gates_.find(key); it != gates_.end()) {
        Gate& g = it->second;
        if (!(g.law.config() == *bucket.saturation)) {
          const double before = g.law.share();
          g.law.configure(*bucket.saturation);
          note_share(g, before);
        }
        next.emplace(key, std::move(g));
        continue;
      }
      Gate g{kind, model, SaturationLaw(*bucket.saturation), now};
      if (metrics_) metrics_->saturation_share(kind, model, g.law.share());
      next.emplace(key, std::move(g));
    }
  }
  for (const auto& [key, g] : gates_)
    if (!next.count(key) && metrics_) metrics_->saturation_gone(g.kind, g.model);
  gates_ = std::move(next);
}

bool SaturationSync::scrape_due(Clock::time_point now) {
  // The gates due, by URL: one GET serves every gate that names it.
  std::map<std::string, std::vector<Gate*>> due;
  for (auto& [key, g] : gates_)
    if (g.due <= now) due[g.law.config().url].push_back(&g);
  bool moved = false;
  for (const auto& [url, gates] : due) {
    if (stop_) break;
    int64_t timeout_ms = 0;
    for (const Gate* g : gates) timeout_ms = std::max(timeout_ms, g->law.config().timeout_ms);
    // Checked at load: a URL in the configuration parses.
    const std::optional<common::HttpUrl> u = common::parse_http_url(url);
    scrape::Result r =
        u ? scrape::http_get(*u, milliseconds(timeout_ms), scrape::kMaxBodyBytes, &stop_)
          : scrape::Result{scrape::Failure::kConnect, {}, "bad url"};
    if (stop_) break;
    for (Gate* g : gates) {
      const double before = g->law.share();
      if (r.failure != scrape::Failure::kNone)
        failed(*g, scrape::failure_name(r.failure), r.error, g->due);
      else
        read(*g, r.body, g->due);
      note_share(*g, before);
      moved = moved || g->law.share() != before;
      // On the interval's grid; a gate that fell behind (slow scrapes) skips the missed ones.
      g->due = std::max(g->due + milliseconds(g->law.config().interval_ms), Clock::now());
    }
  }
  return moved;
}

void SaturationSync::read(Gate& g, const std::string& body, Clock::time_point at) {
  const config::Saturation& c = g.law.config();
  const std::optional<common::PromSelector> sel = common::parse_prom_selector(c.metric);
  const common::PromReading r =
      sel ? common::read_prom_metric(body, *sel, c.aggregate) : common::PromReading{};
  using Status = common::PromReading::Status;
  if (r.status == Status::kParse) return failed(g, "parse", r.error, at);
  if (r.status == Status::kAbsent) return failed(g, "absent", "no series matches " + c.metric, at);
  if (r.status == Status::kNan)
    return failed(g, "nan", "every series of " + c.metric + " is NaN", at);
  if (g.failing)
    spdlog::info("saturation: {} gate '{}': {} answers again ({} = {})", g.kind, g.model, c.url,
                 c.metric, r.value);
  g.failing = false;
  g.law.signal(r.value, at);
  if (metrics_) metrics_->saturation_signal(g.kind, g.model, r.value);
}

void SaturationSync::failed(Gate& g, std::string_view cause, const std::string& error,
                            Clock::time_point at) {
  const config::Saturation& c = g.law.config();
  if (metrics_) metrics_->saturation_failure(g.kind, g.model, cause);
  if (!g.failing)
    spdlog::warn(
        "saturation: {} gate '{}': no signal from {} ({}: {}); its share {} holds, and moves "
        "back toward the configured rate once {} scrapes in a row have failed",
        g.kind, g.model, c.url, cause, error, g.law.share(), c.failures);
  g.failing = true;
  g.law.failure(at);
}

void SaturationSync::note_share(Gate& g, double before) {
  const double share = g.law.share();
  if (share == before) return;
  if (metrics_) metrics_->saturation_share(g.kind, g.model, share);
  const double rate = configured(g.law.config());
  const int side = share < rate ? -1 : share > rate ? 1 : 0;
  if (side == g.side) return;
  if (side < 0)
    spdlog::warn("saturation: {} gate '{}' held back: at {} of its configured rate", g.kind,
                 g.model, share);
  else if (side > 0)
    spdlog::info("saturation: {} gate '{}' above its configured rate: at {} of it", g.kind, g.model,
                 share);
  else
    spdlog::info("saturation: {} gate '{}' back at its configured rate", g.kind, g.model);
  g.side = side;
}

void SaturationSync::publish() {
  auto next = std::make_shared<SaturationShares>();
  for (const auto& [key, g] : gates_)
    if (g.law.share() != 1)
      (g.kind == "model" ? next->model : next->model_tokens)[g.model] = g.law.share();
  const std::shared_ptr<const SaturationShares> current = store_.saturation();
  if (next->model.empty() && next->model_tokens.empty()) {
    if (current) store_.publish_saturation(nullptr);
  } else if (!current || !(*current == *next)) {
    store_.publish_saturation(std::move(next));
  }
}

}  // namespace dripgate::control
