#include "control/admission/tenant_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>

#include <charconv>

#include "common/address.h"
#include "control/admission/config_snapshot.h"
#include "control/admission/tenant_directory.h"

namespace dripgate::control {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Whether `d` is among `keys` valid at now_s: every digest compared, in constant time, so the
// time taken says nothing of which byte differed or which key matched.
bool any_matches(const KeyDigest& d, const TenantKey* keys, size_t n, int64_t now_s,
                 bool& expired) {
  bool ok = false;
  for (size_t i = 0; i < n; ++i) {
    const bool same = CRYPTO_memcmp(d.data(), keys[i].sha256.data(), d.size()) == 0;
    ok |= same && keys[i].valid_at(now_s);
    expired |= same && !keys[i].valid_at(now_s);
  }
  return ok;
}

bool any_matches(const KeyDigest& d, const std::vector<KeyDigest>& keys) {
  bool ok = false;
  for (const KeyDigest& k : keys) ok |= CRYPTO_memcmp(d.data(), k.data(), d.size()) == 0;
  return ok;
}

}  // namespace

KeyDigest sha256(std::string_view key) {
  KeyDigest d{};
  unsigned int n = 0;
  EVP_Digest(key.data(), key.size(), d.data(), &n, EVP_sha256(), nullptr);
  return d;
}

std::optional<KeyDigest> digest_from_hex(std::string_view hex) {
  KeyDigest d{};
  if (hex.size() != 2 * d.size()) return std::nullopt;
  for (size_t i = 0; i < d.size(); ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return d;
}

std::string digest_hex(const KeyDigest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * d.size());
  for (unsigned char b : d) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::vector<TenantKey> parse_registry_keys(std::string_view text) {
  std::vector<TenantKey> out;
  while (!text.empty()) {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const size_t end = std::min(text.find(' '), text.size());
    const std::string_view item = text.substr(0, end);
    text.remove_prefix(end);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) continue;
    auto d = digest_from_hex(item.substr(0, colon));
    int64_t exp = 0;
    const std::string_view e = item.substr(colon + 1);
    auto [p, ec] = std::from_chars(e.data(), e.data() + e.size(), exp);
    if (!d || ec != std::errc() || p != e.data() + e.size() || exp < 0) continue;
    out.push_back({*d, exp});
  }
  return out;
}

FileKeys::FileKeys(const config::Config& cfg) {
  for (const auto& [name, t] : cfg.tenants) {
    if (t.keys_sha256.empty()) continue;
    std::vector<KeyDigest>& mine = by_tenant_[name];
    for (const std::string& hex : t.keys_sha256)
      if (auto d = digest_from_hex(hex)) {  // the loader checked it
        mine.push_back(*d);
        owner_.emplace(*d, name);
      }
  }
  if (!cfg.control.auth_token.empty()) proxy_ = sha256(cfg.control.auth_token);
}

std::string key_check_message(KeyCheck c, const std::string& tenant) {
  switch (c) {
    case KeyCheck::kOk:
    case KeyCheck::kProxy:
      return {};
    case KeyCheck::kMissing:
      return "missing API key (Authorization: Bearer <a key of tenant '" + tenant + "'>)";
    case KeyCheck::kUnknown:
      return "unknown API key";
    case KeyCheck::kExpired:
      return "the API key of tenant '" + tenant +
             "' has expired (its overlap after a rotation ended): use the new key";
    case KeyCheck::kForeign:
      return "the API key belongs to another tenant, not to '" + tenant + "'";
  }
  return {};
}

std::string_view key_check_reason(KeyCheck c) {
  switch (c) {
    case KeyCheck::kOk:
    case KeyCheck::kProxy:
      return {};
    case KeyCheck::kMissing:
      return "missing";
    case KeyCheck::kUnknown:
      return "unknown_key";
    case KeyCheck::kExpired:
      return "expired";
    case KeyCheck::kForeign:
      return "wrong_tenant";
  }
  return {};
}

std::optional<std::string_view> bearer_of(std::string_view authorization) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() <= kPrefix.size() ||
      strncasecmp(authorization.data(), kPrefix.data(), kPrefix.size()) != 0)
    return std::nullopt;
  return authorization.substr(kPrefix.size());
}

KeyCheck check_tenant_key(const Snapshot& snap, const TenantDirectory* registry,
                          const std::string& tenant, std::optional<std::string_view> credential,
                          int64_t now_s) {
  if (!credential) return KeyCheck::kMissing;
  const KeyDigest d = sha256(*credential);
  const FileKeys& file = snap.file_keys;
  if (file.proxy() && CRYPTO_memcmp(d.data(), file.proxy()->data(), d.size()) == 0)
    return KeyCheck::kProxy;
  bool expired = false;
  if (const std::vector<KeyDigest>* mine = file.of(tenant); mine && any_matches(d, *mine))
    return KeyCheck::kOk;
  if (const std::vector<TenantKey>* mine = registry ? registry->keys_of(tenant) : nullptr;
      mine && any_matches(d, mine->data(), mine->size(), now_s, expired))
    return KeyCheck::kOk;
  if (expired) return KeyCheck::kExpired;
  // Another tenant's? A digest is no secret, so looking it up in a hash table leaks nothing.
  if (file.owner(d)) return KeyCheck::kForeign;
  if (const std::string* owner = registry ? registry->owner_of(d, now_s) : nullptr;
      owner && *owner != tenant)
    return KeyCheck::kForeign;
  return KeyCheck::kUnknown;
}

namespace {

// An address as a host network; an IPv4-mapped IPv6 address (a dual-stack listener's peer) as
// its IPv4 address.
std::optional<common::Cidr> host_of(std::string_view text) {
  auto h = common::parse_cidr(text);
  if (!h || !h->v6 || h->prefix != 128) return h;
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(h->addr.data(), kMapped, sizeof kMapped) != 0) return h;
  common::Cidr v4;
  std::memcpy(v4.addr.data(), h->addr.data() + 12, 4);
  v4.prefix = 32;
  return v4;
}

}  // namespace

std::string check_flow_source(const Snapshot& snap, const std::string& tenant, std::string_view src,
                              std::string_view peer) {
  const auto s = host_of(src);
  const auto p = host_of(peer);
  if (s && p && *s == *p) return {};
  auto t = snap.cfg.tenants.find(tenant);
  if (s && t != snap.cfg.tenants.end())
    for (const common::Cidr& net : t->second.flows_from_nets)
      if (common::cidr_contains(net, *s)) return {};
  return "flow.src: " + std::string(src) + " is neither the caller's address nor in tenants." +
         tenant + ".flows_from";
}

}  // namespace dripgate::control
