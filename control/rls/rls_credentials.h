// The gRPC front's transport security (control.grpc_tls): none without it; else gRPC's own TLS
// with the server's certificate and key and, with a client CA, a client certificate signed by
// it required (mTLS: Envoy's cluster presents one). The files are checked at start as the HTTP
// front's are (tls_context.h), so that a bad one stops the daemon naming its field; gRPC's file
// watcher then reads them again every kCertificateRefresh, so new certificates are in force
// within that without a restart (gRPC's C++ API takes no new certificates from outside a
// running server).
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <chrono>
#include <memory>
#include <string>

#include "config/config.h"

namespace dripgate::control {

inline constexpr std::chrono::seconds kCertificateRefresh{2};

// Null, with why, when a file cannot be used.
std::shared_ptr<grpc::ServerCredentials> rls_credentials(const config::Tls& tls, std::string& why);

}  // namespace dripgate::control
