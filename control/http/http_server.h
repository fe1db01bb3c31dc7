// dripgate-control's HTTP front: an HTTP/1.1 server on several worker threads (requests parsed by
// http_request.h, one libevent event per connection on the worker's loop: connection.cc), a
// route table (router.cc), handlers (handlers.h) and the JSON (de)serialisation of api.h around
// the Gateway (gateway.h), which decides. Each worker has
// its own event_base and Gateway (hence its own Redis connections and dataplane client); all
// accept on one listening socket bound once.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "control/admission/config_snapshot.h"
#include "control/dataplane_client/dataplane_client.h"
#include "control/gateway/decision_log.h"
#include "control/gateway/wait_budget.h"
#include "control/metrics/metrics.h"

namespace dripgate::control {

class Fallback;
namespace http {
struct Worker;  // worker.h
}

class TlsContext;
class StatusScrape;

struct ServerOptions {
  std::string listen;  // "host:port" or "[v6]:port"
  int threads = 2;
  size_t max_body = 64 * 1024;  // larger bodies get 413 (headers: 431 beyond 16 KiB)
  int dataplane_timeout_ms = 100;
  // Open at once, all workers (split between them); beyond it a newcomer evicts the longest idle
  // connection, or is closed when every one has a request in progress.
  int max_connections = 10000;
  int request_timeout_s = 10;  // to deliver a complete request, from accept or the last answer
  // The process's local decisions (redis.on_failure: local), shared with the gRPC front; null:
  // none (redis.journal unset).
  Fallback* fallback = nullptr;
  // The daemon's count of waiting requests (control.queue), shared with the gRPC front; null:
  // the server's own, shared by its workers.
  WaitBudget* waits = nullptr;
  // The answers of one loop pass written in one io_uring submission (io_batch.h); false, or a
  // kernel that refuses io_uring: a send() each.
  bool io_uring = true;
  // HTTPS (control.tls): each connection's TLS from the context in force when it is accepted;
  // null: plaintext. Outlives the server.
  const TlsContext* tls = nullptr;
  // The status page's scrape of the dataplane and the receiver (GET /v1/admin/status); null:
  // the page shows the daemon alone. Outlives the server.
  StatusScrape* status = nullptr;
};

class ReloadThread;

class HttpServer {
 public:
  // store, metrics and reloads outlive the server. Requests run on the store's snapshot in
  // force when they arrive. reloads: the thread that runs POST /v1/admin/reload's reloads
  // (null: 404).
  HttpServer(const ConfigStore& store, Metrics& metrics, ServerOptions opts,
             ReloadThread* reloads = nullptr);
  ~HttpServer();  // stops and joins if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts the workers; false with `error` set when the address cannot be used.
  bool start(std::string& error);
  // Thread-safe: stop accepting, let requests in flight finish (bounded wait), then stop.
  void stop();
  void join();
  int port() const { return port_; }
  // The decision log's file once start() opened it (control.decision_log), for the gRPC front to
  // write to as well; null without a log.
  const DecisionLogFile* decisions() const { return decisions_.get(); }
  Metrics& metrics() { return metrics_; }

 private:
  friend struct http::Worker;
  using Worker = http::Worker;
  void run_worker(Worker* w);
  // Counts a failed accept() and logs at most one line a second (with how many failed since).
  void accept_failed(int err);

  const ConfigStore& store_;
  ServerOptions opts_;
  Metrics& metrics_;
  ReloadThread* reloads_;
  AdmittedFlows flows_;
  WaitBudget waits_;                            // ServerOptions::waits when that is null
  std::unique_ptr<DecisionLogFile> decisions_;  // control.decision_log, opened by start()
  std::mutex accept_log_mu_;
  std::chrono::steady_clock::time_point accept_logged_at_{};
  uint64_t accept_errors_unlogged_ = 0;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace dripgate::control
