#include "control/outage/keyed_hash.h"

#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

namespace dripgate::control {

KeyedHash::KeyedHash()
    : mac_(EVP_MAC_fetch(nullptr, "SIPHASH", nullptr)),
      ctx_(mac_ ? EVP_MAC_CTX_new(mac_.get()) : nullptr) {
  if (!ctx_) throw std::runtime_error("OpenSSL has no SipHash");
  if (RAND_bytes(key_.data(), static_cast<int>(key_.size())) != 1)
    throw std::runtime_error("OpenSSL has no randomness for a SipHash key");
}

uint64_t KeyedHash::operator()(std::string_view s) {
  // The key is given at every init: a NULL key's meaning (keep the last one) has changed
  // between OpenSSL releases, and setting 16 bytes is a few instructions.
  unsigned int size = 8;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_SIZE, &size),
                         OSSL_PARAM_construct_end()};
  unsigned char out[8];
  size_t len = 0;
  if (EVP_MAC_init(ctx_.get(), key_.data(), key_.size(), params) != 1 ||
      EVP_MAC_update(ctx_.get(), reinterpret_cast<const unsigned char*>(s.data()), s.size()) != 1 ||
      EVP_MAC_final(ctx_.get(), out, &len, sizeof out) != 1 || len != sizeof out)
    throw std::runtime_error("SipHash failed");
  uint64_t h;
  std::memcpy(&h, out, sizeof h);
  return h;
}

}  // namespace dripgate::control
