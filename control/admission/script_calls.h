// What each Lua script is called with: the request side of the admission backend. The config is
// turned once into per-tenant tables (ARGV strings formatted once), a request is validated
// against them, and the KEYS and ARGV of admit/gates/refund/settle/release are packed here and
// only here, at the positions each script declares with its `-- @keys` / `-- @argv` lines
// (named in the generated lua/lua_scripts.h). Key names come from keys.h. Sending the calls and
// decoding the replies is admission.cc's part.
#pragma once

#include <array>
#include <cassert>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "control/admission/admission.h"
#include "control/admission/brake.h"
#include "control/admission/keys.h"
#include "control/admission/tenant_directory.h"

namespace dripgate::lua {
struct Script;
}

namespace dripgate::control {

struct SaturationShares;

// One configured token bucket or sliding window with its ARGV strings formatted once.
struct Gate {
  // "tenant", "user", "api_key", "ip", "model", "tool", "total", "global_ip"; the token-rate gates
  // "tenant_tokens", "user_tokens", "api_key_tokens", "model_tokens"
  std::string name;
  // A token-rate gate: an admission takes its token estimate (not 1), settle and stream charges
  // correct it to the tokens used.
  bool per_token = false;
  double capacity = 0;
  double refill = 0;
  std::string cap_s, rate_s;
  // The bucket's warmup_s (lua/lib_bucket.lua; "0": none). Not scaled by a brake: the ramp runs
  // over the braked capacity and refill.
  std::string warmup_s;
  // algorithm sliding_window (lua/lib_window.lua) instead of a bucket: at most `limit`
  // admissions in any window_ms; capacity and refill are then 0.
  bool window = false;
  int64_t limit = 0, window_ms = 0;
  std::string limit_s, window_ms_s;
  std::string key;  // global gates: the full key; tenant gates: filled per request
  // Global gates: the key of their waiters across workers and daemons (lua/lib_waiters.lua).
  std::string waiters_key;
  // global gates: the model or tool name, the client's address key for global_ip ("" for total)
  std::string id;
  // "1" in shadow mode (the bucket's own `mode`, or its plan's): it never refuses.
  std::string_view shadow = "0";

