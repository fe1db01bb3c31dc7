// The backend side of admission: the Redis calls (packed by script_calls.cc) and the decoding of
// their replies into results.
#include "control/admission/admission.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <list>
#include <random>
#include <type_traits>

#include "control/admission/config_snapshot.h"
#include "control/admission/refusal_hints.h"
#include "control/admission/script_calls.h"
#include "control/redis/redis_calls.h"
#include "lua/lua_scripts.h"

namespace dripgate::control {

namespace {

Remaining bucket_remaining(const Gate& g, double tokens) {
  return control::bucket_remaining(g.name, g.capacity, g.refill, tokens);
}

// A sliding window's Remaining from the scripts' count (the admissions in it before the
// decision): the admission adds one when it stands and the window had room (a full shadow window
// takes nothing). reset_s bounds when the window is empty again: every admission in it leaves
// within one window.
Remaining window_remaining(const Gate& g, int64_t count, bool stands) {
  if (stands && count < g.limit) ++count;
  Remaining r;
  r.gate = g.name;
  r.limit = static_cast<double>(g.limit);
  r.value = static_cast<double>(std::max<int64_t>(0, g.limit - count));
  r.window_s = static_cast<double>(g.window_ms) / 1000;
  r.reset_s = count > 0 ? (g.window_ms + 999) / 1000 : 0;
  r.reset_ms = count > 0 ? g.window_ms : 0;
  return r;
}

// What a bucket took from an admission: 1, or the estimate on a token-rate gate.
double cost_of(const Prepared& p, const Gate& g) {
  return g.per_token ? static_cast<double>(p.tokens) : 1;
}

std::string_view reason_of(std::string_view gate) {
  if (config::is_quota_gate(gate)) return "quota";
  if (gate == "concurrency") return "concurrency";
  if (gate == "reservations") return "reservations";
  return "rate";
}

// Reply accessors: nullptr/0 when the element is missing or of another type.
const redisReply* elem(const redisReply* r, size_t i) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return nullptr;
  return r->element[i];
}
int64_t as_int(const redisReply* r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  int64_t v = 0;
  if (r->type == REDIS_REPLY_STRING) std::from_chars(r->str, r->str + r->len, v);
  return v;
}
std::string_view as_str(const redisReply* r) {
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}
double as_double(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_STRING) return static_cast<double>(as_int(r));
  double v = 0;
  std::from_chars(r->str, r->str + r->len, v);
  return v;
}

// Why a reply is not usable, or empty when it is an array of at least n elements (n = 0: any
// reply that is not an error).
std::string bad_reply(const redisReply* r, std::string_view error, size_t n) {
  if (!r) return std::string(error.empty() ? "redis: no reply" : error);
  if (r->type == REDIS_REPLY_ERROR) return "redis: " + std::string(r->str, r->len);
  if (n > 0 && (r->type != REDIS_REPLY_ARRAY || r->elements < n)) return "redis: unexpected reply";
  return {};
}

// A script that took tokens answers this when Redis ran it past the deadline it carried (it
// changed nothing): a failure, as a timeout is, never a refusal.
constexpr std::string_view kPastDeadline = "redis: call ran past its deadline";

// A script call's deadline (RedisCalls::script_deadline_ms) as its argument: 13 digits, within
// the string's own storage, so nothing is allocated.
void set_deadline(std::string& out, int64_t ms) {
  char buf[24];
  out.assign(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, ms).ptr - buf));
}

// Positions in admit.lua's reply: {code, quota_existed, used_1, left_s_1, len_s_1 .. used_q,
// left_s_q, len_s_q, tokens_1 .. tokens_n, count_1 .. count_m (windows) [, snapshot] [, gate,
// retry_after_ms
// [, live_leases, first_lease_ms [, pruned]]]}. What is usually the same ends the reply and is
// left out there (each element costs Redis a conversion): the tail's place depends on the code
// and on whether a snapshot was asked for (admit_tail), a missing gate reads "" and a missing
// retry_after_ms 0, and live_leases and first_lease_ms come only with a concurrency gate.
enum AdmitReply : size_t { kCode, kQuotaExisted, kQuotas };
// A quota's three figures (used, seconds left of its period, the period's length), from kQuotas.
enum AdmitQuota : size_t { kQuotaUsed, kQuotaLeft, kQuotaLen, kQuotaStride };
// Where the buckets' levels begin: after the plan's quotas.
size_t tokens_at(const Prepared& p) {
  return kQuotas + kQuotaStride * p.t->nq;
}
// Offsets in the reply's tail.
enum AdmitTail : size_t { kGate, kRetryAfterMs, kLive, kFirstLeaseMs, kPruned };
// Where the tail of admit.lua's reply starts: after the tokens, the windows' counts and an
// admission's snapshot (asked for by the flags' second character).
size_t admit_tail(const Prepared& p, bool admitted) {
  const size_t nb = static_cast<size_t>(p.nb);
  size_t at = tokens_at(p) + nb + static_cast<size_t>(p.nw);
  if (admitted && p.flags[1] == '1') at += nb + 1;
  return at;
}
// gates.lua's reply: {code, gate, retry_after_ms, tokens_1 .. tokens_n, count_1 .. count_m
// [, snapshot]}; a gate is one bucket or one window, so either is at kGatesTokens.
enum GatesReply : size_t { kGatesCode, kGatesGate, kGatesRetryAfterMs, kGatesTokens };
// The snapshot entry of a bucket that took nothing (an empty shadow bucket, lib_bucket.lua).
constexpr std::string_view kUntaken = "-";

// A bucket's snapshot entry "<old tk> <old ts>" (" " when the key did not exist) appended to out
// as two strings; false when it is malformed.
bool split_old(std::string_view old, std::vector<std::string>& out) {
  if (old == kUntaken) {  // nothing to restore: the undo leaves the bucket alone
    out.emplace_back();
    out.emplace_back();
    return true;
  }
  const size_t sp = old.find(' ');
  if (sp == std::string_view::npos) return false;
  out.emplace_back(old.substr(0, sp));
  out.emplace_back(old.substr(sp + 1));
  return true;
}

// How long an undo whose own reply was lost is sent again: as long as gates.lua's marker lives.
constexpr int kUndoRetryS = kAttemptTtlS;

