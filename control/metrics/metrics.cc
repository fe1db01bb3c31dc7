#include "control/metrics/metrics.h"

#include "common/prom_writer.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace dripgate::control {
namespace {

// The format's escaping, numbers and HELP/TYPE lines are common/prom_writer.h's; the series
// are written here, each label present even when empty (as the families always have).
std::string escape_label(std::string_view v) {
  std::string out;
  common::append_prom_escaped(out, v, true);
  return out;
}

std::string format_double(double v) {
  return common::PromWriter::number(v);
}

void header(std::string& out, std::string_view name, std::string_view help, const char* type) {
  common::append_prom_family(out, name, type, help);
}

std::atomic<uint64_t> next_family_id{0};

// A thread's counters by family id and label values, each value length-prefixed (a value may
// hold any byte). Never shrinks: it holds what the families hold, which never shrink either.
struct ThreadCounters {
  std::string key;  // reused: building a key allocates nothing once it has grown
  std::unordered_map<std::string, std::atomic<uint64_t>*> counters;
};

void append_raw(std::string& key, const void* p, size_t n) {
  key.append(static_cast<const char*>(p), n);
}

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : id_(next_family_id.fetch_add(1, std::memory_order_relaxed)),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)) {}

// Counted on every request: a lookup in this thread's cache and an atomic add, no lock and no
// allocation (the family's shared lock, taken by every worker, made its cache line bounce
// between cores, and the label vector was allocated anew each time).
void CounterFamily::inc(Labels label_values, uint64_t n) {
  thread_local ThreadCounters mine;
  std::string& key = mine.key;
  key.clear();
  append_raw(key, &id_, sizeof id_);
  for (std::string_view v : label_values) {
    const uint32_t len = static_cast<uint32_t>(v.size());
    append_raw(key, &len, sizeof len);
    key.append(v);
  }
  auto it = mine.counters.find(key);
  if (it == mine.counters.end()) it = mine.counters.emplace(key, counter(label_values)).first;
  it->second->fetch_add(n, std::memory_order_relaxed);
}

std::atomic<uint64_t>* CounterFamily::counter(Labels label_values) {
  std::vector<std::string> labels(label_values.begin(), label_values.end());
  std::unique_lock lock(mu_);
  auto& slot = values_[std::move(labels)];
  if (!slot) slot = std::make_unique<std::atomic<uint64_t>>(0);
  return slot.get();
}

