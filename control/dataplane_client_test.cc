// DataplaneClient against a real unix stream socket served by this test (a peer that records
// lines and answers, or stays silent), driven by a real libevent loop.
#include "control/dataplane_client.h"

#include <event2/event.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "control/metrics.h"

namespace dripgate::control {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

enum class Mode { kAnswerOk, kAnswerError, kSilent };

class Peer {
 public:
  Peer(const std::string& path, Mode mode) : path_(path), mode_(mode) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    unlink(path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    thread_ = std::thread([this] { run(); });
  }
  ~Peer() {
    stop_ = true;
    thread_.join();
    close(fd_);
    unlink(path_.c_str());
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  void run() {
    int conn = -1;
    std::string buf;
    while (!stop_) {
      pollfd p{conn >= 0 ? conn : fd_, POLLIN, 0};
      if (poll(&p, 1, 10) <= 0) continue;
      if (conn < 0) {
        conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        continue;
      }
      char tmp[1024];
      ssize_t n = recv(conn, tmp, sizeof tmp, 0);
      if (n <= 0) {
        close(conn);
        conn = -1;
        continue;
      }
      buf.append(tmp, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        {
          std::lock_guard lock(mu_);
          lines_.push_back(buf.substr(0, nl));
        }
        buf.erase(0, nl + 1);
        const char* answer = mode_ == Mode::kAnswerOk      ? "{\"ok\":true}\n"
                             : mode_ == Mode::kAnswerError ? "{\"ok\":false,\"error\":\"no\"}\n"
                                                           : nullptr;
        if (answer) send(conn, answer, std::strlen(answer), MSG_NOSIGNAL);
      }
    }
    if (conn >= 0) close(conn);
  }

  std::string path_;
  Mode mode_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

class DataplaneClientTest : public ::testing::Test {
 protected:
  DataplaneClientTest() {
    char tmpl[] = "/tmp/dripgate-dpc-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/dp.sock";
    base_ = event_base_new();
  }
  ~DataplaneClientTest() override {
    event_base_free(base_);
    std::filesystem::remove_all(dir_);
  }
  // Runs the loop until the call completes (or 3 s pass) and returns its result.
  template <typename Call>
  std::string complete(Call call) {
    std::string result;
    bool done = false;
    call([&](const std::string& r) {
      result = r;
      done = true;
    });
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!done && std::chrono::steady_clock::now() < deadline)
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK), std::this_thread::sleep_for(1ms);
    return done ? result : "<no result>";
  }

  Flow flow() const {
    Flow f;
    f.src = "10.0.0.1";
    f.dst = "10.0.0.2";
    f.sport = 1234;
    f.dport = 443;
    f.proto = 6;
    return f;
  }

  std::string dir_, path_;
  event_base* base_ = nullptr;
  Metrics metrics_;
};

TEST_F(DataplaneClientTest, TagAndUntagSpeakTheProtocol) {
  Peer peer(path_, Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 120, done); }), "ok");
  EXPECT_TRUE(c.connected());
  EXPECT_EQ(complete([&](auto done) { c.untag(flow(), done); }), "ok");
  auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 2u);
  json f = {
      {"src", "10.0.0.1"}, {"sport", 1234}, {"dst", "10.0.0.2"}, {"dport", 443}, {"proto", 6}};
  EXPECT_EQ(json::parse(lines[0]),
            (json{{"op", "tag"}, {"flow", f}, {"class", "gold"}, {"ttl_s", 120}}));
  EXPECT_EQ(json::parse(lines[1]), (json{{"op", "untag"}, {"flow", f}}));
  EXPECT_EQ(metrics_.dataplane_tags().value({"ok"}), 1u);
  EXPECT_EQ(metrics_.dataplane_untags().value({"ok"}), 1u);
}

TEST_F(DataplaneClientTest, RefusalIsAnError) {
  Peer peer(path_, Mode::kAnswerError);
  DataplaneClient c(base_, path_, &metrics_);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "nope", 1, done); }), "error");
  EXPECT_EQ(metrics_.dataplane_tags().value({"error"}), 1u);
}

TEST_F(DataplaneClientTest, AbsentSocketIsUnavailableAndReconnectsLater) {
  DataplaneClient c(base_, path_, &metrics_);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, done); }), "unavailable");
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, done); }), "unavailable");
  EXPECT_EQ(metrics_.dataplane_tags().value({"unavailable"}), 2u);
  Peer peer(path_, Mode::kAnswerOk);
  std::this_thread::sleep_for(250ms);  // past the reconnect back-off
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, done); }), "ok");
}

TEST_F(DataplaneClientTest, SilentPeerTimesOutAndTheNextCallReconnects) {
  {
    Peer peer(path_, Mode::kSilent);
    DataplaneClient c(base_, path_, &metrics_, /*timeout_ms=*/50);
    EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, done); }), "timeout");
    EXPECT_FALSE(c.connected());
    EXPECT_EQ(metrics_.dataplane_tags().value({"timeout"}), 1u);
  }
  Peer peer(path_, Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, done); }), "ok");
}

TEST_F(DataplaneClientTest, PeerGoingAwayFailsPendingCalls) {
  DataplaneClient c(base_, path_, &metrics_, /*timeout_ms=*/2000);
  std::string result;
  {
    Peer peer(path_, Mode::kSilent);
    bool done = false;
    c.tag(flow(), "gold", 1, [&](const std::string& r) {
      result = r;
      done = true;
    });
    for (int i = 0; i < 50 && peer.lines().empty(); ++i) {
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
      std::this_thread::sleep_for(2ms);
    }
    ASSERT_EQ(peer.lines().size(), 1u);
  }  // the peer closes its connection
  for (int i = 0; i < 500 && result.empty(); ++i) {
    event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(result, "unavailable");
}

TEST(FlowRegistry, RemembersAndForgetsOldestFirst) {
  FlowRegistry r(2);
  Flow a, b, c;
  a.sport = 1;
  b.sport = 2;
  c.sport = 3;
  r.put("a", a);
  r.put("b", b);
  r.put("c", c);  // evicts "a"
  EXPECT_EQ(r.size(), 2u);
  EXPECT_FALSE(r.take("a"));
  auto got = r.take("b");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sport, 2);
  EXPECT_FALSE(r.take("b"));  // taken once
  EXPECT_EQ(r.take("c")->sport, 3);
  EXPECT_EQ(r.size(), 0u);
}

}  // namespace
}  // namespace dripgate::control