// An answer that says Redis ran nothing and can run the undo later: it is loading its dataset
// (a restart), a script is past the busy threshold, a replica lost its master, or the script is
// not loaded (yet, after a restart); on a cluster, the slot moved or is moving (MOVED, ASK, and
// TRYAGAIN once the cluster client stopped sending it again; no reply at all when it ran out of
// redirects) or a failover is under way (CLUSTERDOWN). Sent again, the undo is routed afresh by
// the cluster's slot map and follows an in-time redirect. Such an undo is sent again after a
// back-off, whether the answer came in time or after the undo's own timeout (`error` empty);
// any other error is final.
bool undo_can_wait(const redisReply* r, std::string_view error) {
  if (!r) return error == kTooManyRedirects;
  if (r->type != REDIS_REPLY_ERROR) return false;
  const std::string_view e(r->str, r->len);
  for (std::string_view not_run :
       {"LOADING", "BUSY ", "MASTERDOWN", "NOSCRIPT", "MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"})
    if (e.starts_with(not_run)) return true;
  return false;
}

// Answers a call that failed validation, on the loop (never inside the call itself).
template <class Result>
void post_bad_request(RedisCalls& redis, std::string error, std::function<void(Result)> done) {
  redis.post([done = std::move(done), error = std::move(error)] {
    Result res;
    res.outcome = Outcome::kBadRequest;
    res.error = error;
    done(std::move(res));
  });
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

}  // namespace

std::string charge_not_found_error(const std::string& request_id) {
  return "request_id: no open reservation '" + request_id +
         "' (never admitted, refused, expired or past reservation_ttl_s)";
}

std::string charge_settled_error(const std::string& request_id) {
  return "request_id: '" + request_id + "' is settled: a charge after its settle changes nothing";
}

// reset_s (whole seconds until full) is the first second at which lib_bucket.lua's refill
// min(cap, tk + elapsed * rate) reaches the capacity; admission_test checks the two agree.
Remaining bucket_remaining(std::string gate, double capacity, double refill, double tokens) {
  Remaining r;
  r.gate = std::move(gate);
  r.value = tokens;
  r.limit = capacity;
  r.window_s = refill > 0 ? capacity / refill : 0;
  r.reset_s = refill > 0 ? static_cast<int64_t>(std::ceil((capacity - tokens) / refill)) : 0;
  if (r.reset_s < 0) r.reset_s = 0;
  // To the millisecond, up; a nanosecond of float noise does not add one.
  const double ms = refill > 0 ? std::ceil((capacity - tokens) / refill * 1e3 - 1e-6) : 0;
  r.reset_ms = ms > 0 ? static_cast<int64_t>(std::min(ms, 9e15)) : 0;
  return r;
}

struct Engine::Impl {
  SnapshotView view;
  std::mt19937_64 rng;
  RedisObserver* observer;
  // One node or a Redis Cluster, as cfg.redis says.
  std::unique_ptr<RedisCalls> redis;
  // Tenants whose own gates refuse for now: their admissions ask the global gates only after
  // the tenant's slot admitted (refusal_hints.h).
  std::unique_ptr<RefusalHints> hints = std::make_unique<RefusalHints>();
  // This worker's field among the global gates' waiters (lua/lib_waiters.lua): random, so that
  // the workers of every daemon on one Redis are told apart without being configured.
  std::string holder;
  int given_up = 0;  // undos given up since the last line that said so
  std::chrono::steady_clock::time_point give_up_log_next{};
  event_base* base;
  // Undos waiting to be sent again, and admissions waiting for their booked token (hold()), each
  // on its own timer (undo_later); declared after redis, so freed before the client their calls
  // would use.
  struct Later {
    Impl* impl = nullptr;
    event* ev = nullptr;
    std::function<void()> run;
    std::list<Later>::iterator self;
    Later() = default;
    Later(const Later&) = delete;
    Later& operator=(const Later&) = delete;
    ~Later() {
      if (ev) event_free(ev);
    }
  };
  std::list<Later> later;

  Impl(const ConfigStore& store, event_base* b, RedisObserver* obs)
      : view(store),
        rng(std::random_device{}()),
        observer(obs),
        redis(make_redis_calls(
            b, view.get()->cfg.redis,
            std::vector<const lua::Script*>(std::begin(lua::kAll), std::end(lua::kAll)), obs)),
        base(b) {
    append_hex(holder, rng());
  }

  // Where one call of an admission stands.
  enum class Part : uint8_t { kPending, kAdmitted, kRefused };

  // Shared by the callbacks of its calls: a call answered with a timeout may still reply late,
  // after the request was answered, and its undo needs the request. An admission is one call per
  // hash slot, all sent at once: admit.lua in the tenant's slot, gates.lua in each global gate's.
  struct AdmitOp {
    // User-provided, so that make_shared default-initializes (every member has an initializer)
    // instead of value-initializing: that would zero-fill the whole object (Prepared's gate
    // arrays, the result's strings) before constructing it, on every admission.
    AdmitOp() {}
    std::function<void(AdmitResult)> done;
    AdmitResult res;  // gate/retry_after_ms: the refusal with the longest wait so far
    std::shared_ptr<const Snapshot> snap;  // what p points into, until the last callback
    Prepared p;
    int pending = 0;  // calls not answered yet
    // The global gates are asked once the tenant's slot admitted, not with it (RefusalHints).
    bool globals_after = false;
    // The tenant's slot is asked once every global gate admitted (Turn::gate_first).
    bool tenant_after = false;
    bool held = false;      // it waited for its booked token (hold())
    std::string error;      // the first failure: the request is answered 503
    bool conflict = false;  // the request_id has a live reservation: 409
    // From the tenant-slot call, for the response and a refund.
    Part tenant_part = Part::kPending;
    std::array<double, kMaxTenantBuckets> tokens_after{};
    std::array<int64_t, kMaxTenantWindows> window_counts{};  // before the decision
    // Per quota (TenantInfo::quotas): its counter after the decision, the seconds left of its
    // period and the period's length.
    std::array<int64_t, keys::TimeKeys::kMaxQuotas> used{}, left{}, len{};
    int64_t live = -1, first_ms = 0;
    Undo undo;
    std::array<Part, kMaxGlobalBuckets> global_parts{};
    // A bucket's level after the decision, a window's count before it.
    std::array<double, kMaxGlobalBuckets> global_tokens{};
    // Per global gate, what its ungates.lua needs (gates.lua's snapshot); empty: one token back.
    std::array<std::vector<std::string>, kMaxGlobalBuckets> global_undo;
    // Per global gate: its bucket took nothing (an empty shadow bucket), there is nothing to undo.
    std::array<bool, kMaxGlobalBuckets> global_untaken{};
  };

  using Op = std::shared_ptr<AdmitOp>;

