// dripgate-control end to end: the real daemon binary as a subprocess, a real redis-server,
// HTTP over a real socket. The dataplane peer is a minimal unix-socket server in this test that
// records the lines it receives and answers like the dataplane's control protocol.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/http_client.h"
#include "tests/line_peer.h"
#include "tests/redis_server.h"

namespace {

using json = nlohmann::json;
using dripgate::testing::free_port;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::RedisServer;
using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dripgate-http-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string test_config(const std::string& dp_socket, const std::string& auth_token = "") {
  std::string auth = auth_token.empty() ? "" : ", auth_token: \"" + auth_token + "\"";
  return R"(redis: { url: "redis://127.0.0.1:1/0", timeout_ms: 200 }
control: { listen: "127.0.0.1:8080", threads: 2, dataplane_socket: ")" +
         dp_socket + "\"" + auth + R"( }
plans:
  small:
    class: gold
    gates:
      tenant: { capacity: 2, refill_per_s: 0.5 }
    quota: { tokens_per_month: 1000 }
  big:
    class: silver
    gates:
      tenant: { capacity: 1000000, refill_per_s: 100000 }
tenants:
  t-small: { plan: small }
  t-big: { plan: big }
)";
}

// The daemon under test: started on free ports, stopped with SIGTERM (SIGKILL if it hangs).
class Daemon {
 public:
  Daemon(const RedisServer& redis, const TempDir& dir, const std::string& config_yaml)
      : port_(free_port()), log_(dir.path() + "/daemon.log") {
    std::string cfg = dir.path() + "/control.yaml";
    std::ofstream(cfg) << config_yaml;
    pid_ = fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, 2);
      std::string listen = "127.0.0.1:" + std::to_string(port_);
      execl(DRIPGATE_CONTROL_BIN, DRIPGATE_CONTROL_BIN, "--config", cfg.c_str(), "--redis",
            redis.url().c_str(), "--listen", listen.c_str(), "--log-level", "debug", nullptr);
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (http(port_, "GET", "/healthz").status == 200) return;
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "daemon did not become ready; log:\n" << log();
  }
  ~Daemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // SIGTERM and the exit status (-1: did not exit within 10 s).
  int terminate() {
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  int port_;
  std::string log_;
  pid_t pid_ = -1;
};

class HttpTest : public ::testing::Test {
 protected:
  HttpTest() : dp_socket_(dir_.path() + "/dp.sock") {}
  void start(const std::string& auth = "") {
    daemon_ = std::make_unique<Daemon>(redis_, dir_, test_config(dp_socket_, auth));
  }
  HttpResponse admit(const std::string& body, const std::vector<std::string>& extra = {}) {
    return http(daemon_->port(), "POST", "/v1/admit", body, extra);
  }
  std::string metrics() { return http(daemon_->port(), "GET", "/metrics").body; }

