#include "control/gateway/gateway.h"

#include <event2/event.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "control/admission/keys.h"
#include "control/admission/token_cost.h"
#include "control/outage/reconcile.h"
#include "control/redis/redis_client.h"

namespace dripgate::control {

event_base* new_front_loop() {
  event_config* cfg = event_config_new();
  if (!cfg) return nullptr;
  event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  event_base* base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  return base;
}

namespace {

const char* result_label(Outcome o) {
  switch (o) {
    case Outcome::kAllowed:
      return "allowed";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kBadRequest:
      return "bad_request";
    case Outcome::kConflict:
      return "conflict";
    case Outcome::kNotFound:
      return "not_found";
    case Outcome::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How often a worker looks for journaled decisions to reconcile (and flushes the journal).
constexpr timeval kReconcileTick{0, 50 * 1000};
// How long a failed call keeps a worker in an outage without another one.
constexpr int64_t kFailureMemoryMs = 2000;

}  // namespace

void Gateway::Watch::up(bool is_up) {
  metrics.up(is_up);
  if (is_up) {
    down_since_ms.store(0, std::memory_order_relaxed);
  } else {
    int64_t zero = 0;
    down_since_ms.compare_exchange_strong(zero, steady_ms(), std::memory_order_relaxed);
  }
}

Gateway::Gateway(const ConfigStore& store, event_base* base, AdmittedFlows& flows, Metrics& metrics,
                 int dataplane_timeout_ms, const DecisionLogFile* decisions, std::string front,
                 Fallback* fallback, WaitBudget* budget)
    : base_(base),
      flows_(flows),
      metrics_(metrics),
      front_(std::move(front)),
      fallback_(fallback),
      limits_(metrics.limits()),
      watch_(metrics),
      own_budget_(budget ? nullptr : std::make_unique<WaitBudget>()),
      budget_(budget ? budget : own_budget_.get()),
      engine_(store, base, &watch_),
      dp_(base, store.current()->cfg.control.dataplane_socket, &metrics, dataplane_timeout_ms) {
  if (decisions)
    decisions_ = std::make_unique<DecisionLog>(
        base, *decisions, store.current()->cfg.control.decision_log.sample, front_);
  if (fallback_) {
    tick_ = event_new(base, -1, EV_PERSIST, &Gateway::on_tick, this);
    evtimer_add(tick_, &kReconcileTick);
  }
  deadline_ev_ = evtimer_new(base, &Gateway::on_deadline, this);
}

Gateway::~Gateway() {
  // The waiters not with Redis are answered now; those that are, by the engine's last callbacks.
  drain_waiters();
  if (tick_) event_free(tick_);
  if (deadline_ev_) event_free(deadline_ev_);
}

int64_t Gateway::outage_since_ms() const {
  int64_t a = watch_.down_since_ms.load(std::memory_order_relaxed);
  int64_t b = failing_since_ms_.load(std::memory_order_relaxed);
  if (steady_ms() - last_failure_ms_.load(std::memory_order_relaxed) > kFailureMemoryMs) b = 0;
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

void Gateway::post(std::function<void()> fn) {
  static constexpr timeval kNow{0, 0};
  auto* f = new std::function<void()>(std::move(fn));
  event_base_once(
      base_, -1, EV_TIMEOUT,
      [](evutil_socket_t, short, void* arg) {
        std::unique_ptr<std::function<void()>> g(static_cast<std::function<void()>*>(arg));
        (*g)();
      },
      f, &kNow);
}

namespace {

// A failure of a call Redis was slow to answer (its connection still there), as against one
// whose connection is gone: only the first waits for breaker.failures in a row.
bool slow_failure(const std::string& error) {
  return error.find("timeout after") != std::string::npos ||
         error.find("too many calls in flight") != std::string::npos ||
         error.find("past its deadline") != std::string::npos;
}

}  // namespace

void Gateway::redis_failed(const std::string& error) {
  const int64_t now = steady_ms();
  last_failure_ms_.store(now, std::memory_order_relaxed);
  int64_t zero = 0;
  failing_since_ms_.compare_exchange_strong(zero, now, std::memory_order_relaxed);
  const Breaker::State before = breaker_.state();
  breaker_.failed(now, !slow_failure(error) || !engine_.redis_up());
  breaker_moved(before);
}

void Gateway::redis_answered() {
  failing_since_ms_.store(0, std::memory_order_relaxed);
  const Breaker::State before = breaker_.state();
  breaker_.succeeded();
  breaker_moved(before);
}

void Gateway::breaker_moved(Breaker::State before) {
  const Breaker::State now = breaker_.state();
  if (now == before) return;
  metrics_.breaker(Breaker::name(now), before == Breaker::State::kClosed,
                   now == Breaker::State::kClosed);
  if (now == Breaker::State::kOpen && before == Breaker::State::kClosed)
    spdlog::warn(
        "redis: circuit breaker open on this worker ({}): requests are decided as their "
        "plan's on_failure says without asking Redis, probed again in {} ms",
        engine_.redis_up() ? "calls failing" : "connection lost",
        engine_.snapshot()->cfg.redis.breaker.open_ms);
  else if (now == Breaker::State::kClosed)
    spdlog::info("redis: circuit breaker closed on this worker: Redis answers again");
}

void Gateway::on_tick(int, short, void* arg) {
  auto* g = static_cast<Gateway*>(arg);
  g->fallback_->tick();
  g->reconcile_some();
}

// One worker at a time (Fallback's claim), while its Redis is up. A batch goes out pipelined, and
// the next follows as soon as it is answered, sized by how long Redis took to answer it
// (ReconcilePace): a drain runs as fast as Redis answers while the admissions sharing the
// connections wait at most about one batch's answer time behind it.
void Gateway::reconcile_some() {
  metrics_.journal_pending(fallback_->pending(), fallback_->pending_bytes());
  if ((fallback_->pending() == 0 && !fallback_->any_local()) || !engine_.redis_up()) return;
  uint64_t watermark = 0;
  std::vector<JournalRecord> batch = fallback_->claim(pace_.size(), &watermark);
  if (batch.empty()) return;
  struct Run {
    size_t left = 0;
    int64_t start_us = 0;
    size_t retry = 0, lost = 0;
    std::string lost_example;
    std::vector<uint64_t> done;  // the records Redis holds (or can never take)
  };
  auto run = std::make_shared<Run>();
  run->left = batch.size();
  run->start_us = steady_us();
  run->done.reserve(batch.size());
  // The records stay with the answers, which name them by index.
  auto records = std::make_shared<const std::vector<JournalRecord>>(std::move(batch));
  reconcile(engine_, fallback_->journal_id(), watermark, *records,
            [this, run, records](size_t i, Reconciled result, std::string why) {
              const JournalRecord& r = (*records)[i];
              if (result != Reconciled::kRetry) run->done.push_back(r.seq);
              metrics_.reconciled(reconciled_name(result));
              if (result == Reconciled::kRetry) ++run->retry;
              if (result == Reconciled::kLost && run->lost++ == 0)
                run->lost_example = r.request_id + " (" + why + ")";
              if (--run->left > 0) return;
              // Said in one write when the batch is answered: a crash before it sends the
              // batch again, which Redis charges once (reconcile.lua's applied sets).
              fallback_->reconciled(run->done);
              fallback_->end_batch();
              // One line a batch, however many it lost: a long outage must not flood the log.
              if (run->lost)
                spdlog::warn(
                    "reconcile: {} journaled record(s) Redis can no longer take, their tokens "
                    "stay as Redis has them; e.g. {}",
                    run->lost, run->lost_example);
              if (run->retry) return;  // Redis is failing: the next tick tries again
              pace_.answered(steady_us() - run->start_us);
              post([this] { reconcile_some(); });
            });
}

void Gateway::degraded_admit(config::OnFailure mode, const Snapshot& snap, const AdmitRequest& req,
                             AdmitResult& r) {
  if (mode == config::OnFailure::kOpen) {
    r = open_admit(snap, req, rng_);
  } else if (mode == config::OnFailure::kLocal && fallback_) {
    r = fallback_->admit(snap, req, rng_, engine_.registry().get(), engine_.brake().get());
  } else {
    return;
  }
  metrics_.degraded(r.degraded, result_label(r.outcome));
}

bool Gateway::plans_matter(const std::shared_ptr<const Snapshot>& snap) {
  if (snap != modes_of_) {
    modes_of_ = snap;
    const config::Redis::Breaker& b = snap->cfg.redis.breaker;
    breaker_.set_options({b.failures, b.open_ms, b.probes});
    plan_modes_ = plan_queues_ = false;
    for (const auto& [name, plan] : snap->cfg.plans) {
      plan_modes_ |= plan.on_failure.has_value();
      plan_queues_ |= plan.queue && plan.queue->max_wait_ms > 0;
    }
  }
  return plan_modes_ || plan_queues_;
}

// What an admission's answer needs of its request, kept from one admission to the next: the
// engine's callback then holds only the gateway and this (no closure on the heap per request),
// and its buffers keep their capacity. A waiting request is one of these besides its place in
// the queue (Gateway::kBytesPerWaiter), so it keeps each thing once and packed.
struct Gateway::Admission {
  // The request, kept to be sent again (a waiter's retry, a decision without Redis) and for its
  // tenant and flow: its strings back to back in one buffer and their ends, rather than an
  // AdmitRequest (seven strings and a flow's two of 32 B each: 328 B a waiter), copied into a
  // buffer that keeps its capacity rather than into strings allocated per request.
  class Kept {
   public:
    void keep(const AdmitRequest& req) {
      // `typed` is not kept: Gateway::admit weighed it into `tokens` before.
      static_assert(sizeof(AdmitRequest) == 7 * sizeof(std::string) + sizeof(int64_t) +
                                                sizeof(std::optional<Flow>) +
                                                sizeof(std::optional<int64_t>) +
                                                sizeof(std::optional<TokenCounts>),
                    "a field added to AdmitRequest is kept here too (keep(), request())");
      text_.clear();
      const std::string none;
      const std::string* fields[kFields] = {&req.tenant,
                                            &req.user,
                                            &req.api_key,
                                            &req.model,
                                            &req.tool,
                                            &req.request_id,
                                            &req.client_ip,
                                            req.flow ? &req.flow->src : &none,
                                            req.flow ? &req.flow->dst : &none};
      for (size_t i = 0; i < kFields; ++i) {
        text_.append(*fields[i]);
        ends_[i] = static_cast<uint32_t>(text_.size());
      }
      tokens_ = req.tokens;
      has_flow_ = req.flow.has_value();
      if (has_flow_) {
        sport_ = req.flow->sport;
        dport_ = req.flow->dport;
        proto_ = req.flow->proto;
      }
    }
    // The request as it came, but for max_wait_ms, which admit() alone reads.
    AdmitRequest request() const {
      AdmitRequest r;
      r.tenant = field(kTenant);
      r.user = field(kUser);
      r.api_key = field(kApiKey);
      r.model = field(kModel);
      r.tool = field(kTool);
      r.request_id = field(kRequestId);
      r.client_ip = field(kClientIp);
      r.tokens = tokens_;
      r.flow = flow();
      return r;
    }
    std::string_view tenant() const { return field(kTenant); }
    int64_t tokens() const { return tokens_; }
    std::optional<Flow> flow() const {
      if (!has_flow_) return std::nullopt;
      return Flow{std::string(field(kSrc)), std::string(field(kDst)), sport_, dport_, proto_};
    }
    bool has_flow() const { return has_flow_; }
    // The buffer's capacity given back (a spare admission keeps up to this much).
    void trim(size_t keep) {
      if (text_.capacity() > keep) std::string().swap(text_);
    }

   private:
    enum Field : uint8_t {
      kTenant,
      kUser,
      kApiKey,
      kModel,
      kTool,
      kRequestId,
      kClientIp,
      kSrc,
      kDst,
      kFields
    };
    std::string_view field(Field f) const {
      const uint32_t from = f == kTenant ? 0 : ends_[f - 1];
      return std::string_view(text_).substr(from, ends_[f] - from);
    }
    std::string text_;
    std::array<uint32_t, kFields> ends_{};
    int64_t tokens_ = 0;
    uint16_t sport_ = 0, dport_ = 0;
    uint8_t proto_ = 0;
    bool has_flow_ = false;
  } req;
  std::string_view id() const { return req.tenant(); }  // the flow's tenant in the dataplane
  // The metrics label: the tenant's id itself, unless label_other (then label: a name of
  // Snapshot::tenant_label's own, "@registry", "*" or "", which outlives the snapshot held here).
  std::string_view tenant_label() const { return label_other ? label : id(); }
  std::string_view label;
  bool label_other = false;
  bool sent = true;  // sent to Redis (false: the breaker decided without it)
  config::OnFailure mode = config::OnFailure::kClosed;
  std::unique_ptr<DecisionWho> who;  // sampled for the decision log only
  std::shared_ptr<const Snapshot> snap;
  // The tenant's entry in snap's tables (Tables::entry) when admit() looked its plan up: the
  // request's first call to Redis does not look it up again. Null once sent.
  const TenantInfo* entry = nullptr;
  std::function<void(AdmitDecision)> done;
  // Waiting (handle != 0: the request may wait, max_wait_ms > 0). The small fields last,
  // together: apart, each would take 8 B of padding.
  uint64_t handle = 0;
  int64_t max_wait_ms = 0;
  int64_t arrived_ms = 0;  // its deadline runs from here
  int64_t queued_ms = 0;   // when it first joined a queue; 0: never
  uint64_t waiter = 0;     // its id in the queue; 0: in none
  std::string gate;        // the gate it waits on
  uint8_t band = 0;
  uint8_t kind = 0;        // that gate's name ("model", ...): its index in Metrics::kWaitGates
  bool retrying = false;   // its gate sent it to Redis again: the answer is to come
  bool abandoned = false;  // its client went away
  // Its next call asks its global gates before its tenant's slot (Turn::gate_first).
  bool gate_first = false;
  // Of its last refusal, what the 429 at its deadline says beyond its gate and reason (a rate
  // refusal's); not the whole AdmitResult, which would double a waiter's memory (the plan's
  // degrade, which a model gate's refusal offers, is read again from the plan).
  struct Refusal {
    std::vector<Remaining> remaining;
    double brake = 1;
  } refusal;
  void keep(AdmitResult&& r) {
    refusal.remaining = std::move(r.remaining);
    refusal.brake = r.brake;
  }
  // The 429 of its deadline: its last refusal, retry_after_ms from now.
  AdmitResult refused(int64_t retry_after_ms, const TenantDirectory* registry) {
    AdmitResult r;
    r.outcome = Outcome::kRefused;
    r.gate = Metrics::kWaitGates[kind];
    r.reason = "rate";
    r.retry_after_ms = retry_after_ms;
    r.remaining = std::move(refusal.remaining);
    r.brake = refusal.brake;
    if (r.gate == "model")
      if (const config::Plan* plan = plan_of(snap->cfg, std::string(id()), registry);
          plan && plan->degrade) {
        r.degrade_model = plan->degrade->model;
        r.upgrade_url = plan->degrade->upgrade_url;
      }
    return r;
  }
};

// A gate requests wait on: the one timer that sends its first waiter to Redis again when a token
// can exist for it (the refusal's retry_after, the admission's remaining), so a waiter costs
// Redis nothing until then, and one call at a time per gate.
struct Gateway::GateWait {
  GateWait(Gateway* g, std::string k, std::string_view n)
      : gateway(g), key(std::move(k)), kind(n) {}
  ~GateWait() {
    if (timer) event_free(timer);
  }
  GateWait(const GateWait&) = delete;
  GateWait& operator=(const GateWait&) = delete;
  Gateway* gateway;
  std::string key, kind;
  // A global gate: its waiters across workers and daemons (lua/lib_waiters.lua), where this
  // worker's entry is left when its last waiter goes; empty for a tenant's gate.
  std::string waiters_key;
  bool entry = false;  // this worker may have an entry there
  event* timer = nullptr;
  int64_t due_us = 0;     // the timer's time (steady clock, µs); 0: not armed
  bool token = false;     // due_us is when the gate holds a token (schedule())
  int64_t fired_us = 0;   // the token time of the timer that sent the first waiter; 0: none
  bool retrying = false;  // its first waiter is with Redis
};

Gateway::Admission* Gateway::take_admission() {
  static_assert(sizeof(Admission) <= 296, "what kBytesPerWaiter counts");
  if (spare_admissions_.empty()) return new Admission;
  Admission* a = spare_admissions_.back().release();
  spare_admissions_.pop_back();
  return a;
}

void Gateway::give_back(Admission* a) {
  std::unique_ptr<Admission> owned(a);
  if (spare_admissions_.size() >= kSpareAdmissions) return;
  // A spare keeps the buffer of a request of common size, not of the longest it ever kept.
  a->req.trim(kKeptCapacity);
  a->who.reset();
  a->snap.reset();
  a->entry = nullptr;
  a->done = nullptr;
  a->handle = 0;
  a->queued_ms = 0;
  a->waiter = 0;
  a->retrying = a->abandoned = false;
  a->refusal = Admission::Refusal{};
  spare_admissions_.push_back(std::move(owned));
}

namespace {

// An admission's estimate, a settle's or charge's count split by type becomes its plan's
// weighted cost here, once, before a local decision or a script sees it (and before a waiting
// admission keeps its request); an error naming the field when it cannot be weighed.
template <class Request>
std::string weigh(Engine& engine, Request& req) {
  if (!req.typed) return {};
  std::string err = weigh_tokens(engine.snapshot()->tables, engine.registry().get(), req.tenant,
                                 req.request_id, *req.typed, req.tokens);
  req.typed.reset();
  return err;
}

}  // namespace

uint64_t Gateway::admit(AdmitRequest req, std::function<void(AdmitDecision)> done) {
  if (std::string err = weigh(engine_, req); !err.empty()) {
    AdmitResult r;
    r.outcome = Outcome::kBadRequest;
    r.error = std::move(err);
    later(std::move(done), AdmitDecision{std::move(r), {}});
    return 0;
  }
  // Read once: the label and the decision come from the same configuration.
  std::shared_ptr<const Snapshot> snap = engine_.snapshot();
  const TenantDirectory* registry = engine_.registry().get();
  Admission* a = take_admission();
  a->req.keep(req);
  const std::string_view label = snap->tenant_label(req.tenant, registry);
  a->label_other = label != req.tenant;
  a->label = a->label_other ? label : std::string_view();
  if (decisions_ && decisions_->sampled())
    a->who = std::make_unique<DecisionWho>(DecisionWho{req.tenant, req.user, req.model, req.tool});
  // The tenant's plan, when one of the snapshot's has an on_failure or a queue: looked up once,
  // here, for both and for the engine (the request's first call).
  a->entry = plans_matter(snap) ? snap->tables.entry(req.tenant, registry) : nullptr;
  const config::Plan* plan = a->entry ? a->entry->plan : nullptr;
  // What the request is decided by should Redis not answer (fallback.h's failure_mode).
  a->mode = plan && plan->on_failure ? *plan->on_failure : snap->cfg.redis.on_failure;
  a->snap = std::move(snap);
  a->done = std::move(done);
  a->arrived_ms = steady_ms();
  a->max_wait_ms = 0;
  a->band = 0;
  if (plan && plan->queue && !no_wait_ && req.max_wait_ms.value_or(1) > 0) {
    a->max_wait_ms =
        std::min(req.max_wait_ms.value_or(plan->queue->max_wait_ms), plan->queue->max_wait_ms);
    a->band = static_cast<uint8_t>(plan->queue->priority);
  }
  if (a->max_wait_ms > 0) {
    a->handle = ++last_handle_;
    waiting_.emplace(a->handle, a);
    // No overtaking: the gate's waiters here are served first, this one after them.
    auto [gate, kind, higher] = waited_gate(req, a->band);
    a->gate_first = higher;
    if (!gate.empty()) {
      // Its first call is its gate's retry, which looks the tenant up then, as every retry does.
      a->entry = nullptr;
      AdmitResult r;
      r.outcome = Outcome::kRefused;
      r.request_id = req.request_id;
      r.gate = kind;
      r.reason = "rate";
      if (join(a, std::move(gate), kind, a->arrived_ms, r)) {
        arm_deadline();
      } else {
        post([this, a, r = std::move(r)]() mutable { answer(a, r); });
      }
      return a->handle;
    }
  }
  const uint64_t handle = a->handle;
  send(a, req);
  return handle;
}

void Gateway::send(Admission* a, const AdmitRequest& req) {
  const int64_t now = steady_ms();
  const Breaker::State before = breaker_.state();
  a->sent = breaker_.allow(now);
  breaker_moved(before);
  if (!a->sent) {
    // The breaker is open: Redis is not asked, the request is decided as if it had failed
    // (and the outage it is part of goes on, for /healthz).
    last_failure_ms_.store(now, std::memory_order_relaxed);
    post([this, a] {
      AdmitResult r;
      r.outcome = Outcome::kUnavailable;
      r.error = "redis: unavailable (circuit breaker open)";
      admitted(a, r);
    });
    return;
  }
  // Its place among the global gates' waiters of every worker and daemon (lua/lib_waiters.lua).
  Turn turn;
  if (a->handle && !a->abandoned && !no_wait_) {
    turn.waits = true;
    turn.band = a->band;
    turn.left_ms = a->arrived_ms + a->max_wait_ms - now;
    turn.book_ms = turn.left_ms;
    turn.abandoned = &a->abandoned;
    turn.gate_first = std::exchange(a->gate_first, false);
    if (a->retrying && a->waiter) {
      // The worker's place on the gate outlives its first waiter's deadline while others wait
      // behind it: one that lapsed with it would send the next waiter to the back of the band,
      // and a worker whose first waiters come near their deadlines (the one the others
      // outpaced) would fall further behind each time.
      turn.left_ms = std::max(turn.left_ms, queue_.last_deadline(a->gate) - now);
      turn.head = Metrics::kWaitGates[a->kind];
      // A first waiter on a global gate asks it before its tenant's slot: refused (a higher band
      // or an earlier turn on another box came first), that is one gates.lua call instead of
      // admit.lua's, gates.lua's and a refund's; admitted, it is a round trip more. With 4
      // daemons on one gate the scripts per admission went from 5.3-5.5 to 3.4-3.5, and the
      // daemon's token-to-admission p99 stayed within its 1.5-2.5 ms (tools/bench/wait_bench.sh).
      if (const GateWait* g = find_gate_wait(a->gate); g && !g->waiters_key.empty())
        turn.gate_first = true;
      turn.next_band = queue_.band_after(a->gate, a->waiter);
      if (turn.next_band >= 0)
        turn.next_tenants =
            static_cast<int>(queue_.band_tenants(a->gate, static_cast<uint8_t>(turn.next_band)));
    }
  }
  engine_.admit(
      req, [this, a](AdmitResult&& r) { admitted(a, r); }, a->snap,
      std::exchange(a->entry, nullptr), turn);
}

void Gateway::admitted(Admission* a, AdmitResult& r) {
  if (r.outcome == Outcome::kUnavailable && r.error == kAbandonedError) {
    // Its client went away while it held a booked token: Redis answered, nothing failed.
  } else if (r.outcome == Outcome::kUnavailable) {
    if (a->sent) redis_failed(r.error);
    // One failed call while the breaker stays closed is a 503 as itself; the tenant's
    // on_failure decides once Redis is taken as away.
    if (a->mode != config::OnFailure::kClosed && breaker_.state() != Breaker::State::kClosed)
      degraded_admit(a->mode, *a->snap, a->req.request(), r);
  } else {
    redis_answered();
    if (a->mode == config::OnFailure::kLocal && fallback_)
      for (const Remaining& q : r.remaining)
        if (q.gate == "quota")
          fallback_->quota_left(std::string(a->id()), static_cast<int64_t>(q.value));
  }
  if (a->handle && wait(a, r)) return;
  answer(a, r);
}

namespace {

// How a request that could wait ended, for dripgate_queue_requests_total.
std::string_view wait_result(const AdmitResult& r, bool abandoned) {
  if (abandoned) return "abandoned";
  switch (r.outcome) {
    case Outcome::kAllowed:
      return "admitted";
    case Outcome::kRefused:
      return r.reason == "queue_full" ? "queue_full" : r.reason == "rate" ? "timed_out" : "refused";
    default:
      return "failed";
  }
}

}  // namespace

void Gateway::answer(Admission* a, AdmitResult& r) {
  if (a->handle) {
    const int64_t now = steady_ms();
    // Since it joined the queue, or, held by the engine for a booked token without joining it,
    // since it came.
    const int64_t since = a->queued_ms ? a->queued_ms : r.booked_us ? a->arrived_ms : 0;
    r.waited_ms = since ? now - since : 0;
    metrics_.waited(a->band, wait_result(r, a->abandoned),
                    since ? std::optional<double>(r.waited_ms / 1000.0) : std::nullopt);
    waiting_.erase(a->handle);
    if (a->abandoned) return abandoned(a, r);
  }
  // Admitted although a shadow-mode gate would have refused: counted apart, with the gate.
  const bool shadow = r.outcome == Outcome::kAllowed && !r.shadow_refused.empty();
  metrics_.admission(a->tenant_label(),
                     r.outcome == Outcome::kRefused ? std::string_view(r.gate)
                     : shadow                       ? std::string_view(r.shadow_refused)
                                                    : std::string_view(),
                     shadow ? "shadow_refused" : result_label(r.outcome), front_);
  if (a->who) decisions_->record(*a->who, r, result_label(r.outcome));
  if (!r.remaining.empty()) {
    const int64_t now = steady_ms();
    for (const Remaining& rem : r.remaining)
      limits_.note(a->id(), rem.gate, rem.value, rem.limit, now);
  }
  auto done = std::move(a->done);
  if (r.outcome != Outcome::kAllowed || !a->req.has_flow()) {
    give_back(a);
    return done(AdmitDecision{std::move(r), {}});
  }
  const Flow flow = *a->req.flow();
  flows_.put(r.request_id, flow, r.cls, a->id());
  // The flow stays in its class as long as the lease would, unless released earlier; a stream
  // charge renews both (charged()).
  int ttl_s = r.lease_s > 0 ? static_cast<int>(r.lease_s) : kDefaultTagTtlS;
  std::string cls = r.cls;
  dp_.tag(flow, cls, ttl_s, a->id(),
          [r = std::move(r), done = std::move(done)](const std::string& tag) mutable {
            done(AdmitDecision{std::move(r), tag});
          });
  give_back(a);
}

void Gateway::abandoned(Admission* a, const AdmitResult& r) {
  if (r.outcome == Outcome::kAllowed && !r.request_id.empty()) {
    // Admitted by a call that was with Redis when the client went: nothing kept. The estimate
    // goes back to the quota (a settle of 0) and the lease, if any, is released; the rate
    // gates keep the token the call took, as for any admission the client does not use.
    engine_.settle(SettleRequest{std::string(a->id()), r.request_id, 0}, [](SettleResult) {});
    engine_.release(std::string(a->id()), r.request_id, [](ReleaseResult) {});
  }
  auto done = std::move(a->done);
  give_back(a);
  AdmitResult gone;
  gone.outcome = Outcome::kUnavailable;
  gone.error = std::string(kAbandonedError);
  done(AdmitDecision{std::move(gone), {}});
}

// ---- the queue ----

namespace {

// The global gate of kind `gate` a request meets, by the model or tool it names (empty for the
// total gate); nullopt for a tenant's gate. The one mapping from a kind to a global gate's name,
// which its bucket's and its waiters' keys both follow.
std::optional<std::string_view> global_name(const AdmitRequest& req, std::string_view gate) {
  if (gate == "model" || gate == "model_tokens") return req.model;
  if (gate == "tool") return req.tool;
  if (gate == "total") return std::string_view();
  return std::nullopt;
}

// The name of the gate a refusal names, as the queue knows it: the bucket's Redis key (keys.h),
// so a tenant's gate and a model's are told apart however their requests differ otherwise.
std::string gate_key(const AdmitRequest& req, std::string_view gate) {
  if (std::optional<std::string_view> name = global_name(req, gate))
    return gate == "total" ? keys::total_bucket() : keys::global_bucket(gate, *name);
  if (gate == "user" || gate == "user_tokens") return keys::bucket(req.tenant, gate, req.user);
  if (gate == "api_key" || gate == "api_key_tokens")
    return keys::bucket(req.tenant, gate, req.api_key);
  if (gate == "ip") return keys::bucket(req.tenant, gate, req.client_ip);
  return keys::bucket(req.tenant, gate);
}

// A global gate's key among the waiters of every worker and daemon; empty for a tenant's gate.
std::string waiters_key(const AdmitRequest& req, std::string_view gate) {
  std::optional<std::string_view> name = global_name(req, gate);
  if (!name) return {};
  return gate == "total" ? keys::total_waiters() : keys::global_waiters(gate, *name);
}

// Whether the request passes through a gate of this name at all.
bool has_gate(const AdmitRequest& req, std::string_view gate) {
  if (gate.starts_with("model")) return !req.model.empty();
  if (gate == "tool") return !req.tool.empty();
  if (gate.starts_with("user")) return !req.user.empty();
  if (gate.starts_with("api_key")) return !req.api_key.empty();
  if (gate == "ip") return !req.client_ip.empty();
  return gate != "other";
}

// How long after Redis ran a call the gate it names holds cost again (µs), from the bucket's
// remaining in the answer (fractional tokens); 0 when it does already or the answer does not say
// (the next call's refusal then does).
int64_t refill_us(const std::vector<Remaining>& remaining, std::string_view gate, double cost) {
  for (const Remaining& q : remaining) {
    if (q.gate != gate) continue;
    if (q.value >= cost || q.limit <= 0 || q.window_s <= 0) return 0;
    const double per_us = q.limit / q.window_s / 1e6;
    return static_cast<int64_t>(std::ceil((cost - q.value) / per_us));
  }
  return 0;
}

// When to send a gate's next call (µs): `in` after its answer came, so that it reaches Redis a
// round trip after the gate holds a token (Redis's times count from its decision), never before.
// Taking the way there off would be exact only if the two halves of the round trip were equal;
// on a loaded box the call that queued behind others (on its connection, in Redis) made the
// first half longer, and a call that came early costs a refusal and another call (three scripts
// with the tenant's part and its refund). A timer fires at or after its time (libevent rounds
// up).
int64_t try_at(int64_t now_us, int64_t in_us) {
  return now_us + std::max<int64_t>(in_us, 0);
}

size_t kind_index(std::string_view kind) {
  for (size_t i = 0; i + 1 < Metrics::kWaitGates.size(); ++i)
    if (Metrics::kWaitGates[i] == kind) return i;
  return Metrics::kWaitGates.size() - 1;
}

}  // namespace

Gateway::WaitedGate Gateway::waited_gate(const AdmitRequest& req, uint8_t band) const {
  if (queue_.size() == 0) return {};
  WaitedGate found;
  for (size_t i = 0; i < kinds_waiting_.size(); ++i) {
    const std::string_view kind = Metrics::kWaitGates[i];
    if (kinds_waiting_[i] == 0 || !has_gate(req, kind)) continue;
    std::string key = gate_key(req, kind);
    const WaitQueue::Waiter* first = queue_.next(key);
    if (!first) continue;
    // A higher band than the gate's waiters here asks Redis: it may pass before them, and the
    // other workers and daemons must learn that this worker's first waiter there is of its band.
    if (first->band > band) return {{}, {}, true};
    if (found.key.empty()) found = {std::move(key), kind};
  }
  return found;
}

bool Gateway::wait(Admission* a, AdmitResult& r) {
  const int64_t now_us = steady_us(), now = now_us / 1000;
  GateWait* from = nullptr;
  if (a->retrying) {
    a->retrying = false;
    from = find_gate_wait(a->gate);
    if (from) from->retrying = false;
  }
  const int64_t deadline = a->arrived_ms + a->max_wait_ms;
  // Waiting helps a rate gate only (a quota does not refill within a wait), and only when the
  // gate can hold a token for the request before its deadline. Not the global ip gate: its
  // bucket is one client's, so a queue per address would only hold that client's own requests
  // (and take places from everyone's bounds); it answers 429 with retry-after at once.
  if (!a->abandoned && !no_wait_ && r.outcome == Outcome::kRefused && r.reason == "rate" &&
      r.gate != kGlobalIpGate && now + r.retry_after_ms < deadline) {
    std::string gate = gate_key(a->req.request(), r.gate);
    const int64_t due = try_at(now_us, std::max<int64_t>(r.retry_after_ms, 1) * 1000);
    if (a->waiter && from && gate == a->gate) {  // still first on its gate
      queue_.serving(a->waiter, false);
      a->keep(std::move(r));
      from->entry = !from->waiters_key.empty();
      schedule(*from, due, true);
      return true;
    }
    leave_queue(a);
    if (from) schedule(*from, now_us);  // its turn passes to the next
    std::string kind = r.gate;
    if (join(a, std::move(gate), kind, now, r)) {
      a->keep(std::move(r));
      GateWait& g = gate_wait(a->gate, kind);
      // Refused there, the request took its worker's place among the gate's waiters, or the
      // worker had one.
      if (g.waiters_key.empty()) g.waiters_key = waiters_key(a->req.request(), kind);
      g.entry = !g.waiters_key.empty();
      schedule(g, due, true);
      arm_deadline();
      return true;
    }
    return false;  // r says queue_full
  }
  // A first waiter answered 429 because the token comes after its deadline was not served: its
  // tenant keeps the turn for its next waiter (who has longer), as when a waiter expires. Passed
  // on, the turn would go each time to whichever tenant's oldest waiter was nearest its deadline
  // when the gate came round, and under a steady load that is the same tenant again and again.
  const bool rate_refused = r.outcome == Outcome::kRefused && r.reason == "rate";
  leave_queue(a, from != nullptr && !rate_refused);
  // From the token its gate's timer was set for or, booked, the one Redis kept for it.
  const int64_t token_us = r.booked_us ? r.booked_us : from ? from->fired_us : 0;
  if (r.outcome == Outcome::kAllowed && token_us)
    metrics_.token_to_admission(static_cast<double>(now_us - token_us) / 1e6);
  if (from) {
    next_after(*from, r, now_us);
  } else if (r.error == kAbandonedError && !r.booked_gate.empty()) {
    // The token it had booked went back to its gate: the gate's first waiter here takes it now,
    // rather than at the later time its timer was set for.
    if (GateWait* g = find_gate_wait(gate_key(a->req.request(), r.booked_gate)))
      schedule(*g, now_us);
  }
  return false;
}

bool Gateway::join(Admission* a, std::string gate, std::string_view kind, int64_t now_ms,
                   AdmitResult& r) {
  const config::Control::Queue& bounds = a->snap->cfg.control.queue;
  WaitQueue::Pushed p;
  if (budget_->take(a->id(), bounds.max_waiters, bounds.max_waiters_per_tenant) ==
      WaitBudget::Taken::kYes) {
    p = queue_.push(gate, a->id(), a->band, a->arrived_ms + a->max_wait_ms, now_ms, a->handle);
    if (!p.id) budget_->give(a->id());
  }
  if (!p.id) {
    r.reason = "queue_full";
    return false;
  }
  a->waiter = p.id;
  a->gate = std::move(gate);
  a->kind = static_cast<uint8_t>(kind_index(kind));
  if (!a->queued_ms) a->queued_ms = now_ms;
  ++kinds_waiting_[a->kind];
  metrics_.waiting(a->band, kind, 1);
  return true;
}

void Gateway::leave_queue(Admission* a, bool served) {
  if (!a->waiter) return;
  // Served (its gate answered it), its tenant's turn passes on; otherwise it leaves wherever it
  // is and the turn stays. Either is false when expired() took it out already.
  if (served)
    queue_.served(a->waiter);
  else
    queue_.cancel(a->waiter);
  a->waiter = 0;
  budget_->give(a->id());
  --kinds_waiting_[a->kind];
  metrics_.waiting(a->band, Metrics::kWaitGates[a->kind], -1);
}

Gateway::GateWait* Gateway::find_gate_wait(const std::string& gate) {
  auto it = gate_waits_.find(gate);
  return it == gate_waits_.end() ? nullptr : it->second.get();
}

Gateway::GateWait& Gateway::gate_wait(const std::string& gate, std::string_view kind) {
  auto& g = gate_waits_[gate];
  if (!g) {
    g = std::make_unique<GateWait>(this, gate, kind);
    g->timer = evtimer_new(base_, &Gateway::on_gate_due, g.get());
  }
  return *g;
}

void Gateway::schedule(GateWait& g, int64_t at_us, bool token) {
  if (g.retrying || no_wait_ || (g.due_us != 0 && g.due_us <= at_us)) return;
  g.due_us = at_us;
  g.token = token;
  // libevent counts a timer from the time it cached when this loop pass began, which a busy pass
  // leaves milliseconds behind: the timer would fire that much early (a refused call, and another).
  event_base_update_cache_time(base_);
  const int64_t in = std::max<int64_t>(at_us - steady_us(), 0);
  const timeval tv{static_cast<time_t>(in / 1000000), static_cast<suseconds_t>(in % 1000000)};
  evtimer_add(g.timer, &tv);
}

void Gateway::next_after(GateWait& g, const AdmitResult& r, int64_t now_us) {
  const WaitQueue::Waiter* w = queue_.next(g.key);
  // Admitted without a next waiter to name, its call took the worker's entry out.
  if (!w && r.outcome == Outcome::kAllowed && r.next_ms < 0) g.entry = false;
  if (!w) return schedule(g, now_us);  // retry() lets the gate go
  // Admitted: the next can pass once the gate holds its cost again; refused by this gate: once it
  // holds a token; otherwise now.
  int64_t in = 0;
  const bool token = r.outcome == Outcome::kAllowed ||
                     (r.outcome == Outcome::kRefused && r.reason == "rate" && r.gate == g.kind);
  if (r.outcome == Outcome::kRefused && r.reason == "rate" && r.gate == g.kind) {
    in = std::max<int64_t>(r.retry_after_ms, 1) * 1000;
  } else if (r.outcome == Outcome::kAllowed && r.next_ms >= 0) {
    in = r.next_ms * 1000;  // the waiters of other workers and daemons ahead of it counted
  } else if (r.outcome == Outcome::kAllowed) {
    const Admission* next = waiting_.at(w->cookie);
    const double cost = g.kind.ends_with("_tokens") ? static_cast<double>(next->req.tokens()) : 1.0;
    in = refill_us(r.remaining, g.kind, cost);
  }
  schedule(g, try_at(now_us, in), token);
}

void Gateway::on_gate_due(int, short, void* arg) {
  auto* g = static_cast<GateWait*>(arg);
  g->fired_us = g->token ? g->due_us : 0;
  g->due_us = 0;
  g->gateway->retry(*g);
}

void Gateway::retry(GateWait& g) {
  const WaitQueue::Waiter* w = queue_.next(g.key);
  if (!w) {
    if (g.entry) engine_.leave_waiters(g.waiters_key);
    gate_waits_.erase(g.key);  // g is gone
    return;
  }
  Admission* a = waiting_.at(w->cookie);
  g.retrying = a->retrying = true;
  queue_.serving(a->waiter, true);
  send(a, a->req.request());
}

void Gateway::arm_deadline() {
  const std::optional<int64_t> at = queue_.earliest_deadline();
  if (!at || (deadline_at_ != 0 && deadline_at_ <= *at)) return;
  deadline_at_ = *at;
  const int64_t in = std::max<int64_t>(*at - steady_ms(), 0);
  const timeval tv{static_cast<time_t>(in / 1000), static_cast<suseconds_t>(in % 1000 * 1000)};
  evtimer_add(deadline_ev_, &tv);
}

void Gateway::on_deadline(int, short, void* arg) {
  auto* g = static_cast<Gateway*>(arg);
  g->deadline_at_ = 0;
  g->expire();
  g->arm_deadline();
}

// The waiters whose deadline came are answered their last refusal (expire_before()).
void Gateway::expire() {
  expire_before(steady_ms());
}

// Each waiter whose deadline is at or before until_ms leaves the queue and is answered its last
// refusal, with how long until its gate is tried next; one with Redis at that moment is answered
// by Redis.
void Gateway::expire_before(int64_t until_ms) {
  std::vector<WaitQueue::Waiter> out;
  queue_.expired(until_ms, out);
  const int64_t now = steady_ms();
  for (const WaitQueue::Waiter& w : out) {
    Admission* a = waiting_.at(w.cookie);
    leave_queue(a);  // one with Redis passes its tenant's turn on (WaitQueue::serving)
    if (a->retrying) continue;
    const GateWait* g = find_gate_wait(a->gate);
    const int64_t due_ms = g ? g->due_us / 1000 : 0;
    AdmitResult r = a->refused(due_ms > now ? due_ms - now : 1, engine_.registry().get());
    answer(a, r);
  }
}

void Gateway::abandon(uint64_t handle) {
  auto it = waiting_.find(handle);
  if (it == waiting_.end() || it->second->abandoned) return;
  Admission* a = it->second;
  a->abandoned = true;
  // Its place goes to the next, at the time its gate's timer already has.
  const bool queued = a->waiter != 0;
  leave_queue(a);
  // A call with Redis (its first, or its gate's retry) is answered to abandoned() by Redis.
  if (!queued || a->retrying) return;
  post([this, a] {
    AdmitResult r;
    r.outcome = Outcome::kUnavailable;
    answer(a, r);
  });
}

void Gateway::drain_waiters() {
  no_wait_ = true;
  expire_before(INT64_MAX);
  for (const auto& [key, g] : gate_waits_)
    if (g->entry) engine_.leave_waiters(g->waiters_key);
  gate_waits_.clear();
}

namespace {

// The tenant a settle or release names, or the one of its engine-generated request id.
std::string tenant_of(const std::string& tenant, const std::string& request_id) {
  return tenant.empty() ? std::string(keys::tenant_of_request_id(request_id)) : tenant;
}

}  // namespace

// A local reservation is settled here, before and after Redis is back: Redis never held it.
void Gateway::settle(SettleRequest req, std::function<void(SettleResult)> done) {
  if (std::string err = weigh(engine_, req); !err.empty()) {
    SettleResult r;
    r.outcome = Outcome::kBadRequest;
    r.error = std::move(err);
    return later(std::move(done), std::move(r));
  }
  if (fallback_ && fallback_->any_local())
    if (auto local = fallback_->settle(req.request_id, req.tokens)) {
      metrics_.degraded(local->degraded, result_label(local->outcome));
      return later(std::move(done), std::move(*local));
    }
  // The whole request is kept: deferred, it is sent as it was asked (every token-rate gate of
  // its user, api_key and model corrected).
  SettleRequest kept = req;
  kept.tenant = tenant_of(req.tenant, req.request_id);
  engine_.settle(std::move(req),
                 [this, kept = std::move(kept), done = std::move(done)](SettleResult r) mutable {
                   const std::string& tenant = kept.tenant;
                   if (r.outcome != Outcome::kUnavailable) {
                     redis_answered();
                     if (fallback_ && r.remaining >= 0 &&
                         failure_mode(engine_.snapshot()->cfg, tenant, engine_.registry().get()) ==
                             config::OnFailure::kLocal)
                       fallback_->quota_left(tenant, r.remaining);
                     return done(std::move(r));
                   }
                   redis_failed(r.error);
                   const config::OnFailure mode =
                       failure_mode(engine_.snapshot()->cfg, tenant, engine_.registry().get());
                   if (mode == config::OnFailure::kOpen) {
                     // Nothing is recorded under open: the client is told so.
                     r = SettleResult{};
                     r.outcome = Outcome::kAllowed;
                     r.remaining = -1;
                     r.detail = "not_recorded";
                     r.degraded = "open";
                   } else if (mode == config::OnFailure::kLocal && fallback_) {
                     r = fallback_->defer_settle(kept);
                   } else {
                     return done(std::move(r));
                   }
                   metrics_.degraded(r.degraded, result_label(r.outcome));
                   done(std::move(r));
                 });
}

// A local reservation's stream charge is decided here, as its settle (Redis never held it). A
// charge of a reservation Redis holds is Redis's alone: without Redis it is a 503 (charge.lua
// is not idempotent, so it cannot be sent again later; the settle's total, deferred like any
// settle, corrects everything the stream used).
void Gateway::charge(ChargeRequest req, std::function<void(ChargeDecision)> done) {
  std::shared_ptr<const Snapshot> snap = engine_.snapshot();
  std::string tenant(
      snap->tenant_label(tenant_of(req.tenant, req.request_id), engine_.registry().get()));
  if (std::string err = weigh(engine_, req); !err.empty()) {
    ChargeResult r;
    r.outcome = Outcome::kBadRequest;
    r.error = std::move(err);
    metrics_.charge(tenant, result_label(r.outcome));
    return post([this, rid = req.request_id, r = std::move(r), done = std::move(done)]() mutable {
      charged(rid, std::move(r), std::move(done));
    });
  }
  if (fallback_ && fallback_->any_local() && check_tokens(req.tokens).empty())
    if (auto local = fallback_->charge(req.request_id, req.tokens)) {
      metrics_.degraded(local->degraded, result_label(local->outcome));
      metrics_.charge(tenant, result_label(local->outcome));
      return post(
          [this, rid = req.request_id, r = std::move(*local), done = std::move(done)]() mutable {
            charged(rid, std::move(r), std::move(done));
          });
    }
  std::string rid = req.request_id;
  engine_.charge(std::move(req), [this, tenant = std::move(tenant), rid = std::move(rid),
                                  done = std::move(done)](ChargeResult r) mutable {
    if (r.outcome == Outcome::kUnavailable)
      redis_failed(r.error);
    else if (r.outcome != Outcome::kBadRequest)
      redis_answered();
    metrics_.charge(tenant, result_label(r.outcome));
    charged(rid, std::move(r), std::move(done));
  });
}

// The tag was given for the lease the admission took; the charge renewed the lease, so the tag
// is given again for as long, batched with the pass's other tags. A charge refused (the quota
// spent: the stream is being cut) or answered otherwise leaves the tag to run out.
void Gateway::charged(const std::string& request_id, ChargeResult r,
                      std::function<void(ChargeDecision)> done) {
  if (r.outcome != Outcome::kAllowed || !flows_.find(request_id, &renewal_))
    return done(ChargeDecision{std::move(r), {}});
  const int ttl_s = r.lease_s > 0 ? static_cast<int>(r.lease_s) : kDefaultTagTtlS;
  dp_.tag(renewal_.flow, renewal_.cls, ttl_s, renewal_.tenant,
          [r = std::move(r), done = std::move(done)](const std::string& tag) mutable {
            done(ChargeDecision{std::move(r), tag});
          });
}

void Gateway::release(ReleaseRequest req, std::function<void(ReleaseDecision)> done) {
  std::string rid = req.request_id;
  if (fallback_ && fallback_->any_local())
    if (auto local = fallback_->release(rid)) {
      metrics_.degraded(local->degraded, result_label(local->outcome));
      std::optional<Flow> flow = flows_.take(rid);
      if (!flow) return later(std::move(done), ReleaseDecision{std::move(*local), {}});
      return dp_.untag(
          *flow, [r = std::move(*local), done = std::move(done)](const std::string& tag) mutable {
            done(ReleaseDecision{std::move(r), tag});
          });
    }
  std::string tenant = tenant_of(req.tenant, req.request_id);
  engine_.release(std::move(req.tenant), std::move(req.request_id),
                  [this, rid = std::move(rid), tenant = std::move(tenant),
                   done = std::move(done)](ReleaseResult r) mutable {
                    if (r.outcome == Outcome::kUnavailable) {
                      redis_failed(r.error);
                      const config::OnFailure mode =
                          failure_mode(engine_.snapshot()->cfg, tenant, engine_.registry().get());
                      if (mode == config::OnFailure::kOpen) {
                        r = ReleaseResult{};
                        r.outcome = Outcome::kAllowed;
                        r.degraded = "open";
                      } else if (mode == config::OnFailure::kLocal && fallback_) {
                        r = fallback_->defer_release(tenant, rid);
                      }
                      if (!r.degraded.empty())
                        metrics_.degraded(r.degraded, result_label(r.outcome));
                    } else {
                      redis_answered();
                    }
                    std::optional<Flow> flow;
                    if (r.outcome == Outcome::kAllowed) flow = flows_.take(rid);
                    if (!flow) return done(ReleaseDecision{std::move(r), {}});
                    dp_.untag(*flow, [r = std::move(r),
                                      done = std::move(done)](const std::string& tag) mutable {
                      done(ReleaseDecision{std::move(r), tag});
                    });
                  });
}

}  // namespace dripgate::control
