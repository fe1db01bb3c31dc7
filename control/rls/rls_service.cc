#include "control/rls/rls_service.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/id.h"
#include "control/admission/tenant_keys.h"
#include "control/gateway/gateway.h"
#include "control/http/api.h"
#include "control/http/inbox.h"
#include "control/rls/rls_mapping.h"
#include "control/rls/wire_decode.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace dripgate::control {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using Code = pb::RateLimitResponse::Code;
using Unit = pb::RateLimitResponse::RateLimit::Unit;

// How long stop() waits for calls in flight (each bounded by the Redis timeout).
constexpr std::chrono::seconds kDrainLimit{10};
// As the HTTP API's body limit: a rate-limit request is a few hundred bytes.
constexpr int kMaxMessageBytes = 64 * 1024;

rls::Request from_message(const pb::RateLimitRequest& m) {
  rls::Request r;
  r.domain = m.domain();
  r.hits_addend = m.hits_addend();
  for (const auto& d : m.descriptors()) {
    rls::Descriptor& desc = r.descriptors.emplace_back();
    for (const auto& e : d.entries()) desc.entries.push_back({e.key(), e.value()});
    if (d.has_hits_addend()) desc.hits_addend = d.hits_addend().value();
  }
  return r;
}

// The smallest of Envoy's units that spans the gate's window.
Unit unit_of(double window_s) {
  static constexpr std::pair<double, Unit> kUnits[] = {
      {1, pb::RateLimitResponse::RateLimit::SECOND},
      {60, pb::RateLimitResponse::RateLimit::MINUTE},
      {3600, pb::RateLimitResponse::RateLimit::HOUR},
      {86400, pb::RateLimitResponse::RateLimit::DAY},
      {7 * 86400, pb::RateLimitResponse::RateLimit::WEEK},
      {31 * 86400, pb::RateLimitResponse::RateLimit::MONTH}};
  for (const auto& [len, unit] : kUnits)
    if (window_s <= len) return unit;
  return pb::RateLimitResponse::RateLimit::YEAR;
}

uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, UINT32_MAX));
}

void add_header(google::protobuf::RepeatedPtrField<envoy::config::core::v3::HeaderValue>* to,
                std::string_view key, const std::string& value) {
  auto* h = to->Add();
  h->set_key(key.data(), key.size());
  h->set_value(value);
}

// An allowed or refused admission as Envoy reads it: the overall code, one status per
// descriptor, the HTTP API's rate-limit headers for the client, and the request id and class
// for the upstream (which settles or releases with them over HTTP).
// openai: with OpenAI's x-ratelimit-* headers (control.openai_headers), as the HTTP answer.
void fill(const rls::Mapped& m, const AdmitResult& r, bool openai, pb::RateLimitResponse& out) {
  bool refused = r.outcome == Outcome::kRefused;
  out.set_overall_code(refused ? pb::RateLimitResponse::OVER_LIMIT : pb::RateLimitResponse::OK);
  for (const rls::Status& s : rls::statuses(m, r)) {
    auto* st = out.add_statuses();
    st->set_code(s.over_limit ? pb::RateLimitResponse::OVER_LIMIT : pb::RateLimitResponse::OK);
    if (s.gate.empty()) continue;
    auto* limit = st->mutable_current_limit();
    limit->set_name(s.gate);
    limit->set_requests_per_unit(u32(s.limit));
    limit->set_unit(unit_of(s.window_s));
    st->set_limit_remaining(u32(s.remaining));
    st->mutable_duration_until_reset()->set_seconds(s.reset_s);
  }
  for (const auto& [k, v] : api::ratelimit_headers(r, openai))
    add_header(out.mutable_response_headers_to_add(), k, v);
  // How long the call waited for its gate (the HTTP answer's waited_ms), for the client.
  if (r.waited_ms >= 0)
    add_header(out.mutable_response_headers_to_add(), "Dripgate-Waited-Ms",
               std::to_string(r.waited_ms));
  if (refused) return;
  add_header(out.mutable_request_headers_to_add(), "dripgate-request-id", r.request_id);
  add_header(out.mutable_request_headers_to_add(), "dripgate-class", r.cls);
}

