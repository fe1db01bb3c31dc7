// The service layer of dripgate-control: one decision per API request, whatever the transport.
// Admission is the engine's; what follows from it is the gateway's: an admitted flow is
// remembered and tagged into its plan's class on the dataplane, a release untags it, and every
// admission is counted. One Gateway per worker thread, on that thread's event loop.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>

#include <absl/container/flat_hash_map.h>

#include "config/config.h"
#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"
#include "control/dataplane_client/dataplane_client.h"
#include "control/gateway/breaker.h"
#include "control/gateway/decision_log.h"
#include "control/gateway/wait_budget.h"
#include "control/gateway/wait_queue.h"
#include "control/metrics/metrics.h"
#include "control/outage/fallback.h"
#include "control/outage/reconcile.h"

struct event;
struct event_base;

namespace dripgate::control {

// A new event loop for a front's worker (the HTTP workers, the gRPC loops), for the caller to
// free; nullptr when libevent cannot make one. Its timers are precise
// (EVENT_BASE_FLAG_PRECISE_TIMER: epoll waits on a timerfd): a waiter's timer is set to the
// microsecond its gate holds the token, and epoll_wait's millisecond timeout, rounded up, would
// admit it up to 1 ms after that, for every waiter. The cost is a timerfd_settime in the loop
// passes where the earliest timer changed. Its changelist folds the add/del pairs that hiredis
// makes within one loop pass into at most one epoll_ctl per fd.
event_base* new_front_loop();

// flow_tag: the dataplane's answer for the request's flow ("ok" | "error" | "unavailable" |
// "timeout", see DataplaneClient), or empty when no flow was tagged or untagged.
struct AdmitDecision {
  AdmitResult result;
  std::string flow_tag;
};

// flow_tag: the dataplane's answer to the renewal of the request's flow tag, or empty when none
// was renewed (no flow admitted with the request on this daemon, or the charge not allowed).
struct ChargeDecision {
  ChargeResult result;
  std::string flow_tag;
};

struct ReleaseDecision {
  ReleaseResult result;
  std::string flow_tag;
};

class Gateway {
 public:
  // How long a tagged flow stays in its class without a release, when the plan has no lease.
  static constexpr int kDefaultTagTtlS = 300;

  // store, flows and metrics are shared by the workers and outlive the gateway. Each request
  // runs on the store's snapshot in force when it arrives; the dataplane socket is read once.
  // decisions: the decision log's file (control.decision_log), or null for none.
  // front: the metrics' label for the API this gateway serves ("http", "grpc").
  // fallback: the process's local decisions (redis.on_failure: local), shared by every gateway;
  // null: `local` answers as `closed`.
  // budget: the daemon's count of waiting requests (control.queue), shared by every gateway;
  // null: this gateway's own.
  Gateway(const ConfigStore& store, event_base* base, AdmittedFlows& flows, Metrics& metrics,
          int dataplane_timeout_ms, const DecisionLogFile* decisions = nullptr,
          std::string front = "http", Fallback* fallback = nullptr, WaitBudget* budget = nullptr);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Each calls done exactly once, on the loop. An admitted request with a flow is answered
  // after the dataplane answered the tag (bounded by its timeout), so a caller that starts
  // sending right after the answer finds its flow already in its class.
  //
  // A request a rate gate refuses may wait, up to its max_wait_ms (capped by its plan's
  // queue.max_wait_ms, which is also its default), in this gateway's queue for that gate
  // (wait_queue.h: by its plan's priority band, then round robin across tenants, FIFO within
  // one), and is answered the moment the gate admits it, or 429 at its deadline; the answer
  // says how long it waited (waited_ms). A request that may wait and meets a gate others already
  // wait on here joins them without asking Redis: it cannot overtake them. Returns the
  // request's handle while it may wait, else 0.
  uint64_t admit(AdmitRequest req, std::function<void(AdmitDecision)> done);
  // The client of a waiting request went away: it leaves the queue at once and its place goes to
  // the next. It is charged nothing (admitted meanwhile by a call already in Redis, its
  // reservation and lease are given back). Its done is still called once, later, with
  // kUnavailable. A handle already answered does nothing.
  void abandon(uint64_t handle);
  // Shutting down: every waiting request is answered now (429, as at its deadline), and those
  // that come later do not wait.
  void drain_waiters();
  size_t waiters() const { return queue_.size(); }
  // The memory a waiting request takes in the gateway, at most, beside its client's connection:
  // its admission (296 B: the request packed to be sent again, its last refusal, the gate's
  // name), its place in the queue (WaitQueue::kBytesPerWaiter) and in the handle index.
  // gateway_wait_test measures 445 B a waiter for 100,000 of 1,000 tenants on one gate.
  static constexpr size_t kBytesPerWaiter = 512;
  void settle(SettleRequest req, std::function<void(SettleResult)> done);
  // One charge of a stream (POST /v1/charge). An allowed charge of a request admitted with a
  // flow on this daemon tags the flow again, for the lease it renewed (the plan's lease, or
  // kDefaultTagTtlS without one), so a stream longer than the lease stays in its class; it is
  // answered after the dataplane answered that tag, as an admission is.
  void charge(ChargeRequest req, std::function<void(ChargeDecision)> done);
  // The request is over whether or not it held a lease: its flow leaves its class.
  void release(ReleaseRequest req, std::function<void(ReleaseDecision)> done);