  void send(const Call& c, RedisClient::Callback cb, RedisClient::LateReply late = {},
            RedisClient::WhenStalled stalled = RedisClient::WhenStalled::kFailFast) {
    redis->evalsha(c.script, c.keys.view(), c.args.view(), std::move(cb), std::move(late), stalled);
  }
  void admit(const AdmitRequest& req, std::function<void(AdmitResult)> done,
             std::shared_ptr<const Snapshot> snap, const TenantInfo* entry, const Turn& turn);
  void send_gates(const Op& op);
  void learn(const AdmitOp& op, int64_t retry_after_ms);
  void on_admit_reply(const Op& op, const redisReply* r, std::string_view error);
  bool decode_undo(AdmitOp* op, const redisReply* r);
  void on_gates_reply(const Op& op, int i, const redisReply* r, std::string_view error);
  void part_done(const Op& op);
  void hold(const Op& op);
  void refused_by(AdmitOp* op, std::string_view gate, int64_t retry_ms);
  void shadow_refused_by(AdmitOp* op, std::string_view gate, int64_t retry_ms);
  void failed(AdmitOp* op, std::string error);
  void on_late_admit(const Op& op, const redisReply* r);
  void on_late_gates(const Op& op, int i, const redisReply* r);
  void decode_gates_undo(AdmitOp* op, int i, const redisReply* r);
  // Undoes the tenant-slot call (kAdmit) or global gate `gate`'s call (kGates).
  enum class UndoOf { kAdmit, kGates };
  void undo(const Op& op, UndoOf what, int gate = 0,
            std::chrono::steady_clock::time_point since = {}, std::function<void()> then = {});
  // Counts (and at most every 10 s logs) an undo given up after kUndoRetryS.
  void give_up(const Op& op);
  // Runs `run` on the loop after `delay`.
  void undo_later(std::chrono::microseconds delay, std::function<void()> run);
  void finish(AdmitOp* op);
  void fill_tenant_remaining(AdmitOp* op, bool refunded);
  template <class Result>
  struct CorrectOp;
  template <class Request, class Result>
  void correct(const Request& req, std::function<void(Result)> done);
  template <class Result>
  void correct_done(const std::shared_ptr<CorrectOp<Result>>& op);
  void add_global_remaining(AdmitOp* op);
  void fail(AdmitOp* op, Outcome o, std::string error) {
    op->res.outcome = o;
    op->res.error = std::move(error);
    finish(op);
  }
};

void Engine::Impl::finish(AdmitOp* op) {
  AdmitResult& r = op->res;
  // What the client can do instead (guidance.h): only refusals carry it, so the common path
  // copies nothing.
  if (r.outcome == Outcome::kRefused && (r.reason == "quota" || r.gate == "model")) {
    if (const auto& d = op->p.t->plan->degrade) {
      r.degrade_model = d->model;
      r.upgrade_url = d->upgrade_url;
    }
    if (r.reason == "quota")
      for (const Remaining& q : r.remaining)
        if (q.gate == r.gate)
          r.tokens_missing = std::max<int64_t>(0, op->p.tokens - static_cast<int64_t>(q.value));
  }
  auto done = std::move(op->done);
  done(std::move(r));
}

void Engine::Impl::admit(const AdmitRequest& req, std::function<void(AdmitResult)> done,
                         std::shared_ptr<const Snapshot> snap, const TenantInfo* entry,
                         const Turn& turn) {
  auto op = std::make_shared<AdmitOp>();
  op->done = std::move(done);
  op->snap = snap ? std::move(snap) : view.get();
  std::string err =
      prepare(op->snap->tables, req, rng, op->p, view.registry().get(), view.brake().get(),
              redis->clock_offset_ms(), view.saturation().get(), entry);
  if (!err.empty()) {
    op->res.outcome = Outcome::kBadRequest;
    op->res.error = std::move(err);
    redis->post([this, op] { finish(op.get()); });
    return;
  }
  op->res.request_id = op->p.rid;
  set_deadline(op->p.deadline, redis->script_deadline_ms());
  op->p.holder = holder;
  if (turn.waits) {
    op->p.turn = turn;
    op->p.left_ms_s = std::to_string(std::max<int64_t>(turn.left_ms, 0));
    if (turn.next_tenants > 1) op->p.next_tenants_s = std::to_string(turn.next_tenants);
    if (turn.book_ms > 0) op->p.book_ms_s = std::to_string(turn.book_ms);
  }
  op->res.cls = op->p.t->plan->cls;
  op->res.lease_s = op->p.t->lease_len_s;
  op->res.brake = op->p.brake;
  op->globals_after = op->p.ng > 0 && hints->refusing(op->p.t->name, steady_ms());
  if (turn.gate_first && op->p.ng > 0 && !op->globals_after) {
    op->tenant_after = true;
    send_gates(op);  // part_done sends admit.lua once they all admitted
    return;
  }
  op->pending = 1;
  send(
      AdmitCall(op->p),
      [this, op](const redisReply* r, std::string_view e) { on_admit_reply(op, r, e); },
      [this, op](const redisReply* r) { on_late_admit(op, r); });
  if (!op->globals_after) send_gates(op);
}

void Engine::Impl::send_gates(const Op& op) {
  op->pending += op->p.ng;
  for (int i = 0; i < op->p.ng; ++i)
    send(
        GatesCall(op->p, i),
        [this, op, i](const redisReply* r, std::string_view e) { on_gates_reply(op, i, r, e); },
        [this, op, i](const redisReply* r) { on_late_gates(op, i, r); });
}

// What the tenant's slot said of the tenant's gates, for the next admissions (RefusalHints):
// refused, they refuse until its retry_after; admitted, until the tenant bucket (the gate every
// request of the tenant takes one from) holds a whole token again.
void Engine::Impl::learn(const AdmitOp& op, int64_t retry_after_ms) {
  const Prepared& p = op.p;
  if (p.ng == 0) return;  // nothing to order
  const int64_t now = steady_ms();
  if (op.tenant_part == Part::kRefused) return hints->note(p.t->name, now, now + retry_after_ms);
  int64_t until = now;
  for (int i = 0; i < p.nb; ++i) {
    const Gate& g = *p.buckets[i];
    const double level = op.tokens_after[static_cast<size_t>(i)];
    // By name: under a brake the gate is the plan's braked copy.
    if (g.name != "tenant" || g.shadow == "1" || level >= 1 || g.refill <= 0) continue;
    until = now + static_cast<int64_t>(std::ceil((1 - level) / g.refill * 1000));
  }
  hints->note(p.t->name, now, until);
}