  // tokens: a token-rate gate (its cost is the request's estimate, not 1); plan_shadow: the
  // plan's `mode` is shadow.
  Gate(std::string n, const config::Bucket& b, bool tokens = false, bool plan_shadow = false);
  // g under a brake: capacity and refill times factor; a window's limit times factor, rounded
  // down.
  Gate(const Gate& g, double factor);
  Gate(const Gate&) = default;
};

// A plan's tenant-scoped buckets, once per plan: every tenant on the plan points at them (a
// tenant's own state is its keys), so 100,000 tenants do not hold 100,000 copies.
struct PlanGates {
  std::optional<Gate> tenant, user, api_key, ip;
  std::optional<Gate> tenant_tokens, user_tokens, api_key_tokens;
};

// One of a plan's quotas as the scripts count it: the list a tenant's quotas are iterated by
// (the admission, its answer's Remaining values, a report of usage). A plan without a quota
// still counts its tokens in a month counter, of limit -1.
struct QuotaInfo {
  std::string_view name = "quota";  // its gate: "quota" (month), "quota_day", ...
  common::Period period = common::Period::kMonth;
  std::string_view unit = "tokens";
  int64_t limit = -1;  // tokens per period; -1: counted, never refused
  std::string limit_s = "-1";
};

struct TenantInfo {
  std::string name;
  const config::Plan* plan = nullptr;
  // The plan's gates (Tables::plan_gates), null when the plan has none.
  const Gate *tenant = nullptr, *user = nullptr, *api_key = nullptr, *ip = nullptr;
  const Gate *tenant_tokens = nullptr, *user_tokens = nullptr, *api_key_tokens = nullptr;
  std::string tenant_key, tenant_tokens_key, quota_prefix, reservations_prefix, leases_key;
  std::string res_ttl_s, max_open_s = "-1", max_streams_s = "-1", lease_s;
  // The plan's quotas, shortest period first (at least one: QuotaInfo).
  std::array<QuotaInfo, keys::TimeKeys::kMaxQuotas> quotas{};
  size_t nq = 1;
  // The counter key of quota q's period holding unix second now_s (tenant entries only: the
  // name is set), e.g. "dg:{t:acme}:q:2026-12-07".
  std::string quota_key(size_t q, int64_t now_s) const;
  // Each quota's period holding now_s and its counter's expiry: what a local decision journals.
  std::vector<QuotaPeriodRef> quota_periods(int64_t now_s) const;
  // "1": the quota (and reservations) / concurrency gate is in shadow mode.
  std::string_view quota_shadow_s = "0", streams_shadow_s = "0";
  int64_t res_ttl = 600;  // reservation_ttl_s
  // The time-named keys (quota periods, reservation windows) of a call made now, on Redis's
  // clock: this daemon's plus redis_offset_ms (RedisCalls::clock_offset_ms).
  void time_keys(keys::TimeKeys& out, int64_t redis_offset_ms = 0) const;
  int64_t lease_len_s = 0;  // the concurrency lease (s); 0 without a concurrency gate
  // The plan's quota_timezone (Tables::zones); null only when the tz database lost it (then
  // its months count in UTC, and its shorter periods are not counted).
  const common::QuotaCalendar* zone = nullptr;
};

// Everything derived from the config that a request needs, built once per configuration.
// Holds pointers into cfg's plans: cfg must outlive it.
struct Tables {
  // By plan name; first, so that the TenantInfo below can point into it (nodes of an
  // unordered_map stay where they are). Not copied: a copy would point into the original.
  std::unordered_map<std::string, PlanGates> plan_gates;
  std::unordered_map<std::string, TenantInfo> tenants;
  // The default plan's (tenants: "*"), with its keys unset: a copy named after an unlisted
  // tenant is made per request.
  std::optional<TenantInfo> any;
  // Every plan's, with its keys unset, by plan name: for the tenants of the tenant registry.
  std::unordered_map<std::string, TenantInfo> plans;
  std::unordered_map<std::string, Gate> models, model_tokens, tools;
  std::optional<Gate> total;  // every admission, when configured
  // global_gates.ip, its key unset: Prepared::global_ip is a copy keyed by the request's address.
  std::optional<Gate> ip;
  // Each plan's quota_timezone, loaded once, by name.
  std::unordered_map<std::string, common::QuotaCalendar> zones;

  explicit Tables(const config::Config& cfg);
  Tables(const Tables&) = delete;
  Tables& operator=(const Tables&) = delete;

  // The tenant registry's plan for `name` when it names the tenant (the registry wins over the
  // file), else the file's entry, else a copy of `any`; a copy made for `name` is kept alive by
  // `unlisted`. nullptr when the tenant is none of these, or when the registry puts it on a
  // plan the configuration does not have (then *why says so, naming the field "tenant": the
  // tenant is refused rather than moved to another plan behind its owner's back).
  const TenantInfo* find(const std::string& name, std::shared_ptr<const TenantInfo>& unlisted,
                         const TenantDirectory* registry = nullptr,
                         std::string* why = nullptr) const {
    return own(entry(name, registry, why), name, unlisted);
  }
  // find()'s lookup without its copy: the file's entry of a listed tenant, else the plan's or
  // `any`, whose name and keys are unset. Cheap, and kept by the caller (it points into these
  // tables), so that one lookup serves whoever needs the tenant's plan before the admission.
  const TenantInfo* entry(const std::string& name, const TenantDirectory* registry = nullptr,
                          std::string* why = nullptr) const;
  // entry(name, ...) as find() returns it: a listed tenant's own, else a copy named after the
  // tenant, kept alive by `unlisted`; null stays null.
  static const TenantInfo* own(const TenantInfo* entry, const std::string& name,
                               std::shared_ptr<const TenantInfo>& unlisted);
};

// The deadline of a call packed outside the engine (tests, a replay by redis-benchmark): the
// year 2286, none in effect.
inline constexpr std::string_view kNoDeadline = "9999999999999";

// The most buckets one admission goes through: tenant, user, api_key, ip and the token-rate
// tenant_tokens, user_tokens, api_key_tokens in the tenant's admit.lua call; model,
// model_tokens, tool, total and global_ip each in its own gates.lua call (each has its own hash
// tag; global_ip's is its address's, so that addresses spread over a cluster's slots).
inline constexpr size_t kMaxTenantBuckets = 7;
inline constexpr size_t kMaxGlobalBuckets = 5;
// The request gates that may be sliding windows instead: tenant, user, api_key, ip.
inline constexpr size_t kMaxTenantWindows = 4;

// An admission being built: validated input, key names and the buckets it goes through. Filled
// in place and never copied: under a brake, buckets and globals point into `braked`.
struct Prepared {
  Prepared() = default;
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;

