// The far end of a JSON-lines unix socket, for the control daemon's tests of its dataplane
// client: it records every line a client sends and answers as told (ok, an error, or nothing),
// so the client's handling of each answer, and of silence, can be tested. Several clients at
// once; the socket is removed on destruction. The real dataplane is tested against the client
// in tests/integration/control_dataplane_test.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace dripgate::testing {

class LinePeer {
 public:
  // kAnswerOk answers {"ok":true} to a JSON object with an "op" and an error to anything else;
  // kAnswerGiven answers every line with `given` (a newline is added).
  enum class Mode { kAnswerOk, kAnswerError, kSilent, kAnswerGiven };

  explicit LinePeer(std::string path, Mode mode = Mode::kAnswerOk, std::string given = {});
  ~LinePeer();
  LinePeer(const LinePeer&) = delete;
  LinePeer& operator=(const LinePeer&) = delete;

  // The lines received so far, parsed (a line that is not JSON is a discarded value).
  std::vector<nlohmann::json> lines();
  // The same lines as received, without their newlines: what a reader that cares for the
  // keys' order (the dataplane's tag fast path) sees.
  std::vector<std::string> raw_lines();
  // Waits up to `timeout` until at least n lines arrived; returns what arrived.
  std::vector<nlohmann::json> wait_lines(
      size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  void run();
  std::string answer(const nlohmann::json& line) const;

  std::string path_;
  Mode mode_;
  std::string given_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<nlohmann::json> lines_;
  std::vector<std::string> raw_lines_;
  std::thread thread_;
};

}  // namespace dripgate::testing
