// A 64-bit SipHash-2-4 of a string under a key drawn at random when the object is made
// (OpenSSL's EVP_MAC "SIPHASH"). The local limiter keys a settled reservation by it instead of
// its request_id: 8 bytes instead of a string, and, the key being secret, a client cannot
// choose a request_id that collides with another's (SipHash is a PRF, built for exactly that),
// which an unkeyed hash such as std::hash would let it do. Not thread-safe: one per owner.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

namespace dripgate::control {

class KeyedHash {
 public:
  // Throws std::runtime_error when OpenSSL has no SipHash or no randomness.
  KeyedHash();
  uint64_t operator()(std::string_view s);

 private:
  struct Free {
    void operator()(EVP_MAC* m) const { EVP_MAC_free(m); }
    void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
  };
  std::unique_ptr<EVP_MAC, Free> mac_;
  std::unique_ptr<EVP_MAC_CTX, Free> ctx_;
  std::array<unsigned char, 16> key_{};
};

}  // namespace dripgate::control
