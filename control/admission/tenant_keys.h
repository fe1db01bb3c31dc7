// Who may act as which tenant under control.auth: tenant_keys. A tenant's API keys are known
// by their SHA-256 digests only: in the file (tenants.X.keys_sha256) and in the tenant registry
// (after the plan in its hash's value, each with the unix second it stops being valid, 0 for
// never). A request's key is hashed once and compared with the digests of the request's own
// tenant in constant time (CRYPTO_memcmp); only when none matches is it looked up among every
// tenant's digests, to tell a key of another tenant (403) from an unknown one (401). The shared
// auth_token, when set, stays valid for any tenant: a trusted proxy that authenticated it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"

namespace dripgate::control {

class TenantDirectory;
struct Snapshot;

using KeyDigest = std::array<unsigned char, 32>;

struct KeyDigestHash {
  size_t operator()(const KeyDigest& d) const {
    size_t h;  // a digest's bytes are already uniform
    std::memcpy(&h, d.data(), sizeof h);
    return h;
  }
};

// SHA-256 by OpenSSL's EVP.
KeyDigest sha256(std::string_view key);
// 64 hex digits, either case; nullopt otherwise.
std::optional<KeyDigest> digest_from_hex(std::string_view hex);
std::string digest_hex(const KeyDigest& d);

struct TenantKey {
  KeyDigest sha256{};
  int64_t expires_at = 0;  // unix seconds; 0: never
  bool valid_at(int64_t now_s) const { return expires_at == 0 || now_s < expires_at; }
  bool operator==(const TenantKey&) const = default;
};

// The registry's keys of a tenant: what follows its plan in the registry hash's value,
// " <64 hex>:<expires_at>" each (lua/registry_keys.lua writes them). Malformed entries are
// skipped: only that script writes there.
std::vector<TenantKey> parse_registry_keys(std::string_view text);

// The file's keys (config), derived once per snapshot: each tenant's digests and every
// digest's tenant, and the shared token's digest.
class FileKeys {
 public:
  explicit FileKeys(const config::Config& cfg);
  const std::vector<KeyDigest>* of(const std::string& tenant) const {
    auto it = by_tenant_.find(tenant);
    return it == by_tenant_.end() ? nullptr : &it->second;
  }
  const std::string* owner(const KeyDigest& d) const {
    auto it = owner_.find(d);
    return it == owner_.end() ? nullptr : &it->second;
  }
  const std::optional<KeyDigest>& proxy() const { return proxy_; }

 private:
  std::unordered_map<std::string, std::vector<KeyDigest>> by_tenant_;
  std::unordered_map<KeyDigest, std::string, KeyDigestHash> owner_;
  std::optional<KeyDigest> proxy_;  // control.auth_token's, when set
};

enum class KeyCheck {
  kOk,       // a valid key of the tenant
  kProxy,    // the trusted proxy's token (control.auth_token): any tenant
  kMissing,  // no "Authorization: Bearer <key>"
  kUnknown,  // a key no tenant has
  kExpired,  // a key of the tenant whose overlap after a rotation has ended
  kForeign,  // a valid key of another tenant
};

inline bool key_allowed(KeyCheck c) {
  return c == KeyCheck::kOk || c == KeyCheck::kProxy;
}
// 401 for a missing, unknown or expired key; 403 for another tenant's.
inline int key_check_status(KeyCheck c) {
  return key_allowed(c) ? 200 : c == KeyCheck::kForeign ? 403 : 401;
}
// Why, for the answer: never the key nor its digest.
std::string key_check_message(KeyCheck c, const std::string& tenant);
// Why, for dripgate_auth_refusals_total's reason: "missing", "unknown_key", "expired",
// "wrong_tenant"; "" for an allowed check.
std::string_view key_check_reason(KeyCheck c);

// The bearer credential of an "Authorization" value ("Bearer <key>", the scheme in any case);
// nullopt when there is none or another scheme.
std::optional<std::string_view> bearer_of(std::string_view authorization);

// Whether `credential` (the bearer value; nullopt: none) may act as `tenant` at `now_s` (unix
// seconds; injected by tests), under the snapshot's file keys and the registry's.
KeyCheck check_tenant_key(const Snapshot& snap, const TenantDirectory* registry,
                          const std::string& tenant, std::optional<std::string_view> credential,
                          int64_t now_s);

// Under tenant_keys, a flow a tenant's key tags must come from the caller's own address (`peer`,
// the connection's) or from the tenant's flows_from (the file's; a registry tenant has none):
// empty when it does, else why not, naming the field. Addresses as the API takes them.
std::string check_flow_source(const Snapshot& snap, const std::string& tenant, std::string_view src,
                              std::string_view peer);

}  // namespace dripgate::control
