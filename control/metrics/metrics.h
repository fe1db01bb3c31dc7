// Prometheus metrics of dripgate-control: one registry shared by every worker thread. Counting is
// lock-free (atomics) and allocation-free: each thread finds a label set's counter in a cache of
// its own; only a thread's first use of a label set takes the family's lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "control/metrics/limit_tracker.h"
#include "control/redis/redis_client.h"

namespace dripgate::control {

// A counter with labels; label values are escaped when rendered.
class CounterFamily {
 public:
  using Labels = std::initializer_list<std::string_view>;
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  void inc(Labels label_values, uint64_t n = 1);
  uint64_t value(Labels label_values) const;
  // Every label set with its value (a reader's copy: the status page's).
  std::vector<std::pair<std::vector<std::string>, uint64_t>> values() const;
  void render(std::string& out) const;

 private:
  // The counter of a label set, created at 0 on first use; its address never changes.
  std::atomic<uint64_t>* counter(Labels label_values);

  // Names this family in the threads' caches (an address could be reused by a later family).
  const uint64_t id_;
  std::string name_, help_;
  std::vector<std::string> label_names_;
  mutable std::shared_mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<std::atomic<uint64_t>>> values_;
};

class Histogram {
 public:
  // Upper bounds in seconds, ascending; +Inf is implicit.
  Histogram(std::string name, std::string help, std::vector<double> bounds);
  void observe(double seconds);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  void render(std::string& out) const;

 private:
  std::string name_, help_;
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // non-cumulative; bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

class Metrics : public RedisObserver {
 public:
  Metrics();

