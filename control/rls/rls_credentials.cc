#include "control/rls/rls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "control/http/tls_context.h"

namespace dripgate::control {

std::shared_ptr<grpc::ServerCredentials> rls_credentials(const config::Tls& tls, std::string& why) {
  if (!tls.on()) return grpc::InsecureServerCredentials();
  TlsContext check(tls, "control.grpc_tls");
  if (auto bad = check.load()) {
    why = *bad;
    return nullptr;
  }
  const auto refresh = static_cast<unsigned>(kCertificateRefresh.count());
  auto files = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.key_file, tls.cert_file, tls.client_ca_file, refresh);
  grpc::experimental::TlsServerCredentialsOptions options(files);
  options.watch_identity_key_cert_pairs();
  if (tls.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace dripgate::control