  RedisServer redis_;
  TempDir dir_;
  std::string dp_socket_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(HttpTest, BadInputIs400NamingTheFieldAndTheDaemonKeepsServing) {
  start();
  struct Case {
    std::string body, field;
  };
  std::vector<Case> cases = {
      {"{not json", "JSON"},
      {"[]", "object"},
      {R"({"tenant":"t big"})", "tenant"},
      {R"({"tenant":"t-big","user":"../x"})", "user"},
      {R"({"tenant":"t-big","tool":"a{b}"})", "tool"},
      {R"({"tenant":"t-big","tokens":-5})", "tokens"},
      {R"({"tenant":"t-big","tokens":2.5})", "tokens"},
      {R"({"tenant":"t-big","tokens":"7"})", "tokens"},
      {R"({"tenant":"t-big","flow":{"src":"1.2.3.4"}})", "flow."},
      {R"({"tenant":"no-such-tenant"})", "tenant"},
      {R"({"tenant":"t-big","colour":"red"})", "colour"},
  };
  for (const auto& c : cases) {
    auto r = admit(c.body);
    EXPECT_EQ(r.status, 400) << c.body << " -> " << r.body;
    auto j = r.body_json();
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_NE(j["error"].get<std::string>().find(c.field), std::string::npos)
        << c.body << " -> " << r.body;
  }
  auto s = http(daemon_->port(), "POST", "/v1/settle", R"({"request_id":"x","tokens":-1})");
  EXPECT_EQ(s.status, 400);
  EXPECT_NE(s.body.find("tokens"), std::string::npos);
  auto rel = http(daemon_->port(), "POST", "/v1/release", R"({"request_id":"a b"})");
  EXPECT_EQ(rel.status, 400);
  EXPECT_NE(rel.body.find("request_id"), std::string::npos);
  // Oversized bodies are cut off by evhttp.
  EXPECT_EQ(admit(std::string(100 * 1024, ' ')).status, 413);
  EXPECT_EQ(http(daemon_->port(), "GET", "/v1/admit").status, 405);
  EXPECT_EQ(http(daemon_->port(), "GET", "/nope").status, 404);

  auto ok = admit(R"({"tenant":"t-big","user":"u1","tokens":10})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  auto j = ok.body_json();
  EXPECT_EQ(j["allowed"], true);
  EXPECT_EQ(j["class"], "silver");
  EXPECT_TRUE(j["request_id"].is_string());
  EXPECT_TRUE(j["remaining"].contains("tenant"));
}

TEST_F(HttpTest, RefusalCarriesRetryAfterAndRateLimitHeaders) {
  start();
  auto a1 = admit(R"({"tenant":"t-small","tokens":100})");
  auto a2 = admit(R"({"tenant":"t-small","tokens":100})");
  ASSERT_EQ(a1.status, 200) << a1.body;
  ASSERT_EQ(a2.status, 200) << a2.body;
  EXPECT_EQ(a1.header("ratelimit-policy"),
            "\"tenant\";q=2;w=4, \"quota\";q=1000;qu=\"tokens\";w=" +
                a1.header("ratelimit-policy").substr(a1.header("ratelimit-policy").rfind('=') + 1));
  EXPECT_EQ(a1.body_json()["remaining"]["quota"], 900);
  auto r = admit(R"({"tenant":"t-small","tokens":100})");
  ASSERT_EQ(r.status, 429) << r.body;
  auto j = r.body_json();
  EXPECT_EQ(j["allowed"], false);
  EXPECT_EQ(j["gate"], "tenant");
  EXPECT_EQ(j["reason"], "rate");
  int64_t ms = j["retry_after_ms"].get<int64_t>();
  // Two tokens gone at 0.5/s: about 2 s until one is back.
  EXPECT_GT(ms, 1000);
  EXPECT_LE(ms, 2000);
  EXPECT_EQ(r.header("retry-after"), std::to_string((ms + 999) / 1000));
  EXPECT_NE(r.header("ratelimit-policy").find("\"tenant\";q=2;w=4"), std::string::npos)
      << r.header("ratelimit-policy");
  EXPECT_NE(r.header("ratelimit").find("\"tenant\";r=0;t="), std::string::npos)
      << r.header("ratelimit");
  // A refusal leaves no trace: the quota still shows 800.
  EXPECT_EQ(j["remaining"]["quota"], 800);
  EXPECT_NE(
      metrics().find(
          "dripgate_admissions_total{tenant=\"t-small\",gate=\"tenant\",result=\"refused\"} 1"),
      std::string::npos);
}

TEST_F(HttpTest, SettleReplacesTheReservation) {
  start();
  auto a = admit(R"({"tenant":"t-small","tokens":300})");
  ASSERT_EQ(a.status, 200) << a.body;
  std::string rid = a.body_json()["request_id"];
  std::string body = R"({"tenant":"t-small","request_id":")" + rid + R"(","tokens":120})";
  auto s1 = http(daemon_->port(), "POST", "/v1/settle", body);
  ASSERT_EQ(s1.status, 200) << s1.body;
  EXPECT_EQ(s1.body_json()["settled"], true);
  EXPECT_EQ(s1.body_json()["charged"], 120);
  EXPECT_EQ(s1.body_json()["remaining"], 880);
  auto s2 = http(daemon_->port(), "POST", "/v1/settle", body);
  ASSERT_EQ(s2.status, 200) << s2.body;
  EXPECT_EQ(s2.body_json()["settled"], false);
  EXPECT_EQ(s2.body_json()["remaining"], 880);
}

TEST_F(HttpTest, RedisStoppedIs503ThenRecovers) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  redis_.stop();
  auto r = admit(R"({"tenant":"t-big"})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(r.body_json().contains("error")) << r.body;
  auto h = http(daemon_->port(), "GET", "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body_json()["redis"], "down") << h.body;
  EXPECT_NE(metrics().find("dripgate_redis_up 0"), std::string::npos);
  redis_.start();
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < deadline) {
    status = admit(R"({"tenant":"t-big"})").status;
    if (status == 200) break;
    EXPECT_EQ(status, 503);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(status, 200) << daemon_->log();
}

TEST_F(HttpTest, HealthzAndMetrics) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big","user":"u"})").status, 200);
  auto h = http(daemon_->port(), "GET", "/healthz");
  ASSERT_EQ(h.status, 200);
  EXPECT_EQ(h.body_json()["status"], "ok");
  EXPECT_EQ(h.body_json()["redis"], "up");
  auto m = http(daemon_->port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.header("content-type").rfind("text/plain; version=0.0.4", 0), 0u);
  for (const char* want :
       {"dripgate_admissions_total{tenant=\"t-big\",gate=\"\",result=\"allowed\"} 1\n",
        "# TYPE dripgate_redis_round_trip_seconds histogram\n",
        "dripgate_redis_round_trip_seconds_bucket{le=\"+Inf\"} ", "dripgate_redis_up 1\n",
        "dripgate_http_requests_total{code=\"200\"} "}) {
    EXPECT_NE(m.body.find(want), std::string::npos) << want << "\n" << m.body;
  }
}

TEST_F(HttpTest, BearerAuthWhenConfigured) {
  start("s3cret");
  auto none = admit(R"({"tenant":"t-big"})");
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(none.body_json().contains("error"));
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer s3cre"}).status, 401);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer s3cret"}).status, 200);
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
}