  // result: "allowed" | "refused" | "bad_request" | "conflict" | "unavailable"; gate "" when none;
  // front: "http" | "grpc", the API the request came by.
  void admission(std::string_view tenant, std::string_view gate, std::string_view result,
                 std::string_view front = "http");
  // A stream's charge (POST /v1/charge): result as for admission, "refused" being a charge
  // recorded over the month's quota (the stream is to be cut), "not_found" one for no open
  // reservation, "conflict" one after the settle.
  void charge(std::string_view tenant, std::string_view result) { charges_.inc({tenant, result}); }
  void http_request(int code);
  // The HTTP front's connections: open now, refused or evicted (idle, to make room) at
  // control.max_connections, closed for not sending a complete request within
  // control.request_timeout_s, and failed accept() calls.
  void http_connection_opened() { http_open_.fetch_add(1, std::memory_order_relaxed); }
  void http_connection_closed() { http_open_.fetch_sub(1, std::memory_order_relaxed); }
  void http_connection_refused() { http_refused_.fetch_add(1, std::memory_order_relaxed); }
  void http_connection_evicted() { http_evicted_.fetch_add(1, std::memory_order_relaxed); }
  void http_request_timeout() { http_timeouts_.fetch_add(1, std::memory_order_relaxed); }
  void http_accept_error() { http_accept_errors_.fetch_add(1, std::memory_order_relaxed); }
  // A TLS handshake on the HTTP API that failed, by cause: "no_client_certificate",
  // "bad_client_certificate" (one control.tls.client_ca_file did not sign, or expired), "not_tls"
  // (plaintext on the TLS port), "protocol" (no version or cipher in common), "other".
  void tls_handshake_failure(std::string_view reason) { tls_handshake_failures_.inc({reason}); }
  const CounterFamily& tls_handshake_failures() const { return tls_handshake_failures_; }
  // A request refused for its credentials, before anything was asked of Redis: front "http" |
  // "grpc"; scope "api" (admit, settle, charge, release), "admin" (the admin API and the status
  // page), "metrics" (/metrics, /healthz); reason "missing" (no credential), "unknown_key" (a
  // token or key that is no one's), "expired" (a tenant's key past its rotation's overlap),
  // "wrong_tenant" (another tenant's key), "flow_source" (a tenant's key tagging a flow from
  // elsewhere).
  void auth_refusal(std::string_view front, std::string_view scope, std::string_view reason) {
    auth_refusals_.inc({front, scope, reason});
  }
  const CounterFamily& auth_refusals() const { return auth_refusals_; }
  // The gRPC front's calls in flight: a call begins (returns how many are in flight with it)
  // and ends; refused: answered RESOURCE_EXHAUSTED at control.grpc_max_inflight. One gRPC
  // server counts in one Metrics, so this count is its cap's count too.
  int64_t grpc_call_begin() { return grpc_in_flight_.fetch_add(1, std::memory_order_relaxed) + 1; }
  void grpc_call_end() { grpc_in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  void grpc_call_refused() { grpc_refused_.fetch_add(1, std::memory_order_relaxed); }
  int64_t grpc_calls_in_flight() const { return grpc_in_flight_.load(std::memory_order_relaxed); }
  uint64_t grpc_calls_refused() const { return grpc_refused_.load(std::memory_order_relaxed); }
  // A message libprotobuf logged (protobuf_log.h), by level ("info" | "warning" | "error" |
  // "fatal"): every one, whether written or held back.
  void protobuf_log(std::string_view level) { protobuf_log_.inc({level}); }
  const CounterFamily& protobuf_log_messages() const { return protobuf_log_; }
  // op: "tag" | "untag"; result: "ok" | "error" | "unavailable" | "timeout".
  // n: the flows of one line with that result.
  void dataplane(std::string_view op, std::string_view result, uint64_t n = 1);
  // A configuration reload (SIGHUP or the admin API): applied, or refused with the old one kept.
  void config_reload(bool ok) { config_reloads_.inc({ok ? "ok" : "error"}); }
  // A decision made without Redis (redis.on_failure): mode "open" | "local", result as
  // admission's.
  void degraded(std::string_view mode, std::string_view result) { degraded_.inc({mode, result}); }
  // A journaled local decision sent to Redis: in ("ok"), to try again ("retry"), or one Redis
  // can never take ("lost": a tenant no longer configured, a deferred settle whose reservation
  // expired there).
  void reconciled(std::string_view result) { reconciled_.inc({result}); }
  // The service-wide brake's factor in force on this daemon (1: no brake).
  void brake_factor(double f) { brake_factor_.store(f, std::memory_order_relaxed); }
  double brake_factor() const { return brake_factor_.load(std::memory_order_relaxed); }
  // A model gate's saturation (registry/saturation_sync.h), gate "model" | "model_tokens": its
  // share of the configured rate in force and the signal read last (none until one is); gone:
  // forgotten (its saturation left the configuration). A failed scrape by cause: "connect",
  // "timeout", "http", "too_large", "parse", "absent", "nan".
  void saturation_share(std::string_view gate, std::string_view model, double share);
  void saturation_signal(std::string_view gate, std::string_view model, double signal);
  void saturation_gone(std::string_view gate, std::string_view model);
  void saturation_failure(std::string_view gate, std::string_view model, std::string_view cause) {
    saturation_failures_.inc({gate, model, cause});
  }
  const CounterFamily& saturation_failures() const { return saturation_failures_; }
  // A worker's circuit breaker moved to `to` ("open" | "half_open" | "closed"); left_closed /
  // closed_again: it left or came back to closed (the gauge of workers not closed).
  void breaker(std::string_view to, bool left_closed, bool closed_again) {
    breaker_.inc({to});
    if (left_closed) breaker_open_.fetch_add(1, std::memory_order_relaxed);
    if (closed_again) breaker_open_.fetch_sub(1, std::memory_order_relaxed);
  }
  const CounterFamily& breaker_transitions() const { return breaker_; }
  int64_t breaker_open() const { return breaker_open_.load(std::memory_order_relaxed); }
  // The journal's records not yet in Redis, and the memory they take.
  void journal_pending(size_t n, size_t bytes) {
    journal_pending_.store(static_cast<int64_t>(n), std::memory_order_relaxed);
    journal_pending_bytes_.store(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }

  // The gateway's queue (control/gateway/wait_queue.h). A waiter of band (0..7) joined
  // (delta +1) or left (-1) the queue of a gate of kind gate_kind ("tenant", "model", ...,
  // kWaitGates); an unknown kind is counted as "other".
  static constexpr std::array<std::string_view, 12> kWaitGates = {
      "tenant", "tenant_tokens", "user",         "user_tokens", "api_key", "api_key_tokens",
      "ip",     "model",         "model_tokens", "tool",        "total",   "other"};
  void waiting(uint8_t band, std::string_view gate_kind, int delta);
  int64_t waiting(uint8_t band, std::string_view gate_kind) const;
  // A request that could wait is answered: result "admitted" (at once or after waiting),
  // "timed_out" (its deadline came first), "abandoned" (its client went away), "queue_full"
  // (control.queue's bounds), "refused" (by what waiting cannot help: quota, concurrency),
  // "failed" (Redis did not answer); waited_s: how long it waited (only for those that did).
  void waited(uint8_t band, std::string_view result, std::optional<double> waited_s);
  const CounterFamily& wait_results() const { return wait_results_; }
  const Histogram& wait_seconds() const { return wait_seconds_; }
  // A waiter its gate's timer sent and Redis admitted: from the time the gate held its token (the
  // wait Redis named, counted from the answer that named it) to the admitting answer.
  void token_to_admission(double seconds) { token_to_admission_.observe(seconds); }
  const Histogram& token_to_admission() const { return token_to_admission_; }

  // The tenants closest to their limits (limit_tracker.h): each front loop notes its decisions'
  // readings through a slot of its own; rendered as dripgate_quota_remaining_ratio.
  LimitTracker& limits() { return limits_; }
  const LimitTracker& limits() const { return limits_; }

  // RedisObserver
  void round_trip(double seconds) override { redis_rtt_.observe(seconds); }
  void error(const std::string& kind) override { redis_errors_.inc({kind}); }
  void up(bool is_up) override { redis_up_.store(is_up ? 1 : 0, std::memory_order_relaxed); }

  bool redis_up() const { return redis_up_.load(std::memory_order_relaxed) != 0; }
  const CounterFamily& admissions() const { return admissions_; }
  const CounterFamily& dataplane_tags() const { return dataplane_tag_; }
  const CounterFamily& dataplane_untags() const { return dataplane_untag_; }
  const CounterFamily& redis_errors() const { return redis_errors_; }
  const CounterFamily& http_requests() const { return http_requests_; }
  const CounterFamily& config_reloads() const { return config_reloads_; }
  const CounterFamily& degraded_decisions() const { return degraded_; }
  const CounterFamily& reconciled_records() const { return reconciled_; }
  const CounterFamily& charges() const { return charges_; }
  const Histogram& redis_round_trip() const { return redis_rtt_; }

  // The Prometheus text exposition format, version 0.0.4.
  std::string render() const;

 private:
  void render_saturation(std::string& out) const;
  void render_limits(std::string& out) const;

  CounterFamily admissions_;
  CounterFamily http_requests_;
  CounterFamily redis_errors_;
  CounterFamily dataplane_tag_;
  CounterFamily dataplane_untag_;
  CounterFamily config_reloads_;
  CounterFamily degraded_;
  CounterFamily charges_;
  CounterFamily reconciled_;
  CounterFamily breaker_;
  std::atomic<int64_t> breaker_open_{0};
  CounterFamily protobuf_log_;
  CounterFamily tls_handshake_failures_;
  CounterFamily auth_refusals_;
  std::atomic<int64_t> journal_pending_{0}, journal_pending_bytes_{0};
  std::atomic<double> brake_factor_{1.0};
  CounterFamily saturation_failures_;
  mutable std::mutex saturation_mu_;  // the scraper writes once an interval, /metrics reads
  // gate, model -> share, signal (NaN: none read yet)
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> saturation_;
  Histogram redis_rtt_;
  CounterFamily wait_results_;
  Histogram wait_seconds_;
  Histogram token_to_admission_;
  std::array<std::array<std::atomic<int64_t>, kWaitGates.size()>, 8> waiters_{};
  std::array<std::array<std::atomic<bool>, kWaitGates.size()>, 8> waiters_seen_{};
  std::atomic<int> redis_up_{0};
  std::atomic<int64_t> http_open_{0};
  std::atomic<int64_t> grpc_in_flight_{0};
  std::atomic<uint64_t> grpc_refused_{0};
  std::atomic<uint64_t> http_refused_{0}, http_evicted_{0}, http_timeouts_{0},
      http_accept_errors_{0};
  LimitTracker limits_;
};

}  // namespace dripgate::control