void Engine::Impl::fill_tenant_remaining(AdmitOp* op, bool refunded) {
  const Prepared& p = op->p;
  const config::Plan& plan = *p.t->plan;
  auto& rem = op->res.remaining;
  // Sized once for every gate of the answer (tenant's, quota, concurrency, global): one
  // allocation, not one per growth.
  rem.reserve(static_cast<size_t>(p.nb + p.nw + 1 + p.ng) + p.t->nq);
  for (int i = 0; i < p.nb; ++i) {
    double v = op->tokens_after[static_cast<size_t>(i)];
    // refund.lua gave back what it took: the level before this admission.
    if (refunded && !(op->undo.untaken & (1u << i)))
      v = std::min(p.buckets[i]->capacity, v + cost_of(p, *p.buckets[i]));
    rem.push_back(bucket_remaining(*p.buckets[i], v));
  }
  for (int j = 0; j < p.nw; ++j)
    rem.push_back(window_remaining(*p.windows[j], op->window_counts[static_cast<size_t>(j)],
                                   op->tenant_part == Part::kAdmitted && !refunded));
  for (size_t k = 0; k < p.t->nq; ++k) {
    const QuotaInfo& info = p.t->quotas[k];
    if (info.limit < 0) continue;  // counted, no gate
    int64_t used = op->used[k] - (refunded ? p.tokens : 0);
    Remaining q;
    q.gate = std::string(info.name);
    q.limit = static_cast<double>(info.limit);
    q.value = static_cast<double>(std::max<int64_t>(0, info.limit - used));
    q.window_s = static_cast<double>(op->len[k]);
    q.reset_s = op->left[k];
    rem.push_back(q);
  }
  if (plan.concurrency && op->live >= 0) {
    int64_t live = op->live - (refunded ? 1 : 0);
    Remaining c;
    c.gate = "concurrency";
    c.limit = static_cast<double>(plan.concurrency->max_streams);
    c.value = static_cast<double>(std::max<int64_t>(0, plan.concurrency->max_streams - live));
    c.window_s = static_cast<double>(plan.concurrency->lease_s);
    c.reset_s = live > 0 ? (op->first_ms + 999) / 1000 : 0;
    rem.push_back(c);
  }
}

void Engine::Impl::add_global_remaining(AdmitOp* op) {
  for (int i = 0; i < op->p.ng; ++i) {
    const auto at = static_cast<size_t>(i);
    if (op->global_parts[at] == Part::kPending) continue;  // not asked: the tenant refused
    double v = op->global_tokens[at];
    if (op->p.globals[i]->window) {
      op->res.remaining.push_back(window_remaining(
          *op->p.globals[i], static_cast<int64_t>(v),
          op->global_parts[at] == Part::kAdmitted && op->res.outcome == Outcome::kAllowed));
      continue;
    }
    // ungates.lua gave back what it took: the level before this admission.
    if (op->global_parts[at] == Part::kAdmitted && op->res.outcome != Outcome::kAllowed &&
        !op->global_untaken[at])
      v = std::min(op->p.globals[i]->capacity, v + cost_of(op->p, *op->p.globals[i]));
    op->res.remaining.push_back(bucket_remaining(*op->p.globals[i], v));
  }
}

// A part refused: the answer names the refusing gate with the longest wait over all parts.
void Engine::Impl::refused_by(AdmitOp* op, std::string_view gate, int64_t retry_ms) {
  if (op->res.gate.empty() || retry_ms > op->res.retry_after_ms) {
    op->res.gate = std::string(gate);
    op->res.retry_after_ms = retry_ms;
  }
}

// A part admitted although a shadow-mode gate of it would have refused: the answer names the
// one with the longest wait, as for refusals.
void Engine::Impl::shadow_refused_by(AdmitOp* op, std::string_view gate, int64_t retry_ms) {
  if (gate.empty()) return;
  if (op->res.shadow_refused.empty() || retry_ms > op->res.shadow_retry_ms) {
    op->res.shadow_refused = std::string(gate);
    op->res.shadow_retry_ms = retry_ms;
  }
}

void Engine::Impl::failed(AdmitOp* op, std::string error) {
  if (op->error.empty()) op->error = std::move(error);
}

void Engine::Impl::on_admit_reply(const Op& op_ptr, const redisReply* r, std::string_view error) {
  AdmitOp* op = op_ptr.get();
  const int64_t code =
      r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? as_int(elem(r, kCode)) : -1;
  const size_t nb = static_cast<size_t>(op->p.nb);
  const size_t nw = static_cast<size_t>(op->p.nw);
  const size_t at = tokens_at(op->p);
  std::string bad = bad_reply(r, error, at + nb + nw);
  if (code == 2) {
    op->conflict = true;  // nothing was written
  } else if (code == 3) {
    // Cancelled: only an undo of this very call does that, sent once its reply was lost, so the
    // reply cannot be read here; answered like any failure should it come all the same.
    failed(op, "redis: call cancelled");
  } else if (code == 4) {
    failed(op, std::string(kPastDeadline));  // nothing written
  } else if (!bad.empty()) {
    failed(op, std::move(bad));  // a timeout's late reply, if any, is undone by on_late_admit
  } else {
    for (size_t k = 0; k < op->p.t->nq; ++k) {
      const size_t q = kQuotas + kQuotaStride * k;
      op->used[k] = as_int(elem(r, q + kQuotaUsed));
      op->left[k] = as_int(elem(r, q + kQuotaLeft));
      op->len[k] = as_int(elem(r, q + kQuotaLen));
    }
    const size_t tail = admit_tail(op->p, code == 1);
    // Without a concurrency gate the reply has no lease figures: live stays -1.
    if (op->p.t->max_streams_s != "-1") {
      op->live = as_int(elem(r, tail + kLive));
      op->first_ms = as_int(elem(r, tail + kFirstLeaseMs));
    }
    op->undo.quota_existed = as_str(elem(r, kQuotaExisted));
    for (size_t i = 0; i < nb; ++i) op->tokens_after[i] = as_double(elem(r, at + i));
    for (size_t j = 0; j < nw; ++j) op->window_counts[j] = as_int(elem(r, at + nb + j));
    op->tenant_part = code == 1 ? Part::kAdmitted : Part::kRefused;
    learn(*op, code == 1 ? 0 : as_int(elem(r, tail + kRetryAfterMs)));
    if (code != 1) {
      refused_by(op, as_str(elem(r, tail + kGate)), as_int(elem(r, tail + kRetryAfterMs)));
    } else {
      shadow_refused_by(op, as_str(elem(r, tail + kGate)), as_int(elem(r, tail + kRetryAfterMs)));
      if (op->p.ng > 0 && !decode_undo(op, r)) {
        // Admitted without the snapshot a refund needs: cannot happen with our script;
        // refund.lua then gives one token back per bucket.
        op->undo.snapshot.clear();
        op->undo.untaken = 0;
        failed(op, "redis: unexpected reply");
      }
    }
  }
  if (op->globals_after && op->tenant_part == Part::kAdmitted && op->error.empty())
    send_gates(op_ptr);
  part_done(op_ptr);
}