  const TenantInfo* t = nullptr;
  std::shared_ptr<const TenantInfo> unlisted;  // t's owner for a tenant on the default plan
  std::string rid, user_key, api_key_key, ip_key, user_tokens_key, api_key_tokens_key, tokens_s;
  // New for every admission: tells this admit.lua/gates.lua call apart from any other with the
  // same request_id, so that an undo whose call's reply was lost can find out whether it ran.
  std::string attempt;  // 16 hex digits
  // admit.lua's flags argument: its four flag characters, then the attempt (one argument, not
  // two: each costs Redis a string and a table slot on every call).
  std::string flags;
  // The quota months and reservation windows around the gateway's clock at the admission: its
  // admit.lua call and, should it be undone, its refund.lua call declare them.
  keys::TimeKeys time_keys;
  // admit.lua's and gates.lua's deadline (RedisCalls::script_deadline_ms), in decimal: 13 digits,
  // held in the string itself. The engine sets it per call.
  std::string deadline{kNoDeadline};
  // Per global gate, keys::global_attempt of the attempt: each gate's gates.lua call leaves its
  // marker in that gate's own hash slot.
  std::array<std::string, kMaxGlobalBuckets> attempt_keys;
  // Per global gate, its gates.lua taken record (keys::global_taken of request_id) for a
  // model_tokens gate, whose settle and stream charges correct what it took; empty otherwise.
  std::array<std::string, kMaxGlobalBuckets> taken_keys;
  bool fresh = false;  // rid was generated here: it cannot be in use yet
  int64_t tokens = 0;
  std::array<const Gate*, kMaxTenantBuckets> buckets{};
  std::array<std::string_view, kMaxTenantBuckets> bucket_keys{};
  int nb = 0;
  // The tenant-scoped sliding windows, in the same admit.lua call after the buckets.
  std::array<const Gate*, kMaxTenantWindows> windows{};
  std::array<std::string_view, kMaxTenantWindows> window_keys{};
  int nw = 0;
  // "<request_id>:<attempt>": what the admission adds to each of its windows (one per call, so
  // an undo removes exactly its own); empty when the request meets no window.
  std::string member;
  // Its global gates, each a bucket or a window (Gate::window), each in its own gates.lua call.
  std::array<const Gate*, kMaxGlobalBuckets> globals{};
  int ng = 0;
  // The global ip gate of the request's address (Tables::ip with its keys set), when it has one.
  std::optional<Gate> global_ip;
  // Under a brake (brake.h) or a model gate's saturation (saturation.h): the gates of this
  // request with their rates scaled, which its calls and their undos carry. Empty otherwise,
  // so that a request pays nothing for it. (A tenant gate is a bucket or a window, never both:
  // seven at most either way.)
  std::array<std::optional<Gate>, kMaxTenantBuckets + kMaxGlobalBuckets> braked;
  double brake = 1;  // the brake's factor applied (saturation shares not included)
  // Its place among the global gates' waiters (gates.lua's holder, turn, band, left_ms,
  // next_band), set by the engine after prepare(); by default one that does not wait.
  std::string_view holder = "";
  Turn turn;
  std::string left_ms_s{"0"};
  std::string next_tenants_s{"1"};
  std::string book_ms_s{"0"};
};

// v as 16 hex digits, lowercase, appended to out.
void append_hex(std::string& out, uint64_t v);

// Validates req and fills p (generating a request id when req has none); returns an error
// "field: message" or an empty string.
// registry: the tenant registry's copy in force (null: none); brake: the brake in force (null:
// none); redis_offset_ms: Redis's clock minus this daemon's (TenantInfo::time_keys);
// saturation: the model gates' saturation shares in force (null: all at 1); entry:
// tables.entry(req.tenant, registry) when the caller looked it up already (null: prepare does).
std::string prepare(const Tables& tables, const AdmitRequest& req, std::mt19937_64& rng,
                    Prepared& p, const TenantDirectory* registry = nullptr,
                    const Brake* brake = nullptr, int64_t redis_offset_ms = 0,
                    const SaturationShares* saturation = nullptr,
                    const TenantInfo* entry = nullptr);
// The tenant of a settle or release: `tenant` may be empty, and is then derived from a
// request_id the engine generated. Returns an error "field: message" or an empty string.
std::string resolve(const Tables& tables, std::string& tenant, const std::string& request_id,
                    const TenantInfo** out, std::shared_ptr<const TenantInfo>& unlisted,
                    const TenantDirectory* registry = nullptr);
// "tokens: ..." when tokens is out of range, else empty.
// Lua numbers are doubles: beyond 2^53 token counts would be rounded, so cap them well below.
inline constexpr int64_t kMaxTokenCost = 1'000'000'000'000'000;
std::string check_tokens(int64_t tokens);

// The KEYS or ARGV of one call as views: the fixed positions set by name, then the groups.
class Slots {
 public:
  Slots(size_t fixed, size_t total);
  void set(size_t pos, std::string_view v);
  void add(std::string_view v) { v_.push_back(v); }
  // One repetition of a group, its fields set by name: a field left unset is one the script
  // declares and this side does not pack.
  template <size_t Stride>
  void add(const std::array<std::string_view, Stride>& group) {
    for (auto v : group) {
      assert(v.data() != nullptr);
      v_.push_back(v);
    }
  }
  // Every fixed position must have been set: one left unset is an argument the script declares
  // and this side does not pack.
  std::span<const std::string_view> view() const;