grpc::Status error_status(const AdmitResult& r) {
  switch (r.outcome) {
    case Outcome::kBadRequest:
      return {grpc::StatusCode::INVALID_ARGUMENT, r.error};
    case Outcome::kConflict:
      return {grpc::StatusCode::ALREADY_EXISTS, r.error};
    default:
      // Redis did not answer and the tenant's redis.on_failure is closed (open and local
      // answer OK or OVER_LIMIT with Dripgate-Degraded, through fill()).
      return {grpc::StatusCode::UNAVAILABLE, r.error.empty() ? "admission failed" : r.error};
  }
}

// A call from its arrival until the last of its tasks is gone (answered, or dropped unanswered
// at shutdown): its place among the calls in flight (control.grpc_max_inflight) and its mapping.
struct InFlightCall {
  explicit InFlightCall(Metrics& m) : metrics(m) {}
  ~InFlightCall() { metrics.grpc_call_end(); }
  InFlightCall(const InFlightCall&) = delete;
  InFlightCall& operator=(const InFlightCall&) = delete;

  Metrics& metrics;
  rls::Mapped mapped;
};

// The margin a call's answer keeps before its deadline: a request waits for a gate at most until
// then, so that Envoy reads its answer rather than its own timeout.
constexpr std::chrono::milliseconds kDeadlineMargin{5};

// How long a call may wait for a gate: until shortly before its gRPC deadline (Envoy's
// ratelimit filter sets it from its `timeout`), within its plan's queue.max_wait_ms; unset
// without a deadline (the plan's alone).
std::optional<int64_t> wait_budget_ms(const grpc::CallbackServerContext& ctx) {
  const auto left = ctx.deadline() - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24)) return std::nullopt;  // none, or one beyond any wait
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left - kDeadlineMargin);
  return std::max<int64_t>(ms.count(), 0);
}

// A call's reactor: a call cancelled (Envoy gave up, its client went) while its request waits
// for a gate leaves the queue at once, as a closed HTTP connection does.
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  // What the cancel and the loop that decides the call share; the loop's side runs on its
  // thread, the cancel on gRPC's.
  struct Waiting {
    std::mutex mu;
    std::function<void(uint64_t)> abandon;  // posts Gateway::abandon to the call's loop
    uint64_t handle = 0;                    // the gateway's, once the loop admitted the call
    bool cancelled = false;
  };
  CallReactor() : waiting_(std::make_shared<Waiting>()) {}
  const std::shared_ptr<Waiting>& waiting() const { return waiting_; }

  // Called on the loop once the gateway took the call: handle 0 means it cannot wait.
  static void admitted(const std::shared_ptr<Waiting>& w, uint64_t handle,
                       std::function<void(uint64_t)> abandon) {
    std::lock_guard lock(w->mu);
    if (w->cancelled && handle) return abandon(handle);
    w->handle = handle;
    w->abandon = std::move(abandon);
  }

  void OnCancel() override {
    std::lock_guard lock(waiting_->mu);
    waiting_->cancelled = true;
    if (waiting_->handle) waiting_->abandon(std::exchange(waiting_->handle, 0));
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Waiting> waiting_;
};

}  // namespace

// One event loop and its Gateway; calls are posted to it from gRPC's threads.
struct RlsServer::Loop {
  event_base* base = nullptr;
  Inbox inbox;  // the calls gRPC's threads hand to this loop
  std::unique_ptr<Gateway> gateway;
  std::thread thread;

  ~Loop() {
    inbox.close();
    if (base) event_base_free(base);
  }

  void post(std::function<void(Gateway&)> fn) {
    inbox.post([this, fn = std::move(fn)] { fn(*gateway); });
  }