void Engine::Impl::on_gates_reply(const Op& op_ptr, int i, const redisReply* r,
                                  std::string_view error) {
  AdmitOp* op = op_ptr.get();
  const auto at = static_cast<size_t>(i);
  std::string bad = bad_reply(r, error, kGatesTokens + 1);
  const int64_t code =
      r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? as_int(elem(r, kGatesCode)) : -1;
  if (code == 3) {
    failed(op, "redis: call cancelled");
  } else if (code == 4) {
    failed(op, std::string(kPastDeadline));  // nothing evaluated
  } else if (!bad.empty()) {
    failed(op, std::move(bad));  // a timeout's late reply, if any, is undone by on_late_gates
  } else {
    op->global_tokens[at] = as_double(elem(r, kGatesTokens));
    if (as_int(elem(r, kGatesCode)) == 1) {
      op->global_parts[at] = Part::kAdmitted;
      // A call that may wait: the reply ends with when its booked token exists (0: none
      // booked), after, for the first of its worker's waiters on this gate, when the next can
      // pass.
      const bool waits = op->p.turn.waits && op->p.globals[i]->name != kGlobalIpGate;
      if (waits && r->elements > kGatesTokens + 2)
        if (const int64_t due_us = as_int(elem(r, r->elements - 1)); due_us > 0) {
          op->res.booked_us = steady_us() + due_us;
          op->res.booked_gate = op->p.globals[i]->name;
        }
      if (!op->p.turn.head.empty() && op->p.turn.head == op->p.globals[i]->name)
        op->res.next_ms = as_int(elem(r, r->elements - (waits ? 2 : 1)));
      shadow_refused_by(op, as_str(elem(r, kGatesGate)), as_int(elem(r, kGatesRetryAfterMs)));
      decode_gates_undo(op, i, r);
    } else {
      op->global_parts[at] = Part::kRefused;
      refused_by(op, as_str(elem(r, kGatesGate)), as_int(elem(r, kGatesRetryAfterMs)));
    }
  }
  part_done(op_ptr);
}

// Every part answered: admitted when all admitted; otherwise every part that admitted is undone
// (refund.lua, ungates.lua), so that a request not admitted is charged nothing. A 503 or 409 is
// answered at once (the undos reach Redis whenever it answers); a 429 waits for its undos, so
// that the Remaining values it reports are the levels after them.
void Engine::Impl::part_done(const Op& op_ptr) {
  AdmitOp* op = op_ptr.get();
  if (--op->pending > 0) return;
  if (op->res.booked_us > 0 && !op->held && op->error.empty() && !op->conflict &&
      op->res.gate.empty())
    return hold(op_ptr);
  if (op->tenant_after && op->tenant_part == Part::kPending && op->error.empty() &&
      op->res.gate.empty()) {
    // Every global gate admitted it: now the tenant's slot (refused there, they are undone).
    op->pending = 1;
    send(
        AdmitCall(op->p),
        [this, op_ptr](const redisReply* r, std::string_view e) { on_admit_reply(op_ptr, r, e); },
        [this, op_ptr](const redisReply* r) { on_late_admit(op_ptr, r); });
    return;
  }
  const Prepared& p = op->p;
  if (op->error.empty() && !op->conflict && op->res.gate.empty()) {
    op->res.outcome = Outcome::kAllowed;
    fill_tenant_remaining(op, false);
    add_global_remaining(op);
    finish(op);
    return;
  }
  const bool answer_now = !op->error.empty() || op->conflict;
  auto left = std::make_shared<int>(1);  // the undos to wait for, +1 until all are sent
  auto answer = [this, op_ptr, left] {
    if (--*left > 0) return;
    AdmitOp* op = op_ptr.get();
    op->res.outcome = Outcome::kRefused;
    op->res.reason = std::string(reason_of(op->res.gate));
    if (op->tenant_part != Part::kPending)
      fill_tenant_remaining(op, op->tenant_part == Part::kAdmitted);
    add_global_remaining(op);
    finish(op);
  };
  std::function<void()> then;
  if (!answer_now) then = answer;
  if (op->tenant_part == Part::kAdmitted) {
    ++*left;
    undo(op_ptr, UndoOf::kAdmit, 0, {}, then);
  }
  for (int i = 0; i < p.ng; ++i) {
    if (op->global_parts[static_cast<size_t>(i)] != Part::kAdmitted) continue;
    ++*left;
    undo(op_ptr, UndoOf::kGates, i, {}, then);
  }
  op->res.remaining.clear();
  op->res.shadow_refused.clear();
  op->res.shadow_retry_ms = 0;
  if (!op->error.empty()) {
    op->res.gate.clear();
    return fail(op, Outcome::kUnavailable, std::move(op->error));
  }
  if (op->conflict) {
    op->res.outcome = Outcome::kConflict;
    op->res.gate.clear();
    op->res.error = "request_id: '" + p.rid + "' is already in use";
    return finish(op);
  }
  answer();  // the +1: answers now when no undo was needed
}

// Every part asked so far admitted, one of them with a token booked for later (gates.lua): the
// request goes on when the token exists (its tenant's slot asked then, or, asked already, its
// answer given then), so that no admission is answered before its token, and the next waiter's
// time counts from then. Its client gone meanwhile, it is undone as a failure would be: the
// booked token goes back to its gate, where the next waiter takes it, and nothing is charged.
void Engine::Impl::hold(const Op& op_ptr) {
  AdmitOp* op = op_ptr.get();
  op->held = true;
  op->pending = 1;
  const int64_t in_us = std::max<int64_t>(op->res.booked_us - steady_us(), 0);
  undo_later(std::chrono::microseconds(in_us), [this, op_ptr, in_us] {
    AdmitOp* op = op_ptr.get();
    if (op->res.next_ms > 0) op->res.next_ms = std::max<int64_t>(op->res.next_ms - in_us / 1000, 0);
    if (op->p.turn.abandoned && *op->p.turn.abandoned) op->error = std::string(kAbandonedError);
    // Its tenant's slot, asked now, is as late as the hold: the call's deadline counts from now.
    set_deadline(op->p.deadline, redis->script_deadline_ms());
    part_done(op_ptr);
  });
}

