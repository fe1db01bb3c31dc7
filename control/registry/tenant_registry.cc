#include "control/registry/tenant_registry.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <array>
#include <charconv>
#include <utility>

#include "control/admission/keys.h"
#include "lua/lua_scripts.h"

namespace dripgate::control {

namespace {

const redisReply* elem(const redisReply* r, size_t i) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return nullptr;
  return r->element[i];
}

std::string_view as_str(const redisReply* r) {
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}

std::optional<int64_t> as_int(const redisReply* r) {
  if (r && r->type == REDIS_REPLY_INTEGER) return r->integer;
  int64_t v = 0;
  std::string_view s = as_str(r);
  if (s.empty() || std::from_chars(s.data(), s.data() + s.size(), v).ptr != s.data() + s.size())
    return std::nullopt;
  return v;
}

// Why a reply is not what was asked for; empty when it is an array.
std::string bad_reply(const redisReply* r, std::string_view error) {
  if (!r) return std::string(error.empty() ? "redis: no reply" : error);
  if (r->type == REDIS_REPLY_ERROR) return "redis: " + std::string(r->str, r->len);
  if (r->type != REDIS_REPLY_ARRAY) return "redis: unexpected reply";
  return {};
}

// The registry's keys, built once (they never change).
struct Keys {
  std::string tenants = keys::registry_tenants();
  std::string version = keys::registry_version();
  std::string log = keys::registry_log();
};
const Keys& registry_keys() {
  static const Keys k;
  return k;
}

// A registry script's KEYS: the registry's three keys, at the places the script declares.
template <size_t N>
std::array<std::string_view, N> registry_kv(size_t tenants, size_t version, size_t log) {
  const Keys& k = registry_keys();
  std::array<std::string_view, N> kv{};
  kv[tenants] = k.tenants;
  kv[version] = k.version;
  kv[log] = k.log;
  return kv;
}

}  // namespace

void registry::write(RedisCalls& redis, const std::string& tenant, const std::string& plan,
                     std::function<void(std::string previous, std::string error)> done) {
  namespace s = lua::registry_write;
  static const std::string log_len = std::to_string(kLogLen);
  const auto kv = registry_kv<s::kKeysFixed>(s::kKeyTenants, s::kKeyVersion, s::kKeyLog);
  std::array<std::string_view, s::kArgsFixed> av{};
  av[s::kArgTenant] = tenant;
  av[s::kArgPlan] = plan;
  av[s::kArgLogLen] = log_len;
  redis.evalsha(lua::kRegistryWrite, kv, av,
                [done = std::move(done)](const redisReply* r, std::string_view error) {
                  std::string bad = bad_reply(r, error);
                  if (bad.empty() && r->elements < 2) bad = "redis: unexpected reply";
                  if (!bad.empty()) return done({}, std::move(bad));
                  done(std::string(as_str(elem(r, 0))), {});
                });
}

void registry::read(RedisCalls& redis, const std::string& tenant,
                    std::function<void(std::optional<std::string> plan, std::string error)> done) {
  std::array<std::string_view, 3> argv{"HGET", registry_keys().tenants, tenant};
  redis.command(argv, [done = std::move(done)](const redisReply* r, std::string_view error) {
    if (!r) return done(std::nullopt, std::string(error.empty() ? "redis: no reply" : error));
    if (r->type == REDIS_REPLY_ERROR)
      return done(std::nullopt, "redis: " + std::string(r->str, r->len));
    if (r->type == REDIS_REPLY_NIL) return done(std::nullopt, {});
    done(TenantDirectory::Registered(as_str(r)).plan, {});
  });
}

void registry::keys(RedisCalls& redis, const KeyChange& change,
                    std::function<void(KeyResult result, std::string error)> done) {
  namespace s = lua::registry_keys;
  static const std::string log_len = std::to_string(kLogLen);
  static const std::string max_keys = std::to_string(kMaxKeys);
  const auto kv = registry_kv<s::kKeysFixed>(s::kKeyTenants, s::kKeyVersion, s::kKeyLog);
  const std::string digest = digest_hex(change.sha256);
  const std::string expires_at = std::to_string(change.expires_at);
  const std::string now = std::to_string(change.now_s);
  std::array<std::string_view, s::kArgsFixed> av{};
  av[s::kArgTenant] = change.tenant;
  av[s::kArgOp] = change.op == KeyOp::kAdd      ? "add"
                  : change.op == KeyOp::kRotate ? "rotate"
                                                : "revoke";
  av[s::kArgDigest] = digest;
  av[s::kArgExpiresAt] = expires_at;
  av[s::kArgNow] = now;
  av[s::kArgMaxKeys] = max_keys;
  av[s::kArgLogLen] = log_len;
  redis.evalsha(lua::kRegistryKeys, kv, av,
                [done = std::move(done)](const redisReply* r, std::string_view error) {
                  std::string bad = bad_reply(r, error);
                  std::optional<int64_t> status = bad.empty() ? as_int(elem(r, 0)) : std::nullopt;
                  if (bad.empty() && !status) bad = "redis: unexpected reply";
                  if (!bad.empty()) return done({}, std::move(bad));
                  KeyResult out;
                  out.status = static_cast<int>(*status);
                  if (out.status == 1)
                    out.keys = TenantDirectory::Registered(as_str(elem(r, 1))).keys;
                  done(std::move(out), {});
                });
}

