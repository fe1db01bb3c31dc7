#include "control/http/tls_context.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <utility>

#include "config/regular_file.h"

namespace dripgate::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// A key protected by a passphrase is refused rather than asked for on a terminal.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

// OpenSSL's reason for the last failure (its queue emptied): names what is wrong, never the
// bytes it read.
std::string openssl_why(const char* fallback) {
  unsigned long last = 0;
  while (unsigned long e = ERR_get_error()) last = e;
  const char* reason = last ? ERR_reason_error_string(last) : nullptr;
  return reason ? reason : fallback;
}

BioPtr memory_bio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The chain's first certificate is the server's, the rest its intermediates.
std::optional<std::string> use_chain(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = memory_bio(pem);
  X509Ptr leaf(PEM_read_bio_X509_AUX(bio.get(), nullptr, no_passphrase, nullptr));
  if (!leaf) return "no PEM certificate in it (" + openssl_why("unreadable") + ")";
  if (SSL_CTX_use_certificate(ctx, leaf.get()) != 1) return openssl_why("certificate refused");
  while (X509Ptr ca{PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)}) {
    if (SSL_CTX_add0_chain_cert(ctx, ca.get()) != 1) return openssl_why("chain refused");
    ca.release();  // the context owns it now
  }
  ERR_clear_error();  // the end of the file reads as an error
  return std::nullopt;
}

std::optional<std::string> use_key(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = memory_bio(pem);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  if (!key) return "no unencrypted PEM private key in it (" + openssl_why("unreadable") + ")";
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1) return openssl_why("key refused");
  if (SSL_CTX_check_private_key(ctx) != 1) return "is not the key of cert_file's certificate";
  return std::nullopt;
}

// Every certificate in the file is trusted to sign client certificates, and named to clients
// as an acceptable issuer; a client without such a certificate fails the handshake.
std::optional<std::string> use_client_ca(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = memory_bio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  while (X509Ptr ca{PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)}) {
    if (X509_STORE_add_cert(store, ca.get()) != 1 || SSL_CTX_add_client_CA(ctx, ca.get()) != 1)
      return openssl_why("CA refused");
    ++n;
  }
  ERR_clear_error();
  if (n == 0) return "no PEM certificate in it";
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return std::nullopt;
}

std::optional<std::string> read_one(const std::string& path, const std::string& field,
                                    std::string& out) {
  static constexpr config::FileRule kPem{config::kMaxSecretBytes, "a PEM file", "a PEM file"};
  if (auto why = config::read_regular_file(path, kPem, out))
    return field + ": '" + path + "': " + *why;
  return std::nullopt;
}

}  // namespace

TlsFiles::~TlsFiles() {
  OPENSSL_cleanse(key.data(), key.size());
}

std::optional<std::string> read_tls_files(const config::Tls& tls, const std::string& field,
                                          TlsFiles& files) {
  if (auto why = read_one(tls.cert_file, field + ".cert_file", files.cert)) return why;
  if (auto why = read_one(tls.key_file, field + ".key_file", files.key)) return why;
  if (!tls.client_ca_file.empty())
    if (auto why = read_one(tls.client_ca_file, field + ".client_ca_file", files.client_ca))
      return why;
  return std::nullopt;
}

TlsContext::TlsContext(config::Tls tls, std::string field)
    : tls_(std::move(tls)), field_(std::move(field)) {}

std::optional<std::string> TlsContext::load() {
  TlsFiles files;
  if (auto why = read_tls_files(tls_, field_, files)) return why;
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return field_ + ": " + openssl_why("cannot make a TLS context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // No renegotiation (a client could make the server work at will); answers are written from a
  // buffer that grows between a short write and its retry (connection.cc).
  // A client that goes without close_notify has ended its stream all the same (HTTP frames
  // its requests itself).
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                     SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(ctx.get(), no_passphrase);
  if (auto why = use_chain(ctx.get(), files.cert))
    return field_ + ".cert_file: '" + tls_.cert_file + "': " + *why;
  if (auto why = use_key(ctx.get(), files.key))
    return field_ + ".key_file: '" + tls_.key_file + "': " + *why;
  if (!files.client_ca.empty())
    if (auto why = use_client_ca(ctx.get(), files.client_ca))
      return field_ + ".client_ca_file: '" + tls_.client_ca_file + "': " + *why;
  current_.store(std::shared_ptr<SSL_CTX>(ctx.release(), SslCtxFree{}));
  return std::nullopt;
}

SslPtr TlsContext::accept(int fd) const {
  const std::shared_ptr<SSL_CTX> ctx = current_.load();
  if (!ctx) return nullptr;
  SslPtr ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return nullptr;
  SSL_set_accept_state(ssl.get());
  return ssl;
}

}  // namespace dripgate::control