  void run() {
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    // The gateway (engine, Redis connections) belongs to this loop: torn down on its thread.
    gateway.reset();
  }
};

// Its one method is registered raw (its request and answer are bytes), so that a request that
// is not a message is answered INVALID_ARGUMENT saying why (wire_decode.h), not UNIMPLEMENTED by
// gRPC's typed handler. A method added to the service is to be registered raw as well.
class RlsServer::Service final : public pb::RateLimitService::WithRawCallbackMethod_ShouldRateLimit<
                                     pb::RateLimitService::Service> {
 public:
  explicit Service(RlsServer& server) : server_(server) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* in,
                                            grpc::ByteBuffer* out) override {
    auto* reactor = new CallReactor;
    const std::shared_ptr<const Snapshot> snap = server_.store_.current();
    Metrics& metrics = server_.metrics_;
    // Over the cap a call is answered before it costs anything: not decoded, no Redis call.
    if (const int cap = snap->cfg.control.grpc_max_inflight; metrics.grpc_call_begin() > cap) {
      metrics.grpc_call_end();
      metrics.grpc_call_refused();
      reactor->Finish(
          {grpc::StatusCode::RESOURCE_EXHAUSTED,
           "too many calls in flight (control.grpc_max_inflight: " + std::to_string(cap) + ")"});
      return reactor;
    }
    // Shared by the posted task and the decision's callback, which comes after the task is gone.
    auto call = std::make_shared<InFlightCall>(metrics);
    const bool tenant_keys = snap->cfg.control.tenant_keys;
    if (auto denied =
            check_token(*ctx, tenant_keys ? std::string() : snap->cfg.control.auth_token)) {
      reactor->Finish(*denied);
      return reactor;
    }
    pb::RateLimitRequest req;
    if (grpc::Status bad = wire::decode(*in, req); !bad.ok()) {
      metrics.admission("", "", "bad_request", "grpc");
      reactor->Finish(bad);
      return reactor;
    }
    if (auto p = rls::map_request(snap->cfg.control.rls_domains, from_message(req), call->mapped)) {
      metrics.admission("", "", "bad_request", "grpc");
      // An unknown domain or key is an error, not an UNKNOWN code: Envoy reads every code but
      // OVER_LIMIT as OK (and asserts it never gets UNKNOWN), while an error goes through its
      // failure_mode_deny and error counter.
      reactor->Finish({p->kind == rls::Problem::Kind::kUnknown ? grpc::StatusCode::NOT_FOUND
                                                               : grpc::StatusCode::INVALID_ARGUMENT,
                       p->str()});
      return reactor;
    }
    if (tenant_keys) {
      if (auto denied = check_tenant(*ctx, *snap, call->mapped.admit.tenant)) {
        reactor->Finish(*denied);
        return reactor;
      }
    }
    call->mapped.admit.max_wait_ms = wait_budget_ms(*ctx);
    size_t n = server_.loops_.size();
    Loop& loop = *server_.loops_[next_.fetch_add(1, std::memory_order_relaxed) % n];
    const bool openai = snap->cfg.control.openai_headers;
    loop.post([&loop, reactor, out, call, openai, waiting = reactor->waiting()](Gateway& g) {
      const uint64_t handle =
          g.admit(call->mapped.admit, [reactor, out, call, openai](const AdmitDecision& d) {
            const AdmitResult& r = d.result;
            if (r.outcome != Outcome::kAllowed && r.outcome != Outcome::kRefused)
              return reactor->Finish(error_status(r));
            pb::RateLimitResponse resp;
            fill(call->mapped, r, openai, resp);
            wire::encode(resp, *out);
            reactor->Finish(grpc::Status::OK);
          });
      if (handle)
        CallReactor::admitted(waiting, handle, [&loop](uint64_t h) {
          loop.post([h](Gateway& gw) { gw.abandon(h); });
        });
    });
    return reactor;
  }

 private:
  // The HTTP API's rule: with control.auth_token set, every call carries
  // "authorization: Bearer <token>" (gRPC metadata keys are lower case).
  std::optional<grpc::Status> check_token(const grpc::CallbackServerContext& ctx,
                                          const std::string& token) const {
    if (token.empty()) return std::nullopt;
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    if (api::token_matches(token, it == md.end() ? nullptr : value.c_str())) return std::nullopt;
    server_.metrics_.auth_refusal("grpc", "api", it == md.end() ? "missing" : "unknown_key");
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        it == md.end() ? "missing bearer token (authorization: Bearer …)" : "invalid bearer token");
  }

  // Under control.auth: tenant_keys, a key of the call's tenant (or the trusted proxy's token):
  // UNAUTHENTICATED as the HTTP API's 401, PERMISSION_DENIED as its 403, before any Redis call.
  std::optional<grpc::Status> check_tenant(const grpc::CallbackServerContext& ctx,
                                           const Snapshot& snap, const std::string& tenant) const {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    std::optional<std::string_view> key;
    if (it != md.end()) key = bearer_of(std::string_view(it->second.data(), it->second.size()));
    if (key && !common::valid_id(tenant)) return std::nullopt;  // the gateway's bad request
    const std::shared_ptr<const TenantDirectory> registry = server_.store_.registry();
    const KeyCheck c = check_tenant_key(snap, registry.get(), tenant, key, std::time(nullptr));
    if (key_allowed(c)) return std::nullopt;
    server_.metrics_.auth_refusal("grpc", "api", key_check_reason(c));
    return grpc::Status(c == KeyCheck::kForeign ? grpc::StatusCode::PERMISSION_DENIED
                                                : grpc::StatusCode::UNAUTHENTICATED,
                        key_check_message(c, tenant));
  }

  RlsServer& server_;
  std::atomic<size_t> next_{0};
};

