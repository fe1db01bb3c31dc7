// HTTPS on a worker's connections: OpenSSL on the non-blocking socket itself (its socket BIO),
// read on readiness and written from the connection's output as send() would be. A TLS
// connection never goes through the worker's io_uring batches (their bytes would bypass the
// record layer); the plaintext path only tests the connection's SSL pointer.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <string_view>

#include "control/metrics/metrics.h"

#include "control/http/worker.h"

namespace dripgate::control::http {
namespace {

// A failed handshake's cause for dripgate_http_tls_handshake_failures_total, from OpenSSL's
// last error (read before the queue is cleared).
std::string_view handshake_failure_reason(unsigned long err) {
  if (ERR_GET_LIB(err) != ERR_LIB_SSL) return "other";
  switch (ERR_GET_REASON(err)) {
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return "no_client_certificate";
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      return "bad_client_certificate";
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_RECORD_LENGTH_MISMATCH:
      return "not_tls";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
      return "protocol";
    default:
      return "other";
  }
}

}  // namespace

// The handshake (inside the first reads), then what TLS decrypted, up to the worker's buffer,
// handed on as one read is (got): bytes, 0 at the end of the stream, or an error that closes.
// OpenSSL may hold decrypted bytes the socket no longer reports: a full buffer reads again in
// the next pass.
void Worker::tls_read(Connection* c) {
  SSL* ssl = c->ssl.get();
  size_t n = 0;
  int err = SSL_ERROR_NONE;
  while (n < rbuf.size()) {
    size_t got_now = 0;
    if (SSL_read_ex(ssl, rbuf.data() + n, rbuf.size() - n, &got_now) != 1) {
      err = SSL_get_error(ssl, 0);
      break;
    }
    n += got_now;
  }
  if (err == SSL_ERROR_NONE || (n > 0 && SSL_has_pending(ssl)))
    event_active(c->read_ev, EV_READ, 0);
  if (n > 0) return got(c, static_cast<ssize_t>(n), rbuf.data());  // an error comes back next
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return;  // a record or the handshake is not complete yet
    case SSL_ERROR_WANT_WRITE:
      c->tls_read_wants_write = true;
      return watch_writable(c);
    case SSL_ERROR_ZERO_RETURN:
      return got(c, 0, nullptr);  // the client's close_notify (or its end without one)
    default:
      // A failed handshake (no or a wrong client certificate, plaintext on the TLS port): the
      // alert has gone out; the connection closes. Counted by cause: a client that just closes
      // (a port probe) ends in SSL_ERROR_SYSCALL with nothing in the queue, and is none.
      if (err == SSL_ERROR_SSL && !SSL_is_init_finished(ssl) && metrics)
        metrics->tls_handshake_failure(handshake_failure_reason(ERR_peek_last_error()));
      ERR_clear_error();
      return got(c, -EPROTO, nullptr);
  }
}

// SSL_write from c's output as send() would answer: bytes taken, or -1 with errno (EAGAIN:
// wait until the socket is writable; the retry may come with more output appended, which the
// context's modes allow).
ssize_t Worker::tls_send(Connection* c) {
  size_t n = 0;
  if (SSL_write_ex(c->ssl.get(), c->out.data() + c->out_at, c->out.size() - c->out_at, &n) == 1)
    return static_cast<ssize_t>(n);
  const int err = SSL_get_error(c->ssl.get(), 0);
  ERR_clear_error();
  errno = err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

}  // namespace dripgate::control::http
