// dripgate-control's gRPC front: Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on control.grpc_listen.
//
// A thin layer, as the HTTP front is: gRPC's callback threads check the bearer token, copy the
// message into rls_mapping.h's structs and map it to one admission, then post it to one of this
// server's event loops, where a Gateway (gateway.h) decides it exactly as it decides
// POST /v1/admit (same Lua, same metrics, labelled front="grpc"); the call is finished from
// that loop. Each loop owns its Gateway, hence its own Redis connections.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "control/admission/config_snapshot.h"
#include "control/dataplane_client/dataplane_client.h"
#include "control/gateway/wait_budget.h"
#include "control/metrics/metrics.h"

namespace grpc {
class Server;
}

namespace dripgate::control {

class DecisionLogFile;
class Fallback;

class RlsServer {
 public:
  // store and metrics outlive the server; threads: event loops deciding calls (at least 1).
  // Every call runs on the store's configuration in force when it arrives (a reload applies).
  // fallback: the process's local decisions (redis.on_failure: local), shared with the HTTP
  // front; null: none. decisions: the decision log's file (control.decision_log), shared with
  // the HTTP front, which opens it; null: no log. waits: the daemon's count of requests waiting
  // for a gate (control.queue), shared with the HTTP front; null: the server's own.
  //
  // A call may wait for a gate (Gateway::admit) until shortly before its gRPC deadline (Envoy's
  // ratelimit filter `timeout`), within its plan's queue.max_wait_ms; a call cancelled
  // meanwhile leaves the queue at once.
  RlsServer(const ConfigStore& store, Metrics& metrics, int threads, Fallback* fallback = nullptr,
            const DecisionLogFile* decisions = nullptr, WaitBudget* waits = nullptr);
  ~RlsServer();  // stops if still running
  RlsServer(const RlsServer&) = delete;
  RlsServer& operator=(const RlsServer&) = delete;

  // Starts the loops and listens on `listen` (host:port, port 0: any); false with `error` set
  // when the address cannot be used.
  // creds: the listener's security (rls_credentials.h).
  bool start(const std::string& listen, std::string& error,
             std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials());
  // Stops accepting calls, lets those in flight finish (bounded wait), then stops the loops.
  void stop();
  int port() const { return port_; }

 private:
  struct Loop;
  class Service;

  const ConfigStore& store_;
  Metrics& metrics_;
  int threads_;
  Fallback* fallback_;
  const DecisionLogFile* decisions_;
  WaitBudget* waits_;
  WaitBudget own_waits_;
  AdmittedFlows flows_;  // the gateways need one; a ShouldRateLimit call carries no flow
  std::vector<std::unique_ptr<Loop>> loops_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace dripgate::control
