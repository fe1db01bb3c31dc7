// Clients that send one admission after another to dripgate-control daemons until stopped,
// counting what was admitted: the load of the tests that measure an admitted rate.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/http_client.h"

namespace dripgate::testing {

class AdmitLoad {
 public:
  // `clients` threads, client i sending `body` to POST /v1/admit on ports[i % ports.size()].
  AdmitLoad(std::vector<int> ports, std::string body, int clients) : body_(std::move(body)) {
    for (int c = 0; c < clients; ++c)
      threads_.emplace_back([this, port = ports[c % ports.size()]] {
        while (!stop_.load()) {
          int s = http(port, "POST", "/v1/admit", body_).status;
          ok_ += s == 200;
          answered_ += s == 200 || s == 429;
        }
      });
  }
  ~AdmitLoad() { stop(); }
  AdmitLoad(const AdmitLoad&) = delete;
  AdmitLoad& operator=(const AdmitLoad&) = delete;

  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  // Admitted per second over `window`, from now.
  double rate(std::chrono::milliseconds window) {
    const int before = ok_.load();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(window);
    return (ok_.load() - before) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Answered 200 or 429 so far.
  int answered() const { return answered_.load(); }

 private:
  const std::string body_;
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0}, answered_{0};
  std::vector<std::thread> threads_;
};

}  // namespace dripgate::testing
