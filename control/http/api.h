// The HTTP API's JSON bodies: parsing requests into engine calls (every field validated, errors
// name the field) and rendering engine results into status, headers and body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "control/admission/admission.h"
#include "control/admission/brake.h"
#include "control/admission/tenant_keys.h"
#include "control/admission/usage.h"

namespace dripgate::control::api {

// A 400 answer: `field` is the JSON path of the offending field ("" for the body itself).
struct FieldError {
  std::string field;
  std::string message;
  std::string str() const { return field.empty() ? message : field + ": " + message; }
};

// Each returns the first problem found, or nullopt with `out` filled. Unknown fields are
// rejected (a misspelt "token" must not silently reserve nothing).
std::optional<FieldError> parse_admit(std::string_view body, AdmitRequest& out);
std::optional<FieldError> parse_settle(std::string_view body, SettleRequest& out);
std::optional<FieldError> parse_charge(std::string_view body, ChargeRequest& out);
std::optional<FieldError> parse_release(std::string_view body, ReleaseRequest& out);

// POST /v1/admin/brake: {"factor": 0..1, "exempt_plans": [plan ids] (optional), "ttl_s": 1..
// kMaxBrakeTtlS}. Whether the plans exist is the caller's to check, as for parse_tenant_plan.
std::optional<FieldError> parse_brake(std::string_view body, Brake& out);

// The tenant registry's PUT /v1/admin/tenants/<id>: {"plan": "<plan id>"}. Whether the plan
// exists is the caller's to check (against the configuration in force).
std::optional<FieldError> parse_tenant_plan(std::string_view body, std::string& plan);
// POST /v1/admin/keys/<tenant>: {"op": "add"|"rotate"|"revoke", "key_sha256": "<64 hex>",
// "expires_at"?: unix s (add), "overlap_s": s (rotate: how long the other keys stay valid)}.
struct KeyChangeBody {
  std::string op;
  std::string key_sha256;  // lower case
  int64_t expires_at = 0;
  int64_t overlap_s = 0;
};
inline constexpr int64_t kMaxKeyOverlapS = 30 * 86400;
std::optional<FieldError> parse_key_change(std::string_view body, KeyChangeBody& out);

// Shared with the dataplane client: {"src","sport","dst","dport","proto"} with proto as a number.
std::string flow_json(const Flow& flow);

// Header names are string literals (no copy per answer); values are built per answer.
using Headers = std::vector<std::pair<std::string_view, std::string>>;

// On an answer decided without Redis (redis.on_failure): its mode, "open" or "local".
inline constexpr char kDegradedHeader[] = "Dripgate-Degraded";
// On an admission decided under the brake (brake.h): its factor.
inline constexpr char kBrakeHeader[] = "Dripgate-Brake";
// On an admission a shadow-mode gate would have refused: that gate (as the body's
// shadow_refused). Envoy's rate-limit service in shadow mode answers OK; this says why.
inline constexpr char kShadowRefusedHeader[] = "Dripgate-Shadow-Refused";

struct Response {
  int status = 200;
  Headers headers;  // Content-Type is added by the server
  std::string body;
};

// flow_tag: the dataplane's answer for the request's flow, sent as Dripgate-Flow-Tag when not
// empty.
// A 429 carries `guidance` (guidance.h), its quota reset time said from now_s (unix seconds;
// 0: the system clock). openai: with OpenAI's x-ratelimit-* headers (control.openai_headers).
Response render_admit(const AdmitResult& r, const std::string& flow_tag = {}, int64_t now_s = 0,
                      bool openai = true);
// The same into `out`, whose strings keep their capacity: a worker renders each admission into
// one Response it keeps, rather than allocating a body, a header list and header values anew.
void render_admit(const AdmitResult& r, const std::string& flow_tag, int64_t now_s, bool openai,
                  Response& out);
Response render_settle(const SettleResult& r);
// flow_tag: the renewal of the request's flow tag (Dripgate-Flow-Tag), empty for none.
Response render_charge(const ChargeResult& r, const std::string& flow_tag = {});
Response render_release(const ReleaseResult& r, const std::string& flow_tag = {});
Response render_error(int status, const std::string& message);
// The brake: {"brake": null} or {"brake": {"factor", "exempt_plans", "ttl_s"}}.
Response render_brake(int status, const Brake* b);
// One tenant of the admin API: {"tenant", "plan", "source": "registry" | "config"}.
// {"tenant", "keys": [{"sha256_prefix": first 8 hex digits, "expires_at": unix s or null}]}
Response render_tenant_keys(std::string_view tenant, const std::vector<TenantKey>& keys);
Response render_tenant(int status, std::string_view tenant, std::string_view plan,
                       std::string_view source);
// A page of the registry: {"tenants": [{"tenant", "plan"}...], "next_cursor": id or null,
// "version": the registry version of the copy it came from}.
Response render_tenant_page(const std::vector<std::pair<std::string_view, std::string_view>>& page,
                            bool more, uint64_t version);
// GET /v1/admin/usage/<tenant>: {"tenant", "plan", "now", "now_unix", "quotas": [{"quota",
// "unit", "period", "period_label", "mode", "used", "limit", "remaining", "period_start",
// "period_start_unix", "resets_at", "resets_at_unix", "rate_per_s", "projected_exhaustion",
// "projected_exhaustion_unix"}...]}: times as RFC 3339 in UTC and as unix seconds, the
// projection null when the quota lasts its period (usage.h).
Response render_usage(std::string_view tenant, std::string_view plan, int64_t now_s,
                      const std::vector<usage::QuotaUsage>& quotas);
// The status an engine outcome maps to.
int status_of(Outcome o);

// draft-ietf-httpapi-ratelimit-headers-10 fields for a set of gates (empty when none).
std::string ratelimit_policy_header(const std::vector<Remaining>& remaining);
std::string ratelimit_header(const std::vector<Remaining>& remaining);
// An allowed or refused admission's Retry-After (refused only), RateLimit-Policy and RateLimit
// headers, with `openai` OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} of the
// plan's binding gates (openai_headers.h), Dripgate-Degraded when decided without Redis,
// Dripgate-Shadow-Refused when a shadow gate would have refused it and Dripgate-Brake when
// decided under the brake: the HTTP answer's, and the gRPC answer's response_headers_to_add.
Headers ratelimit_headers(const AdmitResult& r, bool openai = true);
// Whole seconds, rounded up.
int64_t retry_after_seconds(int64_t retry_after_ms);

// Whether an Authorization value ("Bearer <token>", the scheme in any case; null: absent)
// carries `expected`. Constant time in the length of the expected token, so timing does not
// leak a prefix. Shared by the HTTP and the gRPC fronts.
bool token_matches(const std::string& expected, const char* header);
// The same comparison of a token given by other means (the password of HTTP Basic).
bool secret_equals(const std::string& expected, std::string_view got);

}  // namespace dripgate::control::api