  bool redis_up() const { return engine_.redis_up(); }
  int redis_connected() const { return engine_.redis_connected(); }
  // Since when (steady clock, ms) this worker's Redis has not answered: its connections are
  // down, or its calls fail (the last within 2 s: a worker without requests since does not
  // stay in an outage that is over); 0 while it answers.
  int64_t outage_since_ms() const;
  size_t journal_pending() const { return fallback_ ? fallback_->pending() : 0; }
  std::string_view redis_state() const { return engine_.redis_state(); }
  bool dataplane_connected() const { return dp_.connected(); }
  // The configuration in force as this worker sees it.
  const std::shared_ptr<const Snapshot>& snapshot() { return engine_.snapshot(); }
  const std::shared_ptr<const TenantDirectory>& registry() { return engine_.registry(); }
  RedisCalls& redis() { return engine_.redis(); }
  const std::shared_ptr<const Brake>& brake() { return engine_.brake(); }

 private:
  // Feeds the metrics and notes when Redis went away.
  struct Watch : RedisObserver {
    explicit Watch(Metrics& m) : metrics(m) {}
    void round_trip(double s) override { metrics.round_trip(s); }
    void error(const std::string& kind) override { metrics.error(kind); }
    void up(bool is_up) override;
    Metrics& metrics;
    std::atomic<int64_t> down_since_ms{0};
  };
  struct Admission;
  struct GateWait;
  Admission* take_admission();
  void give_back(Admission* a);
  // Asks Redis for a (or, with the breaker open, decides without it).
  void send(Admission* a, const AdmitRequest& req);
  // An admission's answer from the engine (the callback's own, moved on from there): the
  // outage bookkeeping, then the queue (wait()) or the answer.
  void admitted(Admission* a, AdmitResult& r);
  // The answer: the metrics, the decision log, the flow's tag, done.
  void answer(Admission* a, AdmitResult& r);
  // ---- the queue (wait_queue.h) ----
  // Whether a, just answered r, waits on; if not, it has left the queue (r is its answer).
  bool wait(Admission* a, AdmitResult& r);
  // a takes a place on gate (kind: the refusing gate's name); false (r says queue_full): none.
  bool join(Admission* a, std::string gate, std::string_view kind, int64_t now_ms, AdmitResult& r);
  // served: its gate answered it (the turn passes on), rather than it going.
  void leave_queue(Admission* a, bool served = false);
  // The gate's retry runs at at_us (steady clock; or earlier, already set), unless one is with
  // Redis.
  // token: at_us is when the gate holds a token (Redis said so), which
  // dripgate_queue_token_to_admission_seconds counts from.
  void schedule(GateWait& g, int64_t at_us, bool token = false);
  // The gate's first waiter is sent to Redis; a gate nobody waits on any more goes.
  void retry(GateWait& g);
  // The gate whose first waiter was just answered r: when to try the next.
  void next_after(GateWait& g, const AdmitResult& r, int64_t now_us);
  GateWait& gate_wait(const std::string& gate, std::string_view kind);
  GateWait* find_gate_wait(const std::string& gate);
  // A gate a request of `band` that may wait shares with waiters here, which it joins without
  // asking Redis (empty: none, or one whose waiters here are all of a lower band).
  // higher: there are waiters on one of its gates here, all of a lower band (the request asks
  // Redis, the gate first: the gate is busy).
  struct WaitedGate {
    std::string key;
    std::string_view kind;
    bool higher = false;
  };
  WaitedGate waited_gate(const AdmitRequest& req, uint8_t band) const;
  void expire();
  void expire_before(int64_t until_ms);
  void arm_deadline();
  static void on_gate_due(int, short, void* arg);
  static void on_deadline(int, short, void* arg);
  // The waiter answered without a client: what it took given back, done called.
  void abandoned(Admission* a, const AdmitResult& r);
  // A decision Redis could not make, under the tenant's redis.on_failure.
  void degraded_admit(config::OnFailure mode, const Snapshot& snap, const AdmitRequest& req,
                      AdmitResult& r);
  // Runs fn on the loop, after the current call returned (callbacks never run inside a call).
  void post(std::function<void()> fn);
  template <class F, class R>
  void later(F done, R r) {
    post([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
  }
  // A charge's end: the flow's tag renewed when the charge was allowed.
  void charged(const std::string& request_id, ChargeResult r,
               std::function<void(ChargeDecision)> done);
  // A call sent to Redis failed, or was answered: the outage clock and the breaker.
  void redis_failed(const std::string& error);
  void redis_answered();
  // The breaker moved from `before`: counted, and logged once per move.
  void breaker_moved(Breaker::State before);
  // Whether an admission needs its tenant's plan before it goes to Redis: a plan of the snapshot
  // has its own on_failure (fallback.h's failure_mode), or a queue. Neither, the common case, is
  // known without looking the tenant up. Reads the breaker's options of a new snapshot.
  bool plans_matter(const std::shared_ptr<const Snapshot>& snap);
  static void on_tick(int, short, void* arg);
  void reconcile_some();

  event_base* base_;
  AdmittedFlows& flows_;
  Metrics& metrics_;
  std::string front_;
  Fallback* fallback_;
  // Where this gateway's admissions report what their tenants have left (limit_tracker.h).
  LimitTracker::Slot limits_;
  Watch watch_;
  std::atomic<int64_t> failing_since_ms_{0}, last_failure_ms_{0};
  std::mt19937_64 rng_{std::random_device{}()};
  // The snapshot plans_matter last saw (held, so that its address cannot come back as
  // another's) and whether one of its plans has an on_failure, or a queue.
  std::shared_ptr<const Snapshot> modes_of_;
  bool plan_modes_ = false;
  bool plan_queues_ = false;
  event* tick_ = nullptr;
  ReconcilePace pace_;
  Breaker breaker_;
  // Admissions answered, kept for the next ones (take_admission), at most kSpareAdmissions.
  // Before the engine: destroyed after it, whose last callbacks still give theirs back.
  static constexpr size_t kSpareAdmissions = 256;
  // The request buffer a spare admission keeps (bytes): a common request's strings fit.
  static constexpr size_t kKeptCapacity = 256;
  std::vector<std::unique_ptr<Admission>> spare_admissions_;
  // The waiting requests and their gates, before the engine too (its last callbacks answer
  // theirs).
  WaitQueue queue_{{SIZE_MAX, SIZE_MAX}};  // bounded by the budget, across workers
  std::unique_ptr<WaitBudget> own_budget_;
  WaitBudget* budget_;
  uint64_t last_handle_ = 0;
  absl::flat_hash_map<uint64_t, Admission*> waiting_;  // by handle, until answered
  std::unordered_map<std::string, std::unique_ptr<GateWait>> gate_waits_;
  std::array<size_t, Metrics::kWaitGates.size()> kinds_waiting_{};
  event* deadline_ev_ = nullptr;
  int64_t deadline_at_ = 0;  // deadline_ev_'s time; 0: not armed
  bool no_wait_ = false;     // draining or destroyed: nothing waits any more
  AdmittedFlow renewal_;     // charged()'s copy of a flow to tag again, reused
  Engine engine_;
  std::unique_ptr<DecisionLog> decisions_;
  // Declared after the engine, so destroyed before it: the engine's last callbacks
  // (kUnavailable) never reach the dataplane.
  DataplaneClient dp_;
};

}  // namespace dripgate::control