// A request answered 503 is charged nothing. Its admit.lua call may still have run (it was
// written, and Redis was only slow or stopped, or went away before replying): a late reply is
// recognised here and undone exactly by refund.lua, as a refusal by another part is; a lost one
// (reply == nullptr) by refund.lua too, which finds out from the reservation whether this
// attempt ran, and if it has not, cancels it so that it refuses should it run later. The
// alternative, scripts refusing work past a deadline the gateway gives them, would put the
// gateway's clock into decisions (Redis TIME is the only clock there) and would still have to
// agree with the gateway on "too late". The undo runs only for failed requests: the normal path
// stays one round trip per hash slot.
void Engine::Impl::on_late_admit(const Op& op, const redisReply* r) {
  op->undo = Undo{};
  if (r) {
    if (!bad_reply(r, {}, tokens_at(op->p) + static_cast<size_t>(op->p.nb + op->p.nw)).empty())
      return;
    if (as_int(elem(r, kCode)) != 1) return;  // refused or a conflict: nothing was written
    op->undo.quota_existed = as_str(elem(r, kQuotaExisted));
    if (!decode_undo(op.get(), r)) op->undo = Undo{};
  }
  undo(op, UndoOf::kAdmit);
}

// The same for a global gate's gates.lua call answered 503: its bucket gets the token back if
// the call ran and admitted (ungates.lua reads gates.lua's marker), and a call that has not run
// is cancelled.
void Engine::Impl::on_late_gates(const Op& op, int i, const redisReply* r) {
  op->global_undo[static_cast<size_t>(i)].clear();
  if (r) {
    if (!bad_reply(r, {}, kGatesTokens + 1).empty()) return;
    if (as_int(elem(r, kCode)) != 1) return;
    decode_gates_undo(op.get(), i, r);
  }
  undo(op, UndoOf::kGates, i);
}

// gates.lua's snapshot of its one bucket: "<old tk> <old ts>", then the new ts; the new tk is
// its tokens_1. Left empty when the reply has none (ungates.lua then gives one token back).
void Engine::Impl::decode_gates_undo(AdmitOp* op, int i, const redisReply* r) {
  auto& out = op->global_undo[static_cast<size_t>(i)];
  out.clear();
  op->global_untaken[static_cast<size_t>(i)] = false;
  // A window's undo needs no snapshot: it removes the call's member.
  if (op->p.globals[i]->window || r->elements < kGatesTokens + 3) return;
  op->global_untaken[static_cast<size_t>(i)] = as_str(elem(r, kGatesTokens + 1)) == kUntaken;
  if (!split_old(as_str(elem(r, kGatesTokens + 1)), out)) return out.clear();
  out.emplace_back(as_str(elem(r, kGatesTokens)));
  out.emplace_back(as_str(elem(r, kGatesTokens + 2)));
}

// An undo for a request already answered: written even on a stalled connection, held while no
// connection is up (it must reach Redis once it answers again), sent again when its own reply is
// lost (both scripts are idempotent per attempt) for as long as gates.lua's marker lives. Its
// outcome is only logged when Redis refused it; then, when given, runs once it was answered.
void Engine::Impl::undo(const Op& op, UndoOf what, int gate,
                        std::chrono::steady_clock::time_point since, std::function<void()> then) {
  auto now = std::chrono::steady_clock::now();
  if (since == std::chrono::steady_clock::time_point{}) since = now;
  std::string_view name = what == UndoOf::kAdmit ? "refund" : "global-gate refund";
  // A timeout or a lost connection is no failure of the undo (its late reply or its resend
  // follows) and must not flood the log while Redis is stopped; an error reply is, unless Redis
  // will run it later (undo_can_wait): then it is sent again after a back-off as long as the
  // time since the first try, from 50 ms to 1 s. The request's answer does not wait for that.
  auto wait = [this, op, what, gate, since] {
    const auto waited = std::chrono::steady_clock::now() - since;
    if (waited > std::chrono::seconds(kUndoRetryS)) return give_up(op);
    if (observer) observer->error("undo_wait");
    undo_later(std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(waited),
                          std::chrono::milliseconds(50), std::chrono::milliseconds(1000)),
               [this, op, what, gate, since] { undo(op, what, gate, since); });
  };
  auto on_reply = [op, name, wait, then = std::move(then)](const redisReply* r,
                                                           std::string_view error) {
    if (undo_can_wait(r, error)) {
      wait();
    } else if (r && r->type == REDIS_REPLY_ERROR) {
      spdlog::warn("{} of {} failed: {}", name, op->p.rid, std::string_view(r->str, r->len));
    }
    if (then) then();
  };
  // The reply after the undo's own timeout: none (the connection went away), or one that says
  // the undo did not run yet.
  auto on_lost = [this, op, what, gate, since, wait](const redisReply* r) {
    if (undo_can_wait(r, {})) return wait();
    if (r) return;
    if (std::chrono::steady_clock::now() - since > std::chrono::seconds(kUndoRetryS))
      return give_up(op);
    undo(op, what, gate, since);
  };
  if (what == UndoOf::kAdmit)
    send(RefundCall(op->p, op->undo), std::move(on_reply), std::move(on_lost),
         RedisClient::WhenStalled::kQueue);
  else
    send(UngatesCall(op->p, gate, op->global_undo[static_cast<size_t>(gate)],
                     !op->global_untaken[static_cast<size_t>(gate)]),
         std::move(on_reply), std::move(on_lost), RedisClient::WhenStalled::kQueue);
}

void Engine::Impl::give_up(const Op& op) {
  if (observer) observer->error("late_lost");
  ++given_up;
  const auto now = std::chrono::steady_clock::now();
  if (now >= give_up_log_next) {  // one line per 10 s, however many give up
    give_up_log_next = now + std::chrono::seconds(10);
    spdlog::warn("redis: unreachable for {} s: {} undos given up (e.g. of request {})", kUndoRetryS,
                 given_up, op->p.rid);
    given_up = 0;
  }
}