TEST_F(HttpTest, SigtermExitsZero) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  EXPECT_EQ(daemon_->terminate(), 0) << daemon_->log();
}

TEST_F(HttpTest, SigtermLetsTheRequestInFlightFinish) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  // Redis busy in a script for 0.6 s: the next admission waits, then times out (200 ms) -> 503.
  std::thread busy([this] {
    redis_.cli(
        "EVAL \"local t0 = redis.call('TIME') local s = t0[1] * 1e6 + t0[2] repeat local t = "
        "redis.call('TIME') until t[1] * 1e6 + t[2] - s > 600000 return 1\" 0");
  });
  std::this_thread::sleep_for(100ms);
  HttpResponse inflight;
  std::thread client([&] { inflight = admit(R"({"tenant":"t-big"})"); });
  std::this_thread::sleep_for(50ms);
  int rc = daemon_->terminate();
  client.join();
  busy.join();
  EXPECT_EQ(rc, 0) << daemon_->log();
  EXPECT_EQ(inflight.status, 503) << inflight.body;
  EXPECT_TRUE(inflight.body_json().contains("error")) << inflight.body;
}

// Runs a command, returns its exit status and (merged) output.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(Check, ValidatesAndPrintsEveryErrorWithItsPosition) {
  TempDir dir;
  std::string good = dir.path() + "/good.yaml", bad = dir.path() + "/bad.yaml";
  std::ofstream(good) << test_config("/tmp/x.sock");
  std::ofstream(bad) << "plans:\n  p: { gates: { tenant: { capacity: -1, refill_per_s: 1 } } }\n"
                        "tenants:\n  t: { plan: missing }\n";
  auto [rc_ok, out_ok] = run(std::string(DRIPGATE_CONTROL_BIN) + " --check --config " + good);
  EXPECT_EQ(rc_ok, 0) << out_ok;
  auto [rc_default, out_default] = run(std::string(DRIPGATE_CONTROL_BIN) + " --check");
  EXPECT_EQ(rc_default, 0) << out_default;
  auto [rc, out] = run(std::string(DRIPGATE_CONTROL_BIN) + " --check --config " + bad);
  EXPECT_EQ(rc, 1) << out;
  // file:line:col: path: message, one line per error.
  EXPECT_NE(out.find(bad + ":2:"), std::string::npos) << out;
  EXPECT_NE(out.find("capacity"), std::string::npos) << out;
  EXPECT_NE(out.find(bad + ":4:"), std::string::npos) << out;
  EXPECT_NE(out.find("missing"), std::string::npos) << out;
}