RlsServer::RlsServer(const ConfigStore& store, Metrics& metrics, int threads, Fallback* fallback,
                     const DecisionLogFile* decisions, WaitBudget* waits)
    : store_(store),
      metrics_(metrics),
      threads_(std::max(1, threads)),
      fallback_(fallback),
      decisions_(decisions),
      waits_(waits) {}

RlsServer::~RlsServer() {
  stop();
}

bool RlsServer::start(const std::string& listen, std::string& error,
                      std::shared_ptr<grpc::ServerCredentials> creds) {
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  for (int i = 0; i < threads_; ++i) {
    auto l = std::make_unique<Loop>();
    l->base = new_front_loop();
    if (!l->base || !l->inbox.open(l->base)) {
      error = "grpc: cannot create an event loop";
      return false;
    }
    l->gateway = std::make_unique<Gateway>(store_, l->base, flows_, metrics_, 100, decisions_,
                                           "grpc", fallback_, waits_ ? waits_ : &own_waits_);
    loops_.push_back(std::move(l));
  }
  service_ = std::make_unique<Service>(*this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, std::move(creds), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    error = "grpc_listen: cannot listen on " + listen;
    server_.reset();
    loops_.clear();
    return false;
  }
  for (auto& l : loops_) l->thread = std::thread([lp = l.get()] { lp->run(); });
  return true;
}

void RlsServer::stop() {
  // Calls in flight finish from the loops, so the loops run until the server has shut down; those
  // waiting for a gate are answered now.
  for (auto& l : loops_)
    if (l->thread.joinable()) l->post([](Gateway& g) { g.drain_waiters(); });
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + kDrainLimit);
  for (auto& l : loops_) {
    if (!l->thread.joinable()) continue;
    l->post([base = l->base](Gateway&) { event_base_loopexit(base, nullptr); });
    l->thread.join();
  }
  server_.reset();
  loops_.clear();
}

}  // namespace dripgate::control