void Engine::Impl::undo_later(std::chrono::microseconds delay, std::function<void()> run) {
  Later& l = later.emplace_front();
  l.impl = this;
  l.run = std::move(run);
  l.self = later.begin();
  l.ev = evtimer_new(
      base,
      [](evutil_socket_t, short, void* arg) {
        auto* l = static_cast<Later*>(arg);
        auto run = std::move(l->run);
        l->impl->later.erase(l->self);  // frees the timer, no longer pending
        run();
      },
      &l);
  if (!l.ev) {  // no timer to be had: sent again at once rather than never
    auto now = std::move(l.run);
    later.erase(l.self);
    return now();
  }
  const timeval tv{static_cast<time_t>(delay.count() / 1000000),
                   static_cast<suseconds_t>(delay.count() % 1000000)};
  // Counted from now, not from the time libevent cached when this loop pass began, which a busy
  // pass leaves milliseconds behind: a held admission would be answered before its token.
  event_base_update_cache_time(base);
  evtimer_add(l.ev, &tv);
}

bool Engine::Impl::decode_undo(AdmitOp* op, const redisReply* r) {
  const size_t nb = static_cast<size_t>(op->p.nb);
  const size_t tokens = tokens_at(op->p);
  const size_t at = tokens + nb + static_cast<size_t>(op->p.nw);  // the windows' counts first
  if (r->elements < at + nb + 1) return false;
  // Per bucket "<old tk> <old ts>", then the new ts of all; the new tk are the tokens_i.
  const std::string_view new_ts = as_str(elem(r, at + nb));
  op->undo.snapshot.reserve(4 * nb);
  for (size_t i = 0; i < nb; ++i) {
    if (as_str(elem(r, at + i)) == kUntaken) op->undo.untaken |= 1u << i;
    if (!split_old(as_str(elem(r, at + i)), op->undo.snapshot)) return false;
    op->undo.snapshot.emplace_back(as_str(elem(r, tokens + i)));
    op->undo.snapshot.emplace_back(new_ts);
  }
  const size_t pruned_at = admit_tail(op->p, true) + kPruned;
  if (r->elements > pruned_at) {
    auto k = static_cast<size_t>(std::max<int64_t>(0, as_int(elem(r, pruned_at))));
    for (size_t i = 0; i < 2 * k && pruned_at + 1 + i < r->elements; ++i)
      op->undo.pruned.emplace_back(as_str(elem(r, pruned_at + 1 + i)));
  }
  return true;
}

// A settle's or a stream charge's calls: settle.lua or charge.lua in the tenant's slot and,
// with a model_tokens gate, correct_gates.lua in the gate's, sent together (one round trip in
// wall time) and joined. Answered 503 when either failed: both are idempotent per slot (the
// reservation says settled, the gate's taken record is gone), so a settle sent again completes
// what a failed part left. A charge is not: one answered 503 may have been recorded, and the
// settle's total corrects the quota and every bucket to the tokens used all the same.
template <class Result>
struct Engine::Impl::CorrectOp {
  std::function<void(Result)> done;
  Result res;
  Correction c;
  int pending = 0;
  std::string error;
  int64_t code = -1;  // the tenant-slot script's code
  // Per quota (TenantInfo::quotas): its counter of the current period after the call, and (a
  // charge's) the seconds left of that period.
  std::array<int64_t, keys::TimeKeys::kMaxQuotas> used{}, left{};
  int64_t lease_left_ms = -1;
  std::array<double, 3> tokens_after{};
  double model_after = 0;
  bool model_corrected = false;
};

template <class Request, class Result>
void Engine::Impl::correct(const Request& req, std::function<void(Result)> done) {
  constexpr bool kSettle = std::is_same_v<Result, SettleResult>;
  // The calls are packed and written before this returns: the snapshot need not outlive it.
  std::shared_ptr<const Snapshot> snap = view.get();
  auto op = std::make_shared<CorrectOp<Result>>();
  op->done = std::move(done);
  std::string err = prepare_correction(snap->tables, req.tenant, req.request_id, req.tokens,
                                       req.user, req.api_key, req.model, op->c,
                                       view.registry().get(), redis->clock_offset_ms());
  if (!err.empty()) return post_bad_request(*redis, std::move(err), std::move(op->done));
  op->pending = op->c.model ? 2 : 1;
  if constexpr (!kSettle) set_deadline(op->c.deadline, redis->script_deadline_ms());
  auto tenant_part = [this, op](const redisReply* r, std::string_view e) {
    const size_t n = static_cast<size_t>(op->c.nb);
    const size_t nq = op->c.t->nq;
    std::string bad = bad_reply(r, e, 1);
    if (bad.empty()) {
      op->code = as_int(elem(r, 0));
      // Ran past its deadline (a Redis that was stopped): nothing written, a failure.
      if (!kSettle && op->code == 3) bad = std::string(kPastDeadline);
      const size_t need =
          kSettle ? 3 + nq + (op->code == 1 ? n : 0) : (op->code == 1 ? 3 + 2 * nq + n : 1);
      if (r->elements < need) bad = "redis: unexpected reply";
    }
    if (!bad.empty()) {
      op->error = std::move(bad);
    } else if constexpr (kSettle) {
      // {settled (1/0), detail, charged, used_1 .. used_q, tokens_1 .. tokens_n}
      op->res.settled = op->code == 1;
      op->res.detail = std::string(as_str(elem(r, 1)));
      op->res.charged = as_int(elem(r, 2));
      for (size_t k = 0; k < nq; ++k) op->used[k] = as_int(elem(r, 3 + k));
    } else if (op->code == 1) {
      // {code, lease_left_ms, reserved, used_1, left_s_1 .. used_q, left_s_q, tokens_1 ..}
      op->lease_left_ms = as_int(elem(r, 1));
      op->res.charged = as_int(elem(r, 2));
      for (size_t k = 0; k < nq; ++k) {
        op->used[k] = as_int(elem(r, 3 + 2 * k));
        op->left[k] = as_int(elem(r, 4 + 2 * k));
      }
      for (size_t i = 0; i < n; ++i) op->tokens_after[i] = as_double(elem(r, 3 + 2 * nq + i));
    }
    correct_done(op);
  };
  if constexpr (kSettle)
    send(SettleCall(op->c), std::move(tenant_part));
  else
    send(ChargeCall(op->c), std::move(tenant_part));
  if (!op->c.model) return;
  send(CorrectGatesCall(op->c, kSettle), [this, op](const redisReply* r, std::string_view e) {
    // {code, delta, tokens_1}
    std::string bad = bad_reply(r, e, 2);
    if (bad.empty() && as_int(elem(r, 0)) == 3) bad = std::string(kPastDeadline);  // a charge's
    if (!bad.empty()) {
      if (op->error.empty()) op->error = std::move(bad);
    } else if (as_int(elem(r, 0)) == 1 && r->elements >= 3) {
      op->model_corrected = true;
      op->model_after = as_double(elem(r, 2));
    }
    correct_done(op);
  });
}