// --redis goes through the loader's URL parser (ACL users accepted) and never echoes a password.
TEST(Check, RedisOverrideIsValidatedAndItsPasswordMasked) {
  std::string bin = DRIPGATE_CONTROL_BIN;
  auto [rc_ok, out_ok] = run(bin + " --check --redis redis://gateway:s3cret@127.0.0.1:6379/1");
  EXPECT_EQ(rc_ok, 0) << out_ok;
  auto [rc, out] = run(bin + " --check --redis redis://gateway:s3cret@127.0.0.1:0");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--redis: bad redis URL 'redis://gateway:***@127.0.0.1:0': bad port '0'"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("s3cret"), std::string::npos) << out;
  // --print-config shows the configuration in force, without its secrets.
  auto [rc_print, out_print] =
      run(bin + " --print-config --redis redis://gateway:s3cret@127.0.0.1:6390/2");
  EXPECT_EQ(rc_print, 0) << out_print;
  EXPECT_NE(out_print.find("url: \"redis://gateway:***@127.0.0.1:6390/2\""), std::string::npos)
      << out_print;
  EXPECT_EQ(out_print.find("s3cret"), std::string::npos) << out_print;
  auto [rc_listen, out_listen] = run(bin + " --check --listen 127.0.0.1");
  EXPECT_EQ(rc_listen, 1) << out_listen;
  EXPECT_NE(out_listen.find("--listen: bad listen address '127.0.0.1': missing ':port'"),
            std::string::npos)
      << out_listen;
}

TEST_F(HttpTest, AdmittedFlowIsTaggedAndReleaseUntagsIt) {
  dripgate::testing::LinePeer peer(dp_socket_);
  start();
  auto a = admit(
      R"({"tenant":"t-small","flow":{"src":"10.0.0.1","sport":40000,"dst":"10.9.0.2","dport":443,"proto":"tcp"}})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.header("dripgate-flow-tag"), "ok");
  auto lines = peer.wait_lines(1);
  ASSERT_EQ(lines.size(), 1u);
  json flow =
      json::parse(R"({"src":"10.0.0.1","sport":40000,"dst":"10.9.0.2","dport":443,"proto":6})");
  EXPECT_EQ(lines[0]["op"], "tag");
  EXPECT_EQ(lines[0]["class"], "gold");
  EXPECT_EQ(lines[0]["flow"], flow);
  EXPECT_GT(lines[0]["ttl_s"].get<int>(), 0);

  std::string rid = a.body_json()["request_id"];
  auto rel = http(daemon_->port(), "POST", "/v1/release",
                  R"({"tenant":"t-small","request_id":")" + rid + "\"}");
  ASSERT_EQ(rel.status, 200) << rel.body;
  lines = peer.wait_lines(2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["op"], "untag");
  EXPECT_EQ(lines[1]["flow"], flow);
  EXPECT_NE(metrics().find("dripgate_dataplane_tag_total{result=\"ok\"} 1\n"), std::string::npos);

  // A refused admission tags nothing.
  admit(R"({"tenant":"t-small"})");
  auto refused = admit(
      R"({"tenant":"t-small","flow":{"src":"10.0.0.1","sport":40001,"dst":"10.9.0.2","dport":443,"proto":"udp"}})");
  EXPECT_EQ(refused.status, 429);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(peer.lines().size(), 2u);
}

TEST_F(HttpTest, AdmissionWorksWithoutTheDataplane) {
  start();  // nothing listens on dp_socket_
  for (int i = 0; i < 3; ++i) {
    auto a = admit(
        R"({"tenant":"t-big","flow":{"src":"::1","sport":1000,"dst":"::2","dport":80,"proto":17}})");
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.header("dripgate-flow-tag"), "unavailable");
  }
  EXPECT_NE(metrics().find("dripgate_dataplane_tag_total{result=\"unavailable\"} 3\n"),
            std::string::npos)
      << metrics();
  // Logged once per outage per worker, not once per request.
  std::string log = daemon_->log();
  size_t count = 0;
  for (size_t p = log.find("dataplane: cannot connect"); p != std::string::npos;
       p = log.find("dataplane: cannot connect", p + 1))
    ++count;
  EXPECT_GE(count, 1u);
  EXPECT_LE(count, 2u);  // two worker threads

  // The dataplane appears: the next admission tags (after the reconnect back-off).
  dripgate::testing::LinePeer peer(dp_socket_);
  std::string tag;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline && tag != "ok") {
    tag =
        admit(
            R"({"tenant":"t-big","flow":{"src":"::1","sport":1001,"dst":"::2","dport":80,"proto":"udp"}})")
            .header("dripgate-flow-tag");
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(tag, "ok");
}

}  // namespace