// A full read in progress: HSCAN pages into a new map, to be published as the copy of
// `version` (read before the first page: a change made during the scan is in the log after it,
// so the next poll applies it again, whatever the scan saw of it).
struct RegistrySync::Scan {
  uint64_t version = 0;
  std::string cursor = "0";
  TenantDirectory::Plans plans;
};

RegistrySync::RegistrySync(ConfigStore& store, const config::Redis& redis,
                           std::chrono::milliseconds poll)
    : store_(store), poller_(redis, poll, {&lua::kRegistryChanges}, "tenant registry") {}

RegistrySync::~RegistrySync() = default;

bool RegistrySync::start(std::chrono::milliseconds wait, std::string& error) {
  store_.expect_registry();
  full_started_ = std::chrono::steady_clock::now();
  return poller_.start([this] { poll(); }, wait, error);
}

void RegistrySync::poll() {
  if (busy_) return;
  busy_ = true;
  namespace s = lua::registry_changes;
  static const std::string max_changes = std::to_string(registry::kMaxChanges);
  std::string since = copy_ ? std::to_string(copy_->version()) : "-1";
  const auto kv = registry_kv<s::kKeysFixed>(s::kKeyTenants, s::kKeyVersion, s::kKeyLog);
  std::array<std::string_view, s::kArgsFixed> av{};
  av[s::kArgSince] = since;
  av[s::kArgMax] = max_changes;
  poller_.redis()->evalsha(
      lua::kRegistryChanges, kv, av,
      [this](const redisReply* r, std::string_view error) { on_changes(r, error); });
}

void RegistrySync::on_changes(const redisReply* r, std::string_view error) {
  std::string bad = bad_reply(r, error);
  std::optional<int64_t> v = bad.empty() ? as_int(elem(r, 0)) : std::nullopt;
  if (bad.empty() && (!v || *v < 0)) bad = "redis: unexpected reply";
  if (!bad.empty()) return failed(bad);
  const auto version = static_cast<uint64_t>(*v);
  std::string_view what = as_str(elem(r, 1));
  if (what.empty()) {  // nothing changed (never the answer to a daemon without a copy)
    busy_ = false;
    return;
  }
  if (what == "changes" && copy_) {
    TenantDirectory::Changes changes;
    changes.reserve(r->elements / 2);
    for (size_t i = 2; i + 1 < r->elements; i += 2)
      changes.emplace_back(as_str(r->element[i]),
                           TenantDirectory::Registered(as_str(r->element[i + 1])));
    busy_ = false;
    return publish(std::make_shared<const TenantDirectory>(*copy_, version, changes));
  }
  auto s = std::make_shared<Scan>();
  s->version = version;
  if (copy_) s->plans.reserve(copy_->size());
  full_started_ = std::chrono::steady_clock::now();
  scan(std::move(s));
}

void RegistrySync::scan(std::shared_ptr<Scan> s) {
  static const std::string count = std::to_string(registry::kScanCount);
  std::array<std::string_view, 5> argv{"HSCAN", registry_keys().tenants, s->cursor, "COUNT", count};
  poller_.redis()->command(argv, [this, s](const redisReply* r, std::string_view error) {
    std::string bad = bad_reply(r, error);
    const redisReply* cursor = elem(r, 0);
    const redisReply* fields = elem(r, 1);
    if (bad.empty() && (!cursor || !fields || fields->type != REDIS_REPLY_ARRAY))
      bad = "redis: unexpected reply";
    if (!bad.empty()) return failed(bad);
    for (size_t i = 0; i + 1 < fields->elements; i += 2)
      s->plans.insert_or_assign(std::string(as_str(fields->element[i])),
                                TenantDirectory::Registered(as_str(fields->element[i + 1])));
    s->cursor = std::string(as_str(cursor));
    if (s->cursor != "0") return scan(s);
    busy_ = false;
    auto took = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - full_started_);
    full_read_us_.store(took.count(), std::memory_order_relaxed);
    spdlog::info("tenant registry: {} tenants read (version {}) in {} ms", s->plans.size(),
                 s->version, took.count() / 1000);
    publish(std::make_shared<const TenantDirectory>(s->version, std::move(s->plans)));
  });
}

void RegistrySync::publish(std::shared_ptr<const TenantDirectory> next) {
  if (failing_) spdlog::info("tenant registry: reachable again (version {})", next->version());
  failing_ = false;
  spdlog::debug("tenant registry: version {} in force ({} tenants)", next->version(), next->size());
  copy_ = next;
  store_.publish_registry(std::move(next));
  poller_.set_loaded();
}

void RegistrySync::failed(std::string_view why) {
  busy_ = false;
  if (poller_.stopping() || failing_) return;
  failing_ = true;
  spdlog::warn(
      "tenant registry: cannot read it ({}); the copy {} stays in force, retrying every {} ms", why,
      copy_ ? "of version " + std::to_string(copy_->version()) : "(none yet)",
      poller_.period().count());
}

}  // namespace dripgate::control
