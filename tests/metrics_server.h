// A backend's metrics endpoint for tests (a model gate's saturation scrape): a listening
// socket on 127.0.0.1 and a thread per connection that answers each GET with the body set
// last, as Prometheus text, or misbehaves as told: silent (reads the request, never answers),
// endless (200 without a length and a body that never ends), a 500, a chunked answer, an
// announced Content-Length far over any cap, or the body as the whole answer (raw: bytes no
// HTTP server would send). Threads and socket end on destruction.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dripgate::testing {

class MetricsServer {
 public:
  enum class Mode { kServe, kSilent, kEndless, kStatus500, kChunked, kHugeLength, kRaw };

  MetricsServer();
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:<port><path>"
  std::string url(const std::string& path = "/metrics") const;
  void set_body(std::string body);
  void set_mode(Mode mode) { mode_.store(mode); }
  // Requests read so far (their target is the last one's).
  int requests() const { return requests_.load(); }
  std::string last_target();

 private:
  void accept_loop();
  void serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<Mode> mode_{Mode::kServe};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string body_, last_target_;
  std::vector<std::thread> conns_;
  std::thread acceptor_;
};

}  // namespace dripgate::testing
