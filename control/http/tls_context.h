// TLS for a listener (control.tls, control.grpc_tls): the server's OpenSSL context, built from
// the certificate chain, its private key and an optional client CA (then a client certificate
// signed by it is required), and built again on SIGHUP. A new connection gets its SSL from the
// context in force when it is accepted; one accepted before a reload keeps the context it
// started with (each SSL holds a reference to its SSL_CTX).
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"

namespace dripgate::control {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

// The PEM files of a listener's TLS, read as the configuration's secret files are
// (config/regular_file.h: a regular file of at most 64 KiB; never a FIFO or a device).
struct TlsFiles {
  std::string cert, key, client_ca;  // client_ca empty: none asked for
  TlsFiles() = default;
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;
  ~TlsFiles();  // the key's bytes are wiped
};

// Reads tls's files into files; nullopt, or why not naming the field and file (never what the
// file holds). `field` is the block's path ("control.tls").
std::optional<std::string> read_tls_files(const config::Tls& tls, const std::string& field,
                                          TlsFiles& files);

class TlsContext {
 public:
  // field: the configuration block's path, for messages ("control.tls").
  TlsContext(config::Tls tls, std::string field);

  // Reads the files and builds a context; in force only when every file is usable (the
  // certificate and key match, the client CA parses). nullopt, or why not: the running context
  // stays. Any thread; one at a time.
  std::optional<std::string> load();

  // A server-side SSL on fd from the context in force, or null (out of memory).
  SslPtr accept(int fd) const;

 private:
  config::Tls tls_;
  std::string field_;
  std::atomic<std::shared_ptr<SSL_CTX>> current_;
};

}  // namespace dripgate::control