template <class Result>
void Engine::Impl::correct_done(const std::shared_ptr<CorrectOp<Result>>& op) {
  if (--op->pending > 0) return;
  Result& res = op->res;
  const Correction& c = op->c;
  if (!op->error.empty()) {
    res.outcome = Outcome::kUnavailable;
    res.error = std::move(op->error);
  } else if constexpr (std::is_same_v<Result, SettleResult>) {
    res.outcome = Outcome::kAllowed;
    // The least any quota has left; -1 without a quota.
    res.remaining = -1;
    for (size_t k = 0; k < c.t->nq; ++k) {
      const int64_t limit = c.t->quotas[k].limit;
      if (limit < 0) continue;
      const int64_t left = std::max<int64_t>(0, limit - op->used[k]);
      res.remaining = res.remaining < 0 ? left : std::min(res.remaining, left);
    }
  } else if (op->code == 0) {
    res.outcome = Outcome::kNotFound;
    res.error = charge_not_found_error(c.rid);
  } else if (op->code == 2) {
    res.outcome = Outcome::kConflict;
    res.error = charge_settled_error(c.rid);
  } else {
    res.outcome = Outcome::kAllowed;
    res.lease_s = op->lease_left_ms > 0 ? op->lease_left_ms / 1000 : 0;
    for (size_t k = 0; k < c.t->nq; ++k) {
      const QuotaInfo& info = c.t->quotas[k];
      if (info.limit < 0) continue;
      Remaining q;
      q.gate = std::string(info.name);
      q.limit = static_cast<double>(info.limit);
      q.value = static_cast<double>(std::max<int64_t>(0, info.limit - op->used[k]));
      q.reset_s = op->left[k];
      res.remaining.push_back(q);
      // Recorded all the same (the tokens were used); the proxy is told to cut the stream. The
      // spent quota that resets last names the refusal.
      if (op->used[k] > info.limit && op->left[k] * 1000 >= res.retry_after_ms) {
        res.outcome = Outcome::kRefused;
        res.gate = q.gate;
        res.reason = "quota";
        res.retry_after_ms = op->left[k] * 1000;
      }
    }
    for (int i = 0; i < c.nb; ++i)
      res.remaining.push_back(
          bucket_remaining(*c.buckets[i], op->tokens_after[static_cast<size_t>(i)]));
    if (op->model_corrected) res.remaining.push_back(bucket_remaining(*c.model, op->model_after));
  }
  auto done = std::move(op->done);
  done(std::move(res));
}

Engine::Engine(const ConfigStore& store, event_base* base, RedisObserver* observer)
    : impl_(std::make_unique<Impl>(store, base, observer)) {}

Engine::~Engine() = default;

bool Engine::redis_up() const {
  return impl_->redis->up();
}

int Engine::redis_connected() const {
  return impl_->redis->connected();
}

std::string_view Engine::redis_state() const {
  return impl_->redis->state();
}

void Engine::admit(const AdmitRequest& req, std::function<void(AdmitResult)> done,
                   std::shared_ptr<const Snapshot> snap, const TenantInfo* entry,
                   const Turn& turn) {
  impl_->admit(req, std::move(done), std::move(snap), entry, turn);
}

void Engine::leave_waiters(const std::string& waiters_key) {
  // Its entry and the turns it kept for its lower bands (lua/lib_waiters.lua).
  std::array<std::string, Turn::kNoWait> kept;
  std::vector<std::string_view> argv = {"HDEL", waiters_key, impl_->holder};
  for (size_t b = 0; b < kept.size(); ++b) {
    kept[b] = impl_->holder + ':' + static_cast<char>('0' + b);
    argv.push_back(kept[b]);
  }
  // Nothing to do with the answer: an entry that stays stops counting at its own time.
  impl_->redis->command(argv, [](const redisReply*, std::string_view) {});
}

const std::string& Engine::holder() const {
  return impl_->holder;
}

const std::shared_ptr<const Snapshot>& Engine::snapshot() {
  return impl_->view.get();
}

const std::shared_ptr<const TenantDirectory>& Engine::registry() {
  return impl_->view.registry();
}

const std::shared_ptr<const Brake>& Engine::brake() {
  return impl_->view.brake();
}

RedisCalls& Engine::redis() {
  return *impl_->redis;
}

// settle and release take no LateReply: a late one does what the client asked, and both are
// idempotent by request_id. A settle answered 503 that ran anyway leaves the reservation settled
// with the count the client sent; its retry answers "already_settled" with that same charge. A
// release that ran anyway ended the lease the client wanted ended; its retry answers
// released = false.
void Engine::settle(SettleRequest req, std::function<void(SettleResult)> done) {
  impl_->correct(req, std::move(done));
}

void Engine::charge(ChargeRequest req, std::function<void(ChargeResult)> done) {
  impl_->correct(req, std::move(done));
}

void Engine::release(std::string tenant, std::string request_id,
                     std::function<void(ReleaseResult)> done) {
  Impl& im = *impl_;
  // The call is packed and written before this returns: the snapshot need not outlive it.
  std::shared_ptr<const Snapshot> snap = im.view.get();
  const TenantInfo* t = nullptr;
  std::shared_ptr<const TenantInfo> unlisted;
  std::string err =
      resolve(snap->tables, tenant, request_id, &t, unlisted, im.view.registry().get());
  if (!err.empty()) return post_bad_request(*im.redis, std::move(err), std::move(done));
  im.send(ReleaseCall(*t, request_id),
          [done = std::move(done)](const redisReply* r, std::string_view e) {
            ReleaseResult res;
            res.error = bad_reply(r, e, 0);
            if (res.error.empty()) {
              res.outcome = Outcome::kAllowed;
              res.released = as_int(r) == 1;
            }
            done(std::move(res));
          });
}

// No LateReply: reconcile.lua is idempotent by record id, so a charge whose reply was late or
// lost is simply sent again by the reconciler.
void Engine::reconcile(std::span<const ReconcileRecord> records,
                       std::function<void(std::string error)> done) {
  impl_->send(ReconcileCall(records),
              [done = std::move(done)](const redisReply* r, std::string_view e) {
                done(bad_reply(r, e, 0));
              });
}

}  // namespace dripgate::control