uint64_t CounterFamily::value(Labels label_values) const {
  std::vector<std::string> labels(label_values.begin(), label_values.end());
  std::shared_lock lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

std::vector<std::pair<std::vector<std::string>, uint64_t>> CounterFamily::values() const {
  std::vector<std::pair<std::vector<std::string>, uint64_t>> out;
  std::shared_lock lock(mu_);
  for (const auto& [labels, v] : values_)
    out.emplace_back(labels, v->load(std::memory_order_relaxed));
  return out;
}

void CounterFamily::render(std::string& out) const {
  header(out, name_, help_, "counter");
  std::shared_lock lock(mu_);
  for (const auto& [labels, v] : values_) {
    out += name_;
    if (!label_names_.empty()) {
      out += '{';
      for (size_t i = 0; i < label_names_.size(); ++i) {
        if (i) out += ',';
        out += label_names_[i] + "=\"" + escape_label(i < labels.size() ? labels[i] : "") + "\"";
      }
      out += '}';
    }
    out += ' ' + std::to_string(v->load(std::memory_order_relaxed)) + '\n';
  }
}

Histogram::Histogram(std::string name, std::string help, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      bounds_(std::move(bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // also catches NaN
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(seconds * 1e9)), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out) const {
  header(out, name_, help_, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    std::string le = i < bounds_.size() ? format_double(bounds_[i]) : "+Inf";
    out += name_ + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + '\n';
  }
  out += name_ + "_sum " +
         format_double(static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9) + '\n';
  // The count is the +Inf bucket, so the exposition is self-consistent under concurrent updates.
  out += name_ + "_count " + std::to_string(cumulative) + '\n';
}

Metrics::Metrics()
    : admissions_("dripgate_admissions_total",
                  "Admission decisions by tenant, refusing gate, result and front (http: "
                  "POST /v1/admit; grpc: Envoy's ShouldRateLimit).",
                  {"tenant", "gate", "result", "front"}),
      http_requests_("dripgate_http_requests_total", "HTTP requests answered, by status code.",
                     {"code"}),
      redis_errors_(
          "dripgate_redis_errors_total",
          "Redis errors by kind: connect, disconnect, timeout, stall (a connection dropped: a "
          "call or its connect and setup unanswered by the deadline), fail_fast (a call "
          "answered unwritten: no connection up, or every one up full), auth (AUTH or SELECT "
          "refused), script_load, noscript, reply (an error reply), late (a reply after "
          "its request was answered 503; undone), lost (a call whose connection went "
          "away before its reply: undone by what Redis holds), late_lost (an undo that "
          "could not be sent: the client shut down or too many were waiting, or Redis could "
          "not run it for 60 s), undo_wait (an undo Redis did not run and can run later, "
          "answered LOADING, BUSY, MASTERDOWN, NOSCRIPT or on a cluster MOVED, ASK, TRYAGAIN, "
          "CLUSTERDOWN or too many redirects: sent again after a back-off); on a "
          "cluster also moved, ask (redirects followed), redirects (too many), tryagain "
          "(a call sent again during a slot migration).",
          {"kind"}),
      dataplane_tag_("dripgate_dataplane_tag_total",
                     "Flow tag requests sent to the dataplane, by result.", {"result"}),
      dataplane_untag_("dripgate_dataplane_untag_total",
                       "Flow untag requests sent to the dataplane, by result.", {"result"}),
      config_reloads_("dripgate_config_reloads_total",
                      "Configuration reloads (SIGHUP or POST /v1/admin/reload) by result: ok "
                      "(in force from the next request), error (refused; the old one stays).",
                      {"result"}),
      degraded_("dripgate_degraded_decisions_total",
                "Admissions, settles and releases decided without Redis (redis.on_failure), by "
                "mode (open: unchecked; local: on this daemon's share, journaled) and result.",
                {"mode", "result"}),
      charges_("dripgate_charges_total",
               "Stream charges (POST /v1/charge) by tenant and result: allowed (recorded), "
               "refused (recorded, the month's quota is spent: the stream is to be cut), "
               "not_found (no open reservation), conflict (after the settle), bad_request, "
               "unavailable.",
               {"tenant", "result"}),
      reconciled_("dripgate_reconciled_total",
                  "Journaled local decisions sent to Redis once it answered again, by result "
                  "(ok: in Redis; retry: sent again later; lost: Redis can never take it, e.g. "
                  "a deferred settle whose reservation expired there).",
                  {"result"}),
      breaker_("dripgate_redis_breaker_transitions_total",
               "A worker's circuit breaker between it and Redis moving to a state: open (Redis "
               "taken as away: requests decided as their on_failure says, unasked), half_open "
               "(probing), closed (Redis answers).",
               {"to"}),
      protobuf_log_("dripgate_protobuf_log_messages_total",
                    "Messages libprotobuf logged (one per bad request for some inputs, such as "
                    "invalid UTF-8 in a string field), by level; the log shows the first of a "
                    "kind and then one line with a count per interval.",
                    {"level"}),
      tls_handshake_failures_("dripgate_http_tls_handshake_failures_total",
                              "TLS handshakes on the HTTP API that failed, by cause "
                              "(no_client_certificate, bad_client_certificate, not_tls, "
                              "protocol, other); the connection is closed after OpenSSL's alert.",
                              {"reason"}),
      auth_refusals_("dripgate_auth_refusals_total",
                     "Requests refused for their credentials (401 or 403, gRPC UNAUTHENTICATED or "
                     "PERMISSION_DENIED) before anything was asked of Redis, by front, scope (api, "
                     "admin, metrics) and reason (missing, unknown_key, expired, wrong_tenant, "
                     "flow_source).",
                     {"front", "scope", "reason"}),
      saturation_failures_("dripgate_saturation_scrape_failures_total",
                           "A model gate's saturation scrapes that gave no signal, by gate, "
                           "model and cause: connect (not resolved, refused, reset), timeout, "
                           "http (not a 200 answer), too_large (a body over 4 MiB), parse (not "
                           "the Prometheus text format), absent (no series matches the metric), "
                           "nan (every matching series is NaN).",
                           {"gate", "model", "cause"}),
      redis_rtt_(
          "dripgate_redis_round_trip_seconds", "Redis round-trip time of one script call.",
          {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      wait_results_("dripgate_queue_requests_total",
                    "Requests that could wait for a gate (a plan's queue), by priority band and "
                    "how they were answered: admitted (at once or after waiting), timed_out (the "
                    "deadline came first: 429), abandoned (the client went away: charged "
                    "nothing), queue_full (control.queue's bounds: 429 at once), refused (by "
                    "what waiting cannot help: quota, concurrency), failed (Redis did not "
                    "answer).",
                    {"band", "result"}),
      wait_seconds_(
          "dripgate_queue_wait_seconds",
          "How long requests waited for a gate before their answer (only those that "
          "waited).",
          {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}),
      token_to_admission_(
          "dripgate_queue_token_to_admission_seconds",
          "Waiters their gate admitted when it held a token for them: from the time it did (the "
          "wait Redis named, counted from the answer that named it) to the admitting answer in "
          "the daemon.",
          {0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.01, 0.025,
           0.05, 0.1}) {
  // Every kind exists from the start (at 0), so an alert on an increase sees the first one.
  for (const char* kind :
       {"connect", "disconnect", "timeout", "stall", "fail_fast", "auth", "script_load", "noscript",
        "reply", "late", "lost", "late_lost", "undo_wait", "moved", "ask", "redirects", "tryagain"})
    redis_errors_.inc({kind}, 0);
  for (const char* result : {"ok", "error"}) config_reloads_.inc({result}, 0);
  for (const char* level : {"warning", "error"}) protobuf_log_.inc({level}, 0);
}

void Metrics::admission(std::string_view tenant, std::string_view gate, std::string_view result,
                        std::string_view front) {
  admissions_.inc({tenant, gate, result, front});
}

namespace {

size_t wait_gate_index(std::string_view kind) {
  for (size_t i = 0; i + 1 < Metrics::kWaitGates.size(); ++i)
    if (Metrics::kWaitGates[i] == kind) return i;
  return Metrics::kWaitGates.size() - 1;
}

const char* band_label(uint8_t band) {
  static constexpr const char* kBands[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  return kBands[band & 7];
}

}  // namespace

void Metrics::waiting(uint8_t band, std::string_view gate_kind, int delta) {
  const size_t g = wait_gate_index(gate_kind);
  waiters_[band & 7][g].fetch_add(delta, std::memory_order_relaxed);
  waiters_seen_[band & 7][g].store(true, std::memory_order_relaxed);
}

int64_t Metrics::waiting(uint8_t band, std::string_view gate_kind) const {
  return waiters_[band & 7][wait_gate_index(gate_kind)].load(std::memory_order_relaxed);
}

void Metrics::waited(uint8_t band, std::string_view result, std::optional<double> waited_s) {
  wait_results_.inc({band_label(band), result});
  if (waited_s) wait_seconds_.observe(*waited_s);
}

void Metrics::http_request(int code) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, code);
  http_requests_.inc({std::string_view(buf, ec == std::errc() ? end - buf : 0)});
}

void Metrics::dataplane(std::string_view op, std::string_view result, uint64_t n) {
  (op == "untag" ? dataplane_untag_ : dataplane_tag_).inc({result}, n);
}

std::string Metrics::render() const {
  std::string out;
  admissions_.render(out);
  charges_.render(out);
  redis_rtt_.render(out);
  redis_errors_.render(out);
  header(out, "dripgate_redis_up", "1 when the last Redis call succeeded.", "gauge");
  out += "dripgate_redis_up " + std::to_string(redis_up_.load(std::memory_order_relaxed)) + '\n';
  dataplane_tag_.render(out);
  dataplane_untag_.render(out);
  http_requests_.render(out);
  config_reloads_.render(out);
  degraded_.render(out);
  reconciled_.render(out);
  breaker_.render(out);
  protobuf_log_.render(out);
  tls_handshake_failures_.render(out);
  auth_refusals_.render(out);
  wait_results_.render(out);
  wait_seconds_.render(out);
  token_to_admission_.render(out);
  header(out, "dripgate_queue_waiters",
         "Requests waiting for a gate now, by priority band and the kind of gate that holds "
         "them back.",
         "gauge");
  for (size_t b = 0; b < waiters_.size(); ++b)
    for (size_t g = 0; g < kWaitGates.size(); ++g)
      if (waiters_seen_[b][g].load(std::memory_order_relaxed))
        out += "dripgate_queue_waiters{band=\"" + std::to_string(b) + "\",gate=\"" +
               std::string(kWaitGates[g]) + "\"} " +
               std::to_string(waiters_[b][g].load(std::memory_order_relaxed)) + '\n';
  auto scalar = [&out](const char* name, const char* help, const char* type, int64_t v) {
    header(out, name, help, type);
    out += std::string(name) + ' ' + std::to_string(v) + '\n';
  };
  auto load = [](const auto& a) { return static_cast<int64_t>(a.load(std::memory_order_relaxed)); };
  scalar("dripgate_http_connections", "Open HTTP connections.", "gauge", load(http_open_));
  scalar("dripgate_http_connections_refused_total",
         "HTTP connections closed at once because control.max_connections were open and none "
         "of them was idle long enough to be evicted.",
         "counter", load(http_refused_));
  scalar("dripgate_http_connections_evicted_total",
         "Idle HTTP connections closed to make room for a new one at control.max_connections.",
         "counter", load(http_evicted_));
  scalar("dripgate_http_request_timeouts_total",
         "HTTP connections closed for not sending a complete request in time.", "counter",
         load(http_timeouts_));
  scalar("dripgate_http_accept_errors_total",
         "Failed accept() calls (mostly: out of file descriptors).", "counter",
         load(http_accept_errors_));
  scalar("dripgate_grpc_calls_in_flight",
         "gRPC calls arrived and not yet answered (capped by control.grpc_max_inflight).", "gauge",
         load(grpc_in_flight_));
  scalar("dripgate_grpc_calls_refused_total",
         "gRPC calls answered RESOURCE_EXHAUSTED at once because control.grpc_max_inflight "
         "calls were in flight (nothing asked of Redis, nothing charged).",
         "counter", load(grpc_refused_));
  scalar("dripgate_journal_pending",
         "Local decisions (redis.on_failure: local) journaled and not yet in Redis.", "gauge",
         load(journal_pending_));
  scalar("dripgate_redis_breaker_open",
         "Workers whose circuit breaker is not closed (open or half-open).", "gauge",
         load(breaker_open_));
  scalar("dripgate_local_decisions_bytes",
         "The memory the local decisions take: the journal's index of the records not yet in "
         "Redis and the local reservations and leases open (bounded by redis.journal_max_mb).",
         "gauge", load(journal_pending_bytes_));
  header(out, "dripgate_brake_factor",
         "The service-wide brake's factor on every enforced rate (POST /v1/admin/brake); 1: no "
         "brake.",
         "gauge");
  out += "dripgate_brake_factor " + format_double(brake_factor()) + '\n';
  render_saturation(out);
  render_limits(out);
  return out;
}

void Metrics::render_limits(std::string& out) const {
  header(out, "dripgate_quota_remaining_ratio",
         "What a tenant has left of one of its own limits (quota: tenant, tenant_tokens, quota, "
         "concurrency) as its last decision on this daemon read it, 0..1; only the " +
             std::to_string(LimitTracker::kTop) +
             " tenants closest to each limit, read within the last minute.",
         "gauge");
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  for (const LimitTracker::Row& r : limits_.lowest(now))
    out += "dripgate_quota_remaining_ratio{tenant=\"" + escape_label(r.tenant) + "\",quota=\"" +
           r.quota + "\"} " + format_double(r.ratio()) + '\n';
}

void Metrics::saturation_share(std::string_view gate, std::string_view model, double share) {
  std::lock_guard lock(saturation_mu_);
  saturation_.try_emplace({std::string(gate), std::string(model)}, share, NAN).first->second.first =
      share;
}

void Metrics::saturation_signal(std::string_view gate, std::string_view model, double signal) {
  std::lock_guard lock(saturation_mu_);
  saturation_.try_emplace({std::string(gate), std::string(model)}, 1.0, signal)
      .first->second.second = signal;
}

void Metrics::saturation_gone(std::string_view gate, std::string_view model) {
  std::lock_guard lock(saturation_mu_);
  saturation_.erase({std::string(gate), std::string(model)});
}

void Metrics::render_saturation(std::string& out) const {
  saturation_failures_.render(out);
  std::lock_guard lock(saturation_mu_);
  if (saturation_.empty()) return;
  auto labels = [](const std::pair<std::string, std::string>& k) {
    return "{gate=\"" + escape_label(k.first) + "\",model=\"" + escape_label(k.second) + "\"} ";
  };
  header(out, "dripgate_saturation_share",
         "A model gate's share of its configured rate (capacity and refill, or a window's "
         "limit) in force, moved by its backends' saturation signal.",
         "gauge");
  for (const auto& [k, v] : saturation_)
    out += "dripgate_saturation_share" + labels(k) + format_double(v.first) + '\n';
  header(out, "dripgate_saturation_signal",
         "The saturation signal a model gate's scrape read last (absent until one was read).",
         "gauge");
  for (const auto& [k, v] : saturation_)
    if (!std::isnan(v.second))
      out += "dripgate_saturation_signal" + labels(k) + format_double(v.second) + '\n';
}

}  // namespace dripgate::control