 private:
  // A call is built on the stack and sent at once, so its views live in place: the admit call's
  // largest KEYS and ARGV (7 tenant gates, 4 windows: 75 ARGV) fit, two allocations fewer per
  // admission; a longer call spills to the heap.
  static constexpr size_t kInPlace = 80;
  alignas(std::string_view) std::byte in_place_[kInPlace * sizeof(std::string_view)];
  std::pmr::monotonic_buffer_resource arena_{in_place_, sizeof in_place_};
  size_t fixed_;
  std::pmr::vector<std::string_view> v_{&arena_};
};

// One EVALSHA. Views into the strings of the request (or of the call itself): construct in
// place and send before those go away.
struct Call {
  const lua::Script& script;
  Slots keys, args;
  Call(const lua::Script& s, size_t keys_fixed, size_t keys_total, size_t args_fixed,
       size_t args_total)
      : script(s), keys(keys_fixed, keys_total), args(args_fixed, args_total) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
};

// admit.lua for p, with the snapshot a refund needs (a global gate may refuse, or the reply may
// come after the request's deadline).
struct AdmitCall : Call {
  explicit AdmitCall(const Prepared& p);
};

// How long gates.lua's marker of a call is kept (s): an undo of a call whose reply was lost
// must reach Redis within this time to give the tokens back. Kept short because every gated
// admission writes one.
inline constexpr int kAttemptTtlS = 60;

// gates.lua for p's global gate i (model, tool or total): one call per gate, since each gate's
// bucket has its own hash tag and so, on a Redis Cluster, its own slot.
struct GatesCall : Call {
  GatesCall(const Prepared& p, int i);
};

// ungates.lua: gives back the token the gates.lua call of p's global gate i took (removes its
// member from a window), when the admission did not go through (another part refused or
// failed, or its reply came late or never), or cancels that call if it has not run.
struct UngatesCall : Call {
  // snapshot: gates.lua's old tk, old ts, new tk, new ts of the bucket; empty when its reply was
  // lost (ungates.lua then gives one token back). took: false when gates.lua took nothing (an
  // empty shadow bucket): only the marker is undone. A window ignores both: removing a member
  // that is not there changes nothing.
  UngatesCall(const Prepared& p, int i, const std::vector<std::string>& snapshot, bool took = true);
};

// What admit.lua returned that refund.lua needs to undo the admission exactly. Empty when its
// reply was lost: refund.lua then gives one token back per bucket.
struct Undo {
  // A character per quota, "1" when admit.lua found its counter; empty when unknown (the reply
  // was lost): every counter is kept.
  std::string quota_existed;
  std::vector<std::string> snapshot;  // per bucket: old tk, old ts, new tk, new ts
  // Bit i: bucket i took nothing (an empty shadow bucket): refund.lua leaves it alone.
  unsigned untaken = 0;
  std::vector<std::string> pruned;  // the expired leases admit.lua pruned: member, score, ...
};

// refund.lua: undoes p's admission after a global gate refused it, or after the request was
// answered 503 and admit.lua's reply came late or never (then it cancels the call if it has not
// run). Its windows lose p.member.
struct RefundCall : Call {
  RefundCall(const Prepared& p, const Undo& undo);
};

// The token-rate gates a settle or a stream charge corrects: the tenant's own (tenant_tokens,
// and user_tokens / api_key_tokens for the user and API key it names) in the tenant's slot,
// and a model_tokens gate in its own.
struct Correction {
  const TenantInfo* t = nullptr;
  std::shared_ptr<const TenantInfo> unlisted;  // t's owner for a tenant on the default plan
  std::string rid, tokens_s, user_key, api_key_key, taken_key;
  int64_t tokens = 0;
  std::array<const Gate*, 3> buckets{};
  std::array<std::string_view, 3> bucket_keys{};
  int nb = 0;
  const Gate* model = nullptr;  // its model_tokens gate; null: none
  keys::TimeKeys time_keys;
  // A charge's deadline (charge.lua's and correct_gates.lua's; RedisCalls::script_deadline_ms),
  // in decimal; a settle runs whenever it does.
  std::string deadline{kNoDeadline};
};
// Validates a settle's or charge's fields and fills c; an error "field: message" or empty.
std::string prepare_correction(const Tables& tables, std::string tenant, const std::string& rid,
                               int64_t tokens, const std::string& user, const std::string& api_key,
                               const std::string& model, Correction& c,
                               const TenantDirectory* registry = nullptr,
                               int64_t redis_offset_ms = 0);

// settle.lua: replaces request_id's reservation with the actual token count, and corrects the
// tenant-slot token-rate buckets.
struct SettleCall : Call {
  explicit SettleCall(const Correction& c);
};

// charge.lua: one stream charge in the tenant's slot.
struct ChargeCall : Call {
  explicit ChargeCall(const Correction& c);
};

// correct_gates.lua: the model_tokens gate's part of a settle (final) or a charge.
struct CorrectGatesCall : Call {
  CorrectGatesCall(const Correction& c, bool final);
};

// release.lua: ends request_id's lease.
struct ReleaseCall : Call {
  ReleaseCall(const TenantInfo& t, const std::string& request_id);
};

// How long a tenant's (or global gate's) set of reconciled record ids is kept after its last
// change (s): a journal is reconciled within seconds of Redis coming back, or at the daemon's
// next start.
inline constexpr int kAppliedTtlS = 7 * 86400;

// reconcile.lua: charges journaled local decisions' parts in one slot (records sharing their
// applied_key), in their order.
struct ReconcileCall : Call {
  explicit ReconcileCall(std::span<const ReconcileRecord> records);
  // The numbers formatted for ARGV, which holds views into them.
  std::vector<std::string> text;
};

// ---- for benchmarks and tools: the exact Redis call an admission makes ----

// One EVALSHA: the script's name, SHA1 and text, and the KEYS and ARGV it is called with.
struct ScriptCall {
  std::string script;  // "admit"
  std::string sha1;
  std::string text;
  std::vector<std::string> keys;
  std::vector<std::string> args;
};

// The tenant-slot EVALSHA (admit.lua) that Engine::admit() sends first for req under cfg, after
// the same validation (nullopt and *error = "field: message" when req is invalid). An empty
// req.request_id is generated as the engine does; the reservation key is made of it, so a
// replay must vary it per call (redis-benchmark: request_id "<tenant>.__rand_int__" with -r)
// or every call after the first answers "request_id in use".
std::optional<ScriptCall> admit_script_call(const config::Config& cfg, const AdmitRequest& req,
                                            std::string* error = nullptr);
// The text of lua/admit.lua as embedded in the binary.
const std::string& admit_script_text();

}  // namespace dripgate::control
