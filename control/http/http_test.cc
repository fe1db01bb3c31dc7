// dripgate-control end to end: the real daemon binary as a subprocess, a real redis-server,
// HTTP over a real socket. The dataplane peer is a minimal unix-socket server in this test that
// records the lines it receives and answers like the dataplane's control protocol.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/http_client.h"
#include "tests/hung_mount.h"
#include "tests/line_peer.h"
#include "tests/metrics_server.h"
#include "tests/redis_server.h"

namespace {

using json = nlohmann::json;
using dripgate::testing::free_port;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::HungMount;
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

// What a test changes in the daemon's configuration and process.
struct DaemonSetup {
  std::string auth_token{};     // none when empty
  std::string control_extra{};  // more keys of the control map, e.g. ", max_connections: 4"
  int threads = 2;
  int redis_timeout_ms = 200;
  rlim_t nofile = 0;  // the daemon's open-file limit (0: this process's)
};

std::string test_config(const std::string& dp_socket, const DaemonSetup& s = {}) {
  std::string extra = s.auth_token.empty() ? "" : ", auth_token: \"" + s.auth_token + "\"";
  extra += s.control_extra;
  return R"(redis: { url: "redis://127.0.0.1:1/0", timeout_ms: )" +
         std::to_string(s.redis_timeout_ms) + R"( }
control: { listen: "127.0.0.1:8080", threads: )" +
         std::to_string(s.threads) + ", dataplane_socket: \"" + dp_socket + "\"" + extra + R"( }
plans:
  small:
    class: gold
    gates:
      tenant: { capacity: 2, refill_per_s: 0.5 }
    quota: { tokens_per_month: 1000 }
    degrade: { model: small-model, upgrade_url: "https://billing.example/up" }
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
  // nofile: the daemon's open-file limit (0: this process's).
  Daemon(const RedisServer& redis, const TempDir& dir, const std::string& config_yaml,
         rlim_t nofile = 0)
      : port_(free_port()), log_(dir.path() + "/daemon.log") {
    std::string cfg = dir.path() + "/control.yaml";
    std::ofstream(cfg) << config_yaml;
    pid_ = fork();
    if (pid_ == 0) {
      rlimit files{nofile, nofile};
      if (nofile > 0) setrlimit(RLIMIT_NOFILE, &files);
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, 2);
      std::string listen = "127.0.0.1:" + std::to_string(port_);
      // DRIPGATE_TEST_NO_IO_URING (control/meson.build's http_syscalls_test): the same tests
      // with a read() and a send() per connection instead of io_uring batches.
      execl(DRIPGATE_CONTROL_BIN, DRIPGATE_CONTROL_BIN, "--config", cfg.c_str(), "--redis",
            redis.url().c_str(), "--listen", listen.c_str(), "--log-level", "debug",
            std::getenv("DRIPGATE_TEST_NO_IO_URING") ? "--no-io-uring" : nullptr, nullptr);
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      // Serving: /healthz answers (503 "down" while Redis is away under on_failure closed).
      if (http(port_, "GET", "/healthz").status != 0) {
        dripgate::testing::await_redis(port_);
        return;
      }
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

// A metric's value in a /metrics answer (-1 when absent).
int64_t metric_in(const std::string& exposition, const std::string& name) {
  auto at = exposition.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stoll(exposition.substr(at + name.size() + 2));
}

class HttpTest : public ::testing::Test {
 protected:
  HttpTest() : dp_socket_(dir_.path() + "/dp.sock") {}
  void start(const DaemonSetup& setup = {}) {
    daemon_ = std::make_unique<Daemon>(redis_, dir_, test_config(dp_socket_, setup), setup.nofile);
  }
  // A metric's value as the daemon reports it (-1 when absent).
  int64_t metric(const std::string& name) { return metric_in(metrics(), name); }
  HttpResponse admit(const std::string& body, const std::vector<std::string>& extra = {}) {
    return http(daemon_->port(), "POST", "/v1/admit", body, extra);
  }
  std::string metrics() { return http(daemon_->port(), "GET", "/metrics").body; }
  // Releases a request whose untag is the peer's line n: that line's flow (null when the release
  // failed or sent no untag).
  json release(dripgate::testing::LinePeer& peer, const std::string& tenant,
               const std::string& request_id, size_t n) {
    auto rel = http(daemon_->port(), "POST", "/v1/release",
                    json({{"tenant", tenant}, {"request_id", request_id}}).dump());
    EXPECT_EQ(rel.status, 200) << rel.body;
    const auto lines = peer.wait_lines(n);
    if (lines.size() != n || lines[n - 1].value("op", "") != "untag") {
      ADD_FAILURE() << "no untag as line " << n;
      return nullptr;
    }
    return lines[n - 1]["flow"];
  }

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
      {R"({"tenant":"t-big","tenant":"t-small"})", "tenant: duplicate key"},
      {R"({"tenant":"t-big","max_wait_ms":-1})", "max_wait_ms"},
      {R"({"tenant":"t-big","max_wait_ms":300001})", "max_wait_ms: too large"},
      {R"({"tenant":"t-big","max_wait_ms":"1s"})", "max_wait_ms"},
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
  // Oversized bodies are refused (413).
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

// A spent quota: retrying does not help; the client is told what is missing, when the quota
// resets and the plan's fallback.
TEST_F(HttpTest, QuotaRefusalSaysStopWithWhatIsMissingAndTheFallback) {
  start();
  auto r = admit(R"({"tenant":"t-small","tokens":1300})");
  ASSERT_EQ(r.status, 429) << r.body;
  auto j = r.body_json();
  EXPECT_EQ(j["reason"], "quota");
  const auto& g = j["guidance"];
  EXPECT_EQ(g["action"], "stop") << r.body;
  EXPECT_EQ(g["retry"], false);
  EXPECT_EQ(g["tokens_missing"], 300);
  EXPECT_EQ(g["fallback_model"], "small-model");
  EXPECT_EQ(g["upgrade_url"], "https://billing.example/up");
  // The month ends within 31 days, on the hour, at 00:00 on the first (UTC).
  EXPECT_GT(g["resets_in_s"].get<int64_t>(), 0);
  EXPECT_LE(g["resets_in_s"].get<int64_t>(), 31 * 86400);
  EXPECT_EQ(g["resets_at"].get<std::string>().substr(7), "-01T00:00:00Z") << r.body;
  EXPECT_NE(g["message"].get<std::string>().find("Use model small-model instead."),
            std::string::npos);
  // Nothing was charged: the whole quota is still there.
  auto ok = admit(R"({"tenant":"t-small","tokens":1000})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_FALSE(ok.body_json().contains("guidance"));
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
  EXPECT_EQ(j["guidance"]["action"], "backoff") << r.body;
  EXPECT_EQ(j["guidance"]["backoff"]["initial_ms"], ms) << r.body;
  EXPECT_NE(metrics().find("dripgate_admissions_total{tenant=\"t-small\",gate=\"tenant\",result="
                           "\"refused\",front=\"http\"} 1"),
            std::string::npos);
}

// The ip and total gates are named in the 429, its headers and the metrics like every gate.
TEST_F(HttpTest, IpAndTotalGatesAreNamedInTheRefusalHeadersAndMetrics) {
  std::string yaml = test_config(dp_socket_);
  yaml.replace(yaml.find("tenants:\n"), 9,
               "  per-ip: { gates: { ip: { capacity: 1, refill_per_s: 0.001 } } }\n"
               "tenants:\n  t-ip: { plan: per-ip }\n");
  yaml += "global_gates: { total: { capacity: 3, refill_per_s: 0.001 } }\n";
  daemon_ = std::make_unique<Daemon>(redis_, dir_, yaml);
  auto a = admit(R"({"tenant":"t-ip","client_ip":"192.0.2.10"})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.header("ratelimit-policy"), "\"ip\";q=1;w=1000, \"total\";q=3;w=3000");
  EXPECT_EQ(a.body_json()["remaining"]["total"], 2);
  // The same address written as IPv4-mapped IPv6: the same bucket, now empty.
  auto r = admit(R"({"tenant":"t-ip","client_ip":"::ffff:192.0.2.10"})");
  ASSERT_EQ(r.status, 429) << r.body;
  auto j = r.body_json();
  EXPECT_EQ(j["gate"], "ip");
  EXPECT_EQ(j["reason"], "rate");
  EXPECT_EQ(j["guidance"]["action"], "backoff");
  EXPECT_EQ(r.header("retry-after"),
            std::to_string((j["retry_after_ms"].get<int64_t>() + 999) / 1000));
  EXPECT_NE(r.header("ratelimit").find("\"ip\";r=0;t="), std::string::npos)
      << r.header("ratelimit");
  // Refused by ip in the tenant's call: the total gate's call, sent beside it, gave its token
  // back (the level the first admission left).
  EXPECT_EQ(j["remaining"]["total"], 2) << r.body;
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  ASSERT_EQ(admit(R"({"tenant":"t-small"})").status, 200);
  auto t = admit(R"({"tenant":"t-big","client_ip":"2001:db8::1"})");
  ASSERT_EQ(t.status, 429) << t.body;
  EXPECT_EQ(t.body_json()["gate"], "total");
  EXPECT_EQ(t.body_json()["reason"], "rate");
  EXPECT_NE(t.header("ratelimit").find("\"total\";r=0;t="), std::string::npos)
      << t.header("ratelimit");
  EXPECT_FALSE(t.header("retry-after").empty());
  // A bad address is a 400 naming client_ip.
  for (const char* bad :
       {R"({"tenant":"t-ip","client_ip":"192.0.2.300"})", R"({"tenant":"t-ip","client_ip":""})",
        R"({"tenant":"t-ip","client_ip":3221225994})"}) {
    auto b = admit(bad);
    EXPECT_EQ(b.status, 400) << bad << " -> " << b.body;
    EXPECT_EQ(b.body_json()["error"], "client_ip: must be an IPv4 or IPv6 address") << b.body;
  }
  const std::string m = metrics();
  for (const char* want :
       {"dripgate_admissions_total{tenant=\"t-ip\",gate=\"ip\",result=\"refused\",front=\"http\"} "
        "1\n",
        "dripgate_admissions_total{tenant=\"t-big\",gate=\"total\",result=\"refused\",front="
        "\"http\"} 1\n"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
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

// A stream end to end: the token-rate gates in the admission's answer and headers, charges
// as it goes, 429 quota on the crossing charge, the settle's total, 409 after it, 404 for an
// unknown request, 400 naming the field, and the charges counted in /metrics.
TEST_F(HttpTest, StreamChargesThenSettle) {
  std::string yaml = test_config(dp_socket_);
  yaml.replace(yaml.find("tenants:\n"), 9,
               "  tok:\n"
               "    gates: { tenant_tokens: { capacity: 5000, refill_per_s: 1 } }\n"
               "    quota: { tokens_per_month: 1000 }\n"
               "tenants:\n  t-tok: { plan: tok }\n");
  yaml += "global_gates: { model_tokens: { mt: { capacity: 5000, refill_per_s: 1 } } }\n";
  daemon_ = std::make_unique<Daemon>(redis_, dir_, yaml);
  auto a = admit(R"({"tenant":"t-tok","model":"mt","tokens":300})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_NE(a.header("ratelimit").find("\"tenant_tokens\";r=4700"), std::string::npos)
      << a.header("ratelimit");
  EXPECT_NE(a.header("ratelimit").find("\"model_tokens\";r=4700"), std::string::npos)
      << a.header("ratelimit");
  std::string rid = a.body_json()["request_id"];
  auto charge = [&](int tokens, const std::string& id) {
    return http(daemon_->port(), "POST", "/v1/charge",
                R"({"tenant":"t-tok","model":"mt","request_id":")" + id + R"(","tokens":)" +
                    std::to_string(tokens) + "}");
  };
  auto c1 = charge(200, rid);
  ASSERT_EQ(c1.status, 200) << c1.body;
  EXPECT_EQ(c1.body_json()["charged"], 500);
  EXPECT_EQ(c1.body_json()["remaining"]["quota"], 500) << c1.body;
  auto c2 = charge(600, rid);
  ASSERT_EQ(c2.status, 429) << c2.body;
  EXPECT_EQ(c2.body_json()["reason"], "quota");
  EXPECT_EQ(c2.body_json()["charged"], 1100);
  EXPECT_FALSE(c2.header("retry-after").empty());
  auto s = http(daemon_->port(), "POST", "/v1/settle",
                R"({"tenant":"t-tok","model":"mt","request_id":")" + rid + R"(","tokens":1200})");
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.body_json()["charged"], 1200);
  EXPECT_EQ(charge(5, rid).status, 409);
  EXPECT_EQ(charge(5, "t-tok.0123456789abcdef").status, 404);
  auto bad = http(daemon_->port(), "POST", "/v1/charge", R"({"request_id":"x","tokens":-1})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("tokens"), std::string::npos) << bad.body;
  auto m = metrics();
  for (const char* want : {"dripgate_charges_total{tenant=\"t-tok\",result=\"allowed\"} 1\n",
                           "dripgate_charges_total{tenant=\"t-tok\",result=\"refused\"} 1\n",
                           "dripgate_charges_total{tenant=\"t-tok\",result=\"conflict\"} 1\n",
                           "dripgate_charges_total{tenant=\"t-tok\",result=\"not_found\"} 1\n"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
}

TEST_F(HttpTest, RedisStoppedIs503ThenRecovers) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  redis_.stop();
  auto r = admit(R"({"tenant":"t-big"})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(r.body_json().contains("error")) << r.body;
  // redis.on_failure closed (the default): the box cannot admit, and says so.
  auto h = http(daemon_->port(), "GET", "/healthz");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body_json()["status"], "down") << h.body;
  EXPECT_EQ(h.body_json()["mode"], "closed") << h.body;
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
       {"dripgate_admissions_total{tenant=\"t-big\",gate=\"\",result=\"allowed\",front=\"http\"} "
        "1\n",
        "# TYPE dripgate_redis_round_trip_seconds histogram\n",
        "dripgate_redis_round_trip_seconds_bucket{le=\"+Inf\"} ", "dripgate_redis_up 1\n",
        "dripgate_http_requests_total{code=\"200\"} "}) {
    EXPECT_NE(m.body.find(want), std::string::npos) << want << "\n" << m.body;
  }
}

TEST_F(HttpTest, BearerAuthWhenConfigured) {
  start({.auth_token = "s3cret"});
  auto none = admit(R"({"tenant":"t-big"})");
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(none.body_json().contains("error"));
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer s3cre"}).status, 401);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", {"Authorization: Bearer s3cret"}).status, 200);
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
}

// Per-tenant API keys (control.auth: tenant_keys): a tenant's own key admits, settles and
// releases; another tenant's is a 403 and an unknown or missing one a 401, answered before the
// gateway (no Redis key is touched, nothing charged); the shared token stays the trusted proxy's;
// a registry tenant's key added, rotated and revoked over the admin API; control.metrics_token
// guards /metrics and /healthz. No key reaches an answer or the log.
TEST_F(HttpTest, TenantKeysActOnlyAsTheirOwnTenant) {
  const std::vector<std::string> big{"Authorization: Bearer key-of-big"},
      small{"Authorization: Bearer key-of-small"}, proxy{"Authorization: Bearer pr0xy"},
      admin{"Authorization: Bearer adm1n"};
  std::string cfg = test_config(
      dp_socket_, {.control_extra = ", auth: tenant_keys, auth_token: \"pr0xy\", admin_token: "
                                    "\"adm1n\", metrics_token: \"m3trics\""});
  auto with_key = [&](const std::string& line, const std::string& digest) {
    cfg.replace(cfg.find(line), line.size(),
                line.substr(0, line.size() - 2) + ", keys_sha256: [\"" + digest + "\"] }");
  };
  with_key("t-small: { plan: small }",
           "a2ea8f6b28c5a3a9311292caca3cc09fafb29097823ce68c26867cb40d30c849");
  with_key("t-big: { plan: big }",
           "6CE3B5D29C994A9A2B1088F81C9B358596E24D11884A8D3D7AA39BFE3B29D5A5\"], flows_from: "
           "[\"10.1.0.0/16\", \"2001:db8::/48");
  daemon_ = std::make_unique<Daemon>(redis_, dir_, cfg);
  const int port = daemon_->port();

  auto none = admit(R"({"tenant":"t-small"})");
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(none.body_json()["error"],
            "missing API key (Authorization: Bearer <a key of tenant 't-small'>)");
  EXPECT_EQ(admit(R"({"tenant":"t-small"})", {"Authorization: Bearer nope"}).body_json()["error"],
            "unknown API key");
  for (int i = 0; i < 4; ++i) {
    auto foreign = admit(R"({"tenant":"t-small","tokens":10})", big);
    ASSERT_EQ(foreign.status, 403) << foreign.body;
    EXPECT_EQ(foreign.body_json()["error"],
              "the API key belongs to another tenant, not to 't-small'");
  }
  // Nothing of t-small's was touched: no bucket, no quota.
  EXPECT_EQ(redis_.cli("KEYS *t-small*"), "");
  // Its own key: its two tokens of capacity are all there.
  auto own = admit(R"({"tenant":"t-small","tokens":10})", small);
  ASSERT_EQ(own.status, 200) << own.body;
  const std::string rid = own.body_json()["request_id"];
  EXPECT_EQ(admit(R"({"tenant":"t-small"})", small).status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-small"})", small).status, 429);
  // Settle and release: the tenant of the request id, or the one named.
  const std::string settle = R"({"request_id":")" + rid + R"(","tokens":5})";
  EXPECT_EQ(http(port, "POST", "/v1/settle", settle, big).status, 403);
  EXPECT_EQ(http(port, "POST", "/v1/settle", settle).status, 401);
  EXPECT_EQ(http(port, "POST", "/v1/settle", settle, small).status, 200);
  const std::string rel = R"({"tenant":"t-small","request_id":")" + rid + R"("})";
  EXPECT_EQ(http(port, "POST", "/v1/release", rel, big).status, 403);
  EXPECT_EQ(
      http(port, "POST", "/v1/charge", R"({"request_id":")" + rid + R"(","tokens":1})", big).status,
      403);
  EXPECT_EQ(http(port, "POST", "/v1/release", rel, small).status, 200);
  // The trusted proxy's token acts as any tenant.
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", proxy).status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})", big).status, 200);

  // A flow a tenant's key tags comes from the caller's own address or the tenant's flows_from;
  // from elsewhere it is a 403, neither admitted nor charged.
  auto flow_from = [&](const std::string& src, const std::string& dst,
                       const std::vector<std::string>& key) {
    return admit(R"({"tenant":"t-big","tokens":7,"flow":{"src":")" + src +
                     R"(","sport":4000,"dst":")" + dst + R"(","dport":443,"proto":"tcp"}})",
                 key);
  };
  // t-big's admissions as its metrics count them (its bucket refills at once).
  auto admitted = [&] {
    std::istringstream lines(
        http(port, "GET", "/metrics", "", {"Authorization: Bearer m3trics"}).body);
    int64_t n = 0;
    for (std::string l; std::getline(lines, l);)
      if (l.starts_with("dripgate_admissions_total{tenant=\"t-big\"") &&
          l.find("result=\"allowed\"") != std::string::npos)
        n += std::stoll(l.substr(l.rfind(' ') + 1));
    return n;
  };
  EXPECT_EQ(flow_from("127.0.0.1", "10.0.0.9", big).status, 200);  // the caller's own address
  EXPECT_EQ(flow_from("10.1.200.3", "10.0.0.9", big).status, 200);
  EXPECT_EQ(flow_from("2001:db8:0:ff::1", "2001:db8:1::9", big).status, 200);
  const int64_t before = admitted();
  EXPECT_GT(before, 0);
  auto elsewhere = flow_from("10.2.0.1", "10.0.0.9", big);
  EXPECT_EQ(elsewhere.status, 403) << elsewhere.body;
  EXPECT_EQ(elsewhere.body_json()["error"],
            "flow.src: 10.2.0.1 is neither the caller's address nor in tenants.t-big.flows_from");
  EXPECT_EQ(flow_from("2001:db8:1::1", "2001:db8:1::9", big).status, 403);
  EXPECT_EQ(admitted(), before);
  // The trusted proxy tagged flows it vouches for.
  EXPECT_EQ(flow_from("10.2.0.1", "10.0.0.9", proxy).status, 200);

  // A registry tenant: a key added over the admin API acts as it within a poll; rotated, the
  // old key keeps working through the overlap; revoked, it is refused.
  ASSERT_EQ(http(port, "PUT", "/v1/admin/tenants/t-reg", R"({"plan":"big"})", admin).status, 201);
  const std::string add =
      R"({"op":"add","key_sha256":"5be3b05a2339aecdb0c543afefc6a563085f5861e6c109dce236363b3319566e"})";
  EXPECT_EQ(http(port, "POST", "/v1/admin/keys/t-reg", add, proxy).status, 401);
  EXPECT_EQ(http(port, "POST", "/v1/admin/keys/nobody", add, admin).status, 404);
  auto added = http(port, "POST", "/v1/admin/keys/t-reg", add, admin);
  ASSERT_EQ(added.status, 200) << added.body;
  EXPECT_EQ(added.body,
            R"({"tenant":"t-reg","keys":[{"sha256_prefix":"5be3b05a","expires_at":null}]})"
            "\n");
  const std::vector<std::string> reg{"Authorization: Bearer rotated-key"};
  auto admitted_within_a_poll = [&](const std::vector<std::string>& key, int want) {
    auto until = std::chrono::steady_clock::now() + 3s;
    int got = 0;
    while ((got = admit(R"({"tenant":"t-reg"})", key).status) != want &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(20ms);
    return got;
  };
  EXPECT_EQ(admitted_within_a_poll(reg, 200), 200);
  EXPECT_EQ(admit(R"({"tenant":"t-reg"})", small).status, 403);
  auto rotated = http(
      port, "POST", "/v1/admin/keys/t-reg",
      R"({"op":"rotate","key_sha256":")" + std::string(64, 'e') + R"(","overlap_s":3600})", admin);
  ASSERT_EQ(rotated.status, 200) << rotated.body;
  EXPECT_EQ(rotated.body_json()["keys"].size(), 2u) << rotated.body;
  EXPECT_FALSE(rotated.body_json()["keys"][0]["expires_at"].is_null()) << rotated.body;
  EXPECT_EQ(admit(R"({"tenant":"t-reg"})", reg).status, 200);  // the overlap
  auto bad =
      http(port, "POST", "/v1/admin/keys/t-reg", R"({"op":"rotate","key_sha256":"x"})", admin);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body_json()["error"],
            "key_sha256: must be 64 hex digits (the key's SHA-256 digest)");
  EXPECT_EQ(http(port, "POST", "/v1/admin/keys/t-reg",
                 add.substr(0, add.size() - 1) + R"(,"overlap_s":5})", admin)
                .body_json()["error"],
            "overlap_s: only with op rotate");
  const std::string revoke =
      R"({"op":"revoke","key_sha256":"5be3b05a2339aecdb0c543afefc6a563085f5861e6c109dce236363b3319566e"})";
  ASSERT_EQ(http(port, "POST", "/v1/admin/keys/t-reg", revoke, admin).status, 200);
  EXPECT_EQ(admitted_within_a_poll(reg, 401), 401);

  // /metrics and /healthz need their token; /readyz stays open.
  EXPECT_EQ(http(port, "GET", "/metrics").status, 401);
  EXPECT_EQ(http(port, "GET", "/healthz", "", big).status, 401);
  EXPECT_EQ(http(port, "GET", "/metrics", "", {"Authorization: Bearer m3trics"}).status, 200);
  EXPECT_EQ(http(port, "GET", "/readyz").status, 200);
  const std::string log = daemon_->log();
  for (const char* secret : {"key-of-big", "key-of-small", "rotated-key", "5be3b05a", "6ce3b5d2"})
    EXPECT_EQ(log.find(secret), std::string::npos) << secret;
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

// A stream's charge renews its flow's tag for the lease it renewed, with the class and tenant of
// the admission, and says so; a charge of a request without a flow here, or after its release,
// tags nothing.
TEST_F(HttpTest, AStreamChargeRenewsItsFlowsTag) {
  dripgate::testing::LinePeer peer(dp_socket_);
  std::string yaml = test_config(dp_socket_);
  yaml.replace(yaml.find("tenants:\n"), 9,
               "  stream:\n"
               "    class: silver\n"
               "    quota: { tokens_per_month: 100000 }\n"
               "    concurrency: { max_streams: 4, lease_s: 30 }\n"
               "tenants:\n  t-stream: { plan: stream }\n");
  daemon_ = std::make_unique<Daemon>(redis_, dir_, yaml);
  const std::string flow_text =
      R"({"src":"10.0.0.7","sport":40007,"dst":"10.9.0.2","dport":443,"proto":"tcp"})";
  auto a = admit(R"({"tenant":"t-stream","tokens":100,"flow":)" + flow_text + "}");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.header("dripgate-flow-tag"), "ok");
  auto lines = peer.wait_lines(1);
  ASSERT_EQ(lines.size(), 1u);
  const json flow =
      json::parse(R"({"src":"10.0.0.7","sport":40007,"dst":"10.9.0.2","dport":443,"proto":6})");
  EXPECT_EQ(lines[0], (json{{"op", "tag"},
                            {"class", "silver"},
                            {"ttl_s", 30},
                            {"tenant", "t-stream"},
                            {"flow", flow}}));
  const std::string rid = a.body_json()["request_id"];
  auto charge = [&](const std::string& id) {
    return http(daemon_->port(), "POST", "/v1/charge",
                R"({"tenant":"t-stream","request_id":")" + id + R"(","tokens":10})");
  };
  for (int i = 0; i < 2; ++i) {
    auto c = charge(rid);
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.body_json()["lease_s"], 30) << c.body;
    EXPECT_EQ(c.header("dripgate-flow-tag"), "ok");
    lines = peer.wait_lines(2 + i);
    ASSERT_EQ(lines.size(), 2u + i);
    EXPECT_EQ(lines[1 + i], lines[0]);  // the admission's tag, again
  }
  // Admitted without a flow: its charge tags nothing.
  auto b = admit(R"({"tenant":"t-stream","tokens":100})");
  ASSERT_EQ(b.status, 200) << b.body;
  auto cb = charge(b.body_json()["request_id"]);
  ASSERT_EQ(cb.status, 200) << cb.body;
  EXPECT_EQ(cb.header("dripgate-flow-tag"), "<absent>");
  // Released: the flow is forgotten, its untag sent, and a later charge renews nothing.
  EXPECT_EQ(release(peer, "t-stream", rid, 4), flow);
  auto late = charge(rid);
  EXPECT_EQ(late.header("dripgate-flow-tag"), "<absent>") << late.status << " " << late.body;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(peer.lines().size(), 4u);
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

  EXPECT_EQ(release(peer, "t-small", a.body_json()["request_id"], 2), flow);
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

// A raw TCP client for what http() does not do: keep a connection open, send slowly, watch it
// being closed.
class RawConn {
 public:
  explicit RawConn(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() {
    if (fd_ >= 0) close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  bool connected() const { return connected_; }
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  struct Answer {
    int status = 0;  // 0: none came in time; -1: what came does not start with a status line
    std::string head, body;
    // A header's value ("" when absent), the name as the daemon writes it.
    std::string header(const std::string& name) const {
      auto at = head.find("\r\n" + name + ": ");
      return at == std::string::npos ? ""
                                     : head.substr(at + name.size() + 4, head.find("\r\n", at + 2) -
                                                                             at - name.size() - 4);
    }
  };
  // The next answer on a kept-alive connection, within `wait`. After a HEAD request
  // (head_only) no body is read: whatever follows the headers is the start of the next answer.
  Answer next(std::chrono::milliseconds wait = 5s, bool head_only = false) {
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      auto end = raw_.find("\r\n\r\n");
      Answer a;
      if (end != std::string::npos) a.head = raw_.substr(0, end + 4);
      std::string length = a.header("Content-Length");
      size_t body = head_only || length.empty() ? 0 : std::stoul(length);
      if (end != std::string::npos && (head_only || !length.empty()) &&
          raw_.size() >= end + 4 + body) {
        a.status = raw_.rfind("HTTP/1.", 0) == 0 ? std::atoi(raw_.c_str() + 9) : -1;
        a.body = raw_.substr(end + 4, body);
        raw_.erase(0, end + 4 + body);
        return a;
      }
      if (!readable(deadline)) break;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw_.append(buf, static_cast<size_t>(n));
    }
    return {};
  }
  int answer(std::chrono::milliseconds wait = 5s) { return next(wait).status; }
  // True when the peer closed the connection (EOF or reset) within `wait`; data before is
  // skipped.
  bool closed_within(std::chrono::milliseconds wait) {
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (readable(deadline)) {
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  bool readable(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    return left.count() > 0 && poll(&p, 1, static_cast<int>(left.count())) == 1;
  }
  int fd_;
  bool connected_ = false;
  std::string raw_;  // received, not yet returned as an answer
};

// Polls `cond` every 50 ms for up to `limit`.
template <typename F>
bool eventually(F cond, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return cond();
}

constexpr char kKeepAliveGet[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

// A metric as the daemon reports it, asked on a kept-alive connection (which needs no slot
// of its own when the cap is held).
int64_t metric_on(RawConn& c, const std::string& name) {
  if (!c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) return -1;
  auto a = c.next();
  return a.status == 200 ? metric_in(a.body, name) : -1;
}

// A plan's queue over HTTP: a refused request waits on its open connection and its answer says
// how long; a client that closes its connection while waiting leaves the queue at once.
TEST_F(HttpTest, ARequestWaitsOnItsConnectionAndLeavesWhenTheClientCloses) {
  std::string yaml = test_config(dp_socket_);
  yaml.replace(yaml.find("tenants:\n"), 9,
               "  waits: { gates: { tenant: { capacity: 1, refill_per_s: 0.5 } },\n"
               "           queue: { max_wait_ms: 5000 } }\n"
               "tenants:\n  t-wait: { plan: waits }\n");
  daemon_ = std::make_unique<Daemon>(redis_, dir_, yaml);
  auto first = admit(R"({"tenant":"t-wait"})");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.body_json()["waited_ms"], 0);
  const std::string waiters = "dripgate_queue_waiters{band=\"0\",gate=\"tenant\"}";
  {
    RawConn gone(daemon_->port());
    ASSERT_TRUE(gone.connected());
    const std::string body = R"({"tenant":"t-wait"})";
    ASSERT_TRUE(gone.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body));
    ASSERT_TRUE(eventually([&] { return metric(waiters) == 1; }, 2s)) << metrics();
  }  // closed while it waits
  ASSERT_TRUE(eventually([&] { return metric(waiters) == 0; }, 1s)) << metrics();
  EXPECT_EQ(metric("dripgate_queue_requests_total{band=\"0\",result=\"abandoned\"}"), 1);
  // The next one waits for the token the first left (one every 2 s), not for two.
  auto next = admit(R"({"tenant":"t-wait","max_wait_ms":4000})");
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_GT(next.body_json()["waited_ms"].get<int64_t>(), 100) << next.body;
  EXPECT_LT(next.body_json()["waited_ms"].get<int64_t>(), 3000) << next.body;
  EXPECT_EQ(metric("dripgate_queue_requests_total{band=\"0\",result=\"admitted\"}"), 2);
  // One that asks not to wait is told at once, as without a queue.
  auto now = admit(R"({"tenant":"t-wait","max_wait_ms":0})");
  EXPECT_EQ(now.status, 429) << now.body;
  EXPECT_FALSE(now.body_json().contains("waited_ms")) << now.body;
}

// At the cap, a newcomer takes the place of the connection idle longest that never completed a
// request; a client that was served keeps its connection although it has been idle longer.
TEST_F(HttpTest, ConnectionCapEvictsTheLongestIdleForANewClient) {
  constexpr int kCap = 4;
  // One worker: the one that accepts the newcomer holds all the idle connections.
  start({.control_extra = ", max_connections: " + std::to_string(kCap), .threads = 1});
  // Only the scrape itself open: the readiness probes are gone.
  ASSERT_TRUE(eventually([&] { return metric("dripgate_http_connections") == 1; })) << metrics();
  RawConn client(daemon_->port());  // served before the others come
  ASSERT_TRUE(client.send(kKeepAliveGet));
  ASSERT_EQ(client.answer(), 200);
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 1; i < kCap; ++i) idle.push_back(std::make_unique<RawConn>(daemon_->port()));
  // The cap is held (asked on the client's connection, which stays the idle one served before).
  ASSERT_TRUE(eventually([&] { return metric_on(client, "dripgate_http_connections") == kCap; }));
  auto r = http(daemon_->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(idle[0]->closed_within(5s)) << "the longest idle connection was not evicted";
  EXPECT_FALSE(idle[1]->closed_within(100ms));
  // The served client still has its connection, and the cap was full: one eviction, no refusal.
  EXPECT_EQ(metric_on(client, "dripgate_http_connections_evicted_total"), 1);
  EXPECT_EQ(metric_on(client, "dripgate_http_connections_refused_total"), 0);
}

// Each worker holds its share of the cap and makes room in it alone: under a flood of idle
// connections, however the workers took them, the open ones stay within the cap and a newcomer
// is served.
TEST_F(HttpTest, ConnectionCapIsSharedByTheWorkersAndAFloodLeavesRoom) {
  constexpr int kCap = 4;
  start({.control_extra = ", max_connections: " + std::to_string(kCap), .threads = 2});
  std::vector<std::unique_ptr<RawConn>> flood;
  for (int i = 0; i < 3 * kCap; ++i) flood.push_back(std::make_unique<RawConn>(daemon_->port()));
  // Time for the workers to take them all (a bound for a loaded machine).
  std::this_thread::sleep_for(1s);
  auto m = http(daemon_->port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_LE(metric_in(m.body, "dripgate_http_connections"), kCap) << m.body;
  EXPECT_GE(metric_in(m.body, "dripgate_http_connections_evicted_total"), 2 * kCap) << m.body;
  EXPECT_EQ(metric_in(m.body, "dripgate_http_connections_refused_total"), 0) << m.body;
}

// When every connection has a request in progress, nothing is evicted: the newest is refused,
// and the requests in progress are answered.
TEST_F(HttpTest, ConnectionCapRefusesTheNewestWhenEveryConnectionIsBusy) {
  constexpr int kCap = 3;
  start({.control_extra = ", max_connections: " + std::to_string(kCap),
         .threads = 1,
         .redis_timeout_ms = 30000});
  ASSERT_TRUE(eventually([&] { return metric("dripgate_http_connections") == 1; })) << metrics();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);  // Redis connected, scripts loaded
  redis_.pause();  // each admission below waits for Redis: a request in progress
  std::string body = R"({"tenant":"t-big"})";
  std::vector<std::unique_ptr<RawConn>> busy;
  for (int i = 0; i < kCap; ++i) {
    busy.push_back(std::make_unique<RawConn>(daemon_->port()));
    ASSERT_TRUE(busy.back()->send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\n\r\n" + body));
  }
  // Time for the daemon to read the requests (a bound for a loaded machine): a connection whose
  // request it has not read yet has none in progress and could be evicted.
  std::this_thread::sleep_for(1s);
  for (int i = 0; i < 2; ++i) {
    RawConn extra(daemon_->port());
    ASSERT_TRUE(extra.connected());
    extra.send(kKeepAliveGet);
    EXPECT_TRUE(extra.closed_within(5s)) << "connection " << kCap + 1 + i << " was not refused";
  }
  redis_.resume();
  for (auto& b : busy) EXPECT_EQ(b->answer(10s), 200);
  EXPECT_EQ(metric_on(*busy[0], "dripgate_http_connections_refused_total"), 2);
  EXPECT_EQ(metric_on(*busy[0], "dripgate_http_connections_evicted_total"), 0);
}

TEST_F(HttpTest, SlowOrIdleClientIsCutAfterTheRequestTimeout) {
  start({.control_extra = ", request_timeout_s: 2"});
  // One byte every 300 ms would take 15 s for this request: cut after about 2 s.
  std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n\r\n";
  RawConn slow(daemon_->port());
  RawConn idle(daemon_->port());
  auto t0 = std::chrono::steady_clock::now();
  bool cut = false;
  for (size_t i = 0; i < request.size() && !cut; ++i) {
    if (!slow.send(request.substr(i, 1))) break;
    cut = slow.closed_within(300ms);
  }
  double slow_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(cut || slow.closed_within(1s));
  EXPECT_GE(slow_s, 1.0);
  EXPECT_LT(slow_s, 8.0);
  EXPECT_TRUE(idle.closed_within(3s));
  EXPECT_GE(metric("dripgate_http_request_timeouts_total"), 2) << metrics();
  // A kept-alive connection gets the full time again after each answer, then is closed too.
  RawConn client(daemon_->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.send(kKeepAliveGet));
    ASSERT_EQ(client.answer(), 200);
    std::this_thread::sleep_for(1s);
  }
  EXPECT_TRUE(client.closed_within(5s));
}

// Out of file descriptors, accept() fails for every connection in the backlog: the daemon stops
// accepting for a moment instead of spinning, logs about it once a second, keeps its open
// connections served and accepts again once descriptors are free.
TEST_F(HttpTest, OutOfFileDescriptorsNeitherSpinsNorFloodsTheLog) {
  start({.nofile = 128});
  RawConn client(daemon_->port());
  ASSERT_TRUE(client.send(kKeepAliveGet));
  ASSERT_EQ(client.answer(), 200);
  std::vector<std::unique_ptr<RawConn>> flood;
  for (int i = 0; i < 300; ++i) flood.push_back(std::make_unique<RawConn>(daemon_->port()));
  ASSERT_TRUE(eventually([&] {
    return daemon_->log().find("Too many open files") != std::string::npos;
  })) << daemon_->log();
  auto cpu_ticks = [&] {
    std::ifstream stat("/proc/" + std::to_string(daemon_->pid()) + "/stat");
    std::string s(std::istreambuf_iterator<char>(stat), {});
    std::istringstream rest(s.substr(s.rfind(')') + 2));
    std::vector<std::string> f(std::istream_iterator<std::string>(rest), {});
    return std::stoll(f.at(11)) + std::stoll(f.at(12));  // utime, stime
  };
  int64_t before = cpu_ticks();
  std::this_thread::sleep_for(3s);
  int64_t used = cpu_ticks() - before;
  EXPECT_LT(used, sysconf(_SC_CLK_TCK) / 2) << "CPU ticks in 3 s out of descriptors: " << used;
  // One line a second at most (with the count), a few seconds in all.
  std::string log = daemon_->log();
  size_t accept_lines = 0;
  for (size_t p = log.find("accept: "); p != std::string::npos; p = log.find("accept: ", p + 1))
    ++accept_lines;
  EXPECT_GE(accept_lines, 1u);
  EXPECT_LE(accept_lines, 12u) << log;
  EXPECT_LT(std::count(log.begin(), log.end(), '\n'), 200) << log;
  // The connection already open is served throughout.
  ASSERT_TRUE(client.send(kKeepAliveGet));
  EXPECT_EQ(client.answer(), 200);
  flood.clear();
  EXPECT_TRUE(eventually([&] { return http(daemon_->port(), "GET", "/healthz").status == 200; }))
      << daemon_->log();
}

TEST_F(HttpTest, OtherMethodsAre405WithAllowAndCloseIsHonoured) {
  start({.control_extra = ", request_timeout_s: 60"});
  for (const char* method : {"PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO", "PUT", "DELETE"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = http(daemon_->port(), method, "/v1/admit");  // Connection: close, read to EOF
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 405) << method << ": " << r.body;
    EXPECT_EQ(r.header("allow"), "POST") << method;
    // Closed right after the answer, not held until a timeout.
    EXPECT_LT(s, 5.0) << method;
  }
  auto r = http(daemon_->port(), "OPTIONS", "/healthz");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "GET");
  EXPECT_EQ(http(daemon_->port(), "PATCH", "/nope").status, 404);
}

// HEAD gets the headers the answer would have, its Content-Length included, and no body: the
// next answer on the connection starts right after them.
TEST_F(HttpTest, HeadIsAnsweredWithHeadersOnly) {
  start();
  struct Case {
    std::string path;
    int status;
    std::string allow;
  };
  RawConn c(daemon_->port());
  for (const Case& k :
       {Case{"/v1/admit", 405, "POST"}, Case{"/healthz", 405, "GET"}, Case{"/nope", 404, ""}}) {
    ASSERT_TRUE(c.send("HEAD " + k.path + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto a = c.next(5s, /*head_only=*/true);
    EXPECT_EQ(a.status, k.status) << k.path << ":\n" << a.head;
    EXPECT_EQ(a.header("Allow"), k.allow) << k.path;
    EXPECT_EQ(a.header("Content-Type"), "application/json") << k.path;
    // The same answer to another method, with its body.
    auto full = http(daemon_->port(), "PUT", k.path);
    EXPECT_EQ(full.status, k.status);
    EXPECT_EQ(a.header("Content-Length"), std::to_string(full.body.size())) << k.path;
  }
  ASSERT_TRUE(c.send(kKeepAliveGet));
  EXPECT_EQ(c.answer(), 200) << "bytes after a HEAD answer's headers";
}

// Several requests in one packet, one of them answered from Redis later than those behind it
// could be: the answers come in the order of the requests.
TEST_F(HttpTest, PipelinedRequestsInOnePacketAreAnsweredInOrder) {
  start();
  const std::string admit_body = R"({"tenant":"t-big","tokens":3})";
  const std::string post =
      "POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(admit_body.size()) +
      "\r\n\r\n" + admit_body;
  RawConn c(daemon_->port());
  ASSERT_TRUE(c.send(post + kKeepAliveGet + "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + post +
                     "POST /v1/admit HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]" +
                     "HEAD /metrics HTTP/1.1\r\n\r\n" + kKeepAliveGet));
  auto a1 = c.next();
  EXPECT_EQ(a1.status, 200) << a1.head << a1.body;
  EXPECT_EQ(json::parse(a1.body, nullptr, false)["allowed"], true) << a1.body;
  auto h = c.next();
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(json::parse(h.body, nullptr, false)["status"], "ok") << h.body;
  EXPECT_EQ(c.next().status, 404);
  auto a2 = c.next();
  EXPECT_EQ(a2.status, 200) << a2.body;
  EXPECT_NE(json::parse(a2.body, nullptr, false)["request_id"],
            json::parse(a1.body, nullptr, false)["request_id"]);
  EXPECT_EQ(c.next().status, 400);
  auto m = c.next(5s, /*head_only=*/true);
  EXPECT_EQ(m.status, 405) << m.head;
  EXPECT_EQ(c.next().status, 200);
  EXPECT_FALSE(c.closed_within(100ms)) << "kept alive after the pipeline";
}

// Tens of thousands of pipelined requests whose answers (about 6 MB) the client reads only once
// it has sent them all: the daemon's writes come up short and wait for the socket, its reading
// pauses while its answers and the bytes read wait, and resumes once they are out; every answer
// arrives whole, in order, the connection kept.
TEST_F(HttpTest, ManyPipelinedAnswersReadLateAllArriveInOrder) {
  start();
  constexpr int kRequests = 30000;
  RawConn c(daemon_->port());
  ASSERT_TRUE(c.connected());
  std::string batch;
  for (int i = 0; i < kRequests; ++i)
    batch += i % 2 ? kKeepAliveGet : "GET /nope-" + std::to_string(i) + " HTTP/1.1\r\n\r\n";
  std::thread sender([&] { EXPECT_TRUE(c.send(batch)); });
  std::this_thread::sleep_for(300ms);  // the daemon's answers fill both socket buffers meanwhile
  int in_order = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto a = c.next(10s);
    if (a.status != (i % 2 ? 200 : 404)) {
      ADD_FAILURE() << "answer " << i << ": " << a.status << " " << a.head;
      break;
    }
    ++in_order;
  }
  sender.join();
  EXPECT_EQ(in_order, kRequests);
  ASSERT_TRUE(c.send(kKeepAliveGet));
  EXPECT_EQ(c.answer(), 200);
}

// The reads and answers go through io_uring batches unless --no-io-uring says otherwise (the
// http_syscalls_test runs this file's transport tests that way) or the kernel refuses io_uring
// (as it then refuses this test process too).
TEST_F(HttpTest, ReadsAndAnswersUseIoUringUnlessTurnedOff) {
  start();
  io_uring ring;
  const bool refused = io_uring_queue_init(4, &ring, 0) != 0;
  if (!refused) io_uring_queue_exit(&ring);
  const bool off = refused || std::getenv("DRIPGATE_TEST_NO_IO_URING") != nullptr;
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  const std::string log = daemon_->log();
  EXPECT_EQ(log.find("one io_uring submission per loop pass") != std::string::npos, !off) << log;
  EXPECT_EQ(log.find("a system call each") != std::string::npos, off) << log;
}

// A request cut into one-byte writes (well within the request deadline) is read whole.
TEST_F(HttpTest, ARequestSplitIntoTinyWritesIsAnswered) {
  start();
  const std::string body = R"({"tenant":"t-big","user":"tiny","tokens":5})";
  const std::string req =
      "POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  RawConn c(daemon_->port());
  for (char ch : req) {
    ASSERT_TRUE(c.send(std::string(1, ch)));
    std::this_thread::sleep_for(1ms);
  }
  auto a = c.next();
  ASSERT_EQ(a.status, 200) << a.head << a.body;
  EXPECT_EQ(json::parse(a.body, nullptr, false)["allowed"], true) << a.body;
  ASSERT_TRUE(c.send(kKeepAliveGet));
  EXPECT_EQ(c.answer(), 200);
}

// Headers beyond 16 KiB get 431, a body beyond control's limit 413 (said on its header, before
// it is sent), then the connection is closed; the daemon serves on.
TEST_F(HttpTest, OversizedHeadIs431AndOversizedBodyIs413) {
  start();
  {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') +
                       "\r\n\r\n"));
    auto a = c.next();
    EXPECT_EQ(a.status, 431) << a.head;
    EXPECT_EQ(a.header("Connection"), "close");
    EXPECT_TRUE(c.closed_within(5s));
  }
  {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n"));
    auto a = c.next();
    EXPECT_EQ(a.status, 413) << a.head;
    EXPECT_NE(a.body.find("too large"), std::string::npos) << a.body;
    EXPECT_TRUE(c.closed_within(5s));
  }
  {
    // A chunked body over the limit: refused as it comes.
    RawConn c(daemon_->port());
    std::string chunk(40000, ' ');
    ASSERT_TRUE(c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
    for (int i = 0; i < 2; ++i) c.send("9c40\r\n" + chunk + "\r\n");
    EXPECT_EQ(c.answer(), 413);
  }
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  EXPECT_GE(metric("dripgate_http_requests_total{code=\"413\"}"), 2);
}

// A chunked request body is decoded; Expect: 100-continue is answered before the body is sent.
TEST_F(HttpTest, ChunkedBodiesAndExpectContinue) {
  start();
  RawConn c(daemon_->port());
  ASSERT_TRUE(
      c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "b\r\n{\"tenant\":\"\r\n6\r\nt-big\"\r\n1\r\n}\r\n0\r\n\r\n"));
  auto a = c.next();
  ASSERT_EQ(a.status, 200) << a.head << a.body;
  EXPECT_EQ(json::parse(a.body, nullptr, false)["allowed"], true) << a.body;

  const std::string body = R"({"tenant":"t-big"})";
  ASSERT_TRUE(
      c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
             "Content-Length: " +
             std::to_string(body.size()) + "\r\n\r\n"));
  // "100 Continue" has no Content-Length: read it as bytes.
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.find("\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    auto part = c.next(100ms, /*head_only=*/true);
    if (part.status != 0) got = part.head;
  }
  EXPECT_EQ(got.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << got;
  ASSERT_TRUE(c.send(body));
  EXPECT_EQ(c.answer(), 200);
}

// HTTP/1.0: closed after the answer unless it asks for keep-alive; answered as 1.0.
TEST_F(HttpTest, Http10IsClosedUnlessItAsksForKeepAlive) {
  start();
  {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send("GET /healthz HTTP/1.0\r\n\r\n"));
    auto a = c.next();
    EXPECT_EQ(a.status, 200);
    EXPECT_EQ(a.head.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << a.head;
    EXPECT_TRUE(c.closed_within(5s));
  }
  RawConn c(daemon_->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto a = c.next();
    EXPECT_EQ(a.status, 200);
    EXPECT_EQ(a.header("Connection"), "keep-alive");
  }
  EXPECT_FALSE(c.closed_within(100ms));
}

// Bytes that are no HTTP/1.x: a 400 (505 for another version), and the connection is closed.
TEST_F(HttpTest, MalformedRequestIs400AndClosed) {
  start();
  {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send("GET /healthz HTTP/2.0\r\n\r\n"));
    EXPECT_EQ(c.answer(), 505);
    EXPECT_TRUE(c.closed_within(5s));
  }
  for (std::string bad :
       {"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", "\x16\x03\x01\x02\x00\x01\x00\r\n\r\n",
        "POST /v1/admit HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: "
        "chunked\r\n\r\n"}) {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send(bad));
    EXPECT_EQ(c.answer(), 400) << bad;
    EXPECT_TRUE(c.closed_within(5s)) << bad;
  }
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
}

// What could frame a request otherwise behind a proxy is refused before the body, naming the
// field: whitespace before a header's colon, chunked repeated (400); a coding before chunked
// that the server does not implement (501).
TEST_F(HttpTest, FramingOutsideTheRulesIsRefusedNamingTheField) {
  start();
  struct Case {
    std::string header;
    int status;
    std::string error;
  };
  for (const Case& k :
       {Case{"Transfer-Encoding : chunked", 400, "header \"Transfer-Encoding\": whitespace"},
        Case{"Transfer-Encoding: chunked, chunked", 400,
             "Transfer-Encoding: chunked is applied more than once"},
        Case{"Transfer-Encoding: gzip, chunked", 501,
             "Transfer-Encoding: only chunked is implemented, not \"gzip\""}}) {
    RawConn c(daemon_->port());
    ASSERT_TRUE(c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\n" + k.header +
                       "\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
    RawConn::Answer a = c.next();
    EXPECT_EQ(a.status, k.status) << k.header << "\n" << a.head;
    EXPECT_EQ(json::parse(a.body, nullptr, false).value("error", "").rfind(k.error, 0), 0u)
        << a.body;
    EXPECT_TRUE(c.closed_within(5s)) << k.header;
  }
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
}

// A stopping daemon answers the request in flight on a kept-alive connection with
// Connection: close, so that such clients do not hold the drain.
TEST_F(HttpTest, SigtermClosesAKeptAliveConnectionAfterItsAnswer) {
  start();
  ASSERT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  RawConn c(daemon_->port());
  ASSERT_TRUE(c.send(kKeepAliveGet));
  ASSERT_EQ(c.answer(), 200);
  redis_.pause();  // the admission below waits for Redis, then times out (200 ms): 503
  const std::string body = R"({"tenant":"t-big"})";
  ASSERT_TRUE(c.send("POST /v1/admit HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  std::this_thread::sleep_for(50ms);
  int rc = -2;
  std::thread stop([&] { rc = daemon_->terminate(); });
  auto a = c.next();
  stop.join();
  redis_.resume();
  EXPECT_EQ(a.status, 503) << a.head << a.body;
  EXPECT_EQ(a.header("Connection"), "close") << a.head;
  EXPECT_TRUE(c.closed_within(1s));
  EXPECT_EQ(rc, 0) << daemon_->log();
}

// ---- configuration reload: SIGHUP and POST /v1/admin/reload ----

// What /healthz reports as config_hash: FNV-1a (64 bit) of the file's bytes.
std::string fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

class ReloadHttpTest : public HttpTest {
 protected:
  std::string path() const { return dir_.path() + "/control.yaml"; }
  // As an operator would: a new file renamed over the old one.
  void write(const std::string& text) {
    std::ofstream(path() + ".new") << text;
    std::filesystem::rename(path() + ".new", path());
  }
  // The file becomes a link to `target` (one on a hung mount), renamed over it the same way.
  void link_to(const std::string& target) {
    std::filesystem::create_symlink(target, path() + ".new");
    std::filesystem::rename(path() + ".new", path());
  }
  HttpResponse reload(const std::vector<std::string>& extra = {"Authorization: Bearer adm1n"}) {
    return http(daemon_->port(), "POST", "/v1/admin/reload", "", extra);
  }
  std::string hash() { return http(daemon_->port(), "GET", "/healthz").body_json()["config_hash"]; }
  int64_t reloads(const std::string& result) {
    return metric("dripgate_config_reloads_total{result=\"" + result + "\"}");
  }
};

TEST_F(ReloadHttpTest, AdminApiIsOffWithoutAnAdminTokenAndSighupReloads) {
  start();
  std::string text = test_config(dp_socket_);
  EXPECT_EQ(hash(), fnv1a64(text));
  auto r = reload();
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("control.admin_token"), std::string::npos) << r.body;
  EXPECT_EQ(reloads("ok"), 0);
  // SIGHUP reloads (it used to end the daemon).
  text += "  t-new: { plan: small }\n";
  write(text);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return reloads("ok") == 1; })) << daemon_->log();
  EXPECT_EQ(hash(), fnv1a64(text));
  auto a = admit(R"({"tenant":"t-new"})");
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body_json()["class"], "gold");
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(ReloadHttpTest, TheAdminTokenGuardsReloadAndABadFileIsRefused) {
  DaemonSetup setup{.control_extra = ", admin_token: \"adm1n\""};
  start(setup);
  std::string good = test_config(dp_socket_, setup);
  EXPECT_EQ(reload({}).status, 401);
  EXPECT_EQ(reload({"Authorization: Bearer adm1"}).status, 401);
  // The API token is not the admin token.
  EXPECT_EQ(reload({"Authorization: Bearer s3cret"}).status, 401);
  auto ok = reload();
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.body_json()["status"], "reloaded");
  EXPECT_EQ(ok.body_json()["config_hash"], fnv1a64(good));

  // A file with errors: 400 naming each, the running configuration stays.
  std::string bad = good;
  bad.replace(bad.find("t-small: { plan: small }"), 24, "t-small: { plan: gold }");
  bad.replace(bad.find("capacity: 2,"), 12, "capacity: 0,");
  write(bad);
  auto refused = reload();
  ASSERT_EQ(refused.status, 400) << refused.body;
  json j = refused.body_json();
  EXPECT_EQ(j["status"], "refused");
  EXPECT_EQ(j["config_hash"], fnv1a64(good));
  ASSERT_EQ(j["errors"].size(), 2u) << refused.body;
  EXPECT_EQ(j["errors"][0].get<std::string>().rfind(
                path() + ":7:27: plans.small.gates.tenant.capacity: must be >= 1", 0),
            0u)
      << refused.body;
  EXPECT_EQ(j["errors"][1],
            path() + ":15:20: tenants.t-small.plan: no plan named 'gold' (defined: big, small)");
  EXPECT_NE(daemon_->log().find(path() + ":15:20: tenants.t-small.plan: no plan named 'gold'"),
            std::string::npos);
  EXPECT_EQ(hash(), fnv1a64(good));
  auto a = admit(R"({"tenant":"t-small"})");
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body_json()["class"], "gold");

  // A setting that changes only on a restart is named, and refused too.
  std::string threads = good;
  threads.replace(threads.find("threads: 2"), 10, "threads: 3");
  write(threads);
  refused = reload();
  ASSERT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.body_json()["errors"][0].get<std::string>().rfind(
                path() + ": control.threads: changes only on a restart", 0),
            0u)
      << refused.body;
  EXPECT_EQ(reloads("ok"), 1);
  EXPECT_EQ(reloads("error"), 2);
}

TEST_F(ReloadHttpTest, ReadyzFollowsRedis) {
  start();
  auto r = http(daemon_->port(), "GET", "/readyz");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body_json()["ready"], true);
  redis_.stop();
  // Every worker must see Redis go; one answer per worker's connection is not guaranteed, so
  // wait for a 503 and check its reason.
  HttpResponse down;
  ASSERT_TRUE(eventually([&] {
    down = http(daemon_->port(), "GET", "/readyz");
    return down.status == 503;
  }));
  EXPECT_EQ(down.body_json()["ready"], false);
  EXPECT_EQ(down.body_json()["why"][0], "redis: down") << down.body;
  // Under redis.on_failure closed (the default) /healthz says down too (open and local: 200
  // degraded, control_outage_test).
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 503);
  redis_.start();
  EXPECT_TRUE(
      eventually([&] { return http(daemon_->port(), "GET", "/readyz").status == 200; }, 15s))
      << daemon_->log();
}

// The live file becomes a FIFO, then a link to /dev/zero: each SIGHUP's reload is refused at
// once and counted, naming the file; serving goes on on the running configuration, and SIGTERM
// still ends the daemon (terminate(): within 10 s).
TEST_F(ReloadHttpTest, AFifoOrDevZeroInTheFilesPlaceIsARefusedReloadAndSigtermStillStops) {
  start();
  const std::string running = hash();
  std::filesystem::remove(path());
  ASSERT_EQ(mkfifo(path().c_str(), 0600), 0);
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return reloads("error") == 1; })) << daemon_->log();
  EXPECT_NE(daemon_->log().find(path() + ": is a FIFO, not a regular file"), std::string::npos)
      << daemon_->log();
  std::filesystem::remove(path());
  std::filesystem::create_symlink("/dev/zero", path());
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return reloads("error") == 2; })) << daemon_->log();
  EXPECT_NE(daemon_->log().find(path() + ": is a character device"), std::string::npos);
  EXPECT_EQ(hash(), running);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  EXPECT_EQ(reloads("ok"), 0);
  EXPECT_EQ(daemon_->terminate(), 0) << daemon_->log();
}

// A reload that does not end (its file is on a hung mount: the stat waits in the kernel) holds
// neither serving nor SIGTERM: the daemon answers meanwhile, and on SIGTERM waits 2 s for the
// reload, then exits 0 without it. The kernel keeps a thread waiting on a FUSE answer, whatever
// the signal (a hard NFS mount does the same), so the process is gone only once the test answers
// the lookup, which it does once the daemon has said it exits (terminate(): within 10 s).
TEST_F(ReloadHttpTest, AReloadThatDoesNotEndHoldsNeitherServingNorSigterm) {
  start();
  HungMount hung;
  ASSERT_EQ(hung.error(), "");
  link_to(hung.path() + "/control.yaml");
  ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
  ASSERT_TRUE(hung.lookups_reached(1)) << daemon_->log();
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})").status, 200) << "the running configuration serves";
  EXPECT_EQ(reloads("ok") + reloads("error"), 0);
  int rc = -2;
  std::thread stop([&] { rc = daemon_->terminate(); });
  const bool gave_up = eventually([&] {
    return daemon_->log().find("is still running after 2 s; exiting without it") !=
           std::string::npos;
  });
  hung.release();
  stop.join();
  EXPECT_TRUE(gave_up) << daemon_->log();
  EXPECT_EQ(rc, 0) << daemon_->log();
}

// POST /v1/admin/reload runs on the reload thread, not on the worker's loop. The daemon has one
// worker, so every connection is that worker's; the reload waits on a hung mount (its file is a
// link into it) while the worker answers /healthz and an admission. Two reloads asked meanwhile
// wait for one more reload after it, which waits in turn: one at a time, the three answered
// by two. Each is refused, naming the file, once its lookup is answered (no such file). When the
// reload ran on the worker's loop, the worker answered nothing until the reload ended.
TEST_F(ReloadHttpTest, AnAdminReloadRunsOffTheWorkersLoopOneAtATime) {
  DaemonSetup setup{.control_extra = ", admin_token: \"adm1n\"", .threads = 1};
  start(setup);
  const std::string running = hash();
  HungMount hung;
  ASSERT_EQ(hung.error(), "");
  link_to(hung.path() + "/control.yaml");
  const std::string post =
      "POST /v1/admin/reload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm1n\r\n"
      "Content-Length: 0\r\n\r\n";
  RawConn first(daemon_->port()), second(daemon_->port()), third(daemon_->port());
  ASSERT_TRUE(first.send(post));
  ASSERT_TRUE(hung.lookups_reached(1)) << daemon_->log();
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})").status, 200) << "the running configuration serves";
  ASSERT_TRUE(second.send(post));
  ASSERT_TRUE(third.send(post));
  // Answered after both were sent (and so read first: they were readable before it connected),
  // while the first reload still waits: none started a reload of its own.
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(hung.lookups(), 1);
  const std::string refused = path() + ": cannot open: No such file or directory";
  hung.release();
  RawConn::Answer a = first.next();
  ASSERT_EQ(a.status, 400) << a.head << a.body;
  EXPECT_EQ(json::parse(a.body)["errors"], json::array({refused})) << a.body;
  EXPECT_EQ(json::parse(a.body)["config_hash"], running) << a.body;
  ASSERT_TRUE(hung.lookups_reached(2)) << daemon_->log();
  EXPECT_EQ(http(daemon_->port(), "GET", "/healthz").status, 200);
  hung.release();
  for (RawConn* c : {&second, &third}) {
    a = c->next();
    ASSERT_EQ(a.status, 400) << a.head << a.body;
    EXPECT_EQ(json::parse(a.body)["errors"], json::array({refused})) << a.body;
  }
  EXPECT_EQ(hung.lookups(), 2);
  EXPECT_EQ(reloads("error"), 2);
  EXPECT_EQ(hash(), running);
}

// Four clients admit at a steady rate while the configuration is reloaded 20 times, by turns
// over HTTP and by SIGHUP, between two files: not one request fails, and every reload is in
// force from the first request after it returned (HTTP) or was counted (SIGHUP).
TEST_F(ReloadHttpTest, TwentyReloadsUnderLoadLoseNothing) {
  DaemonSetup setup{.control_extra = ", admin_token: \"adm1n\""};
  std::string base = test_config(dp_socket_, setup);
  base.replace(base.find("plans:\n"), 7,
               "plans:\n  capped:\n    class: bronze\n    quota: { tokens_per_month: 1 }\n");
  const std::string open = base + "  t-flip: { plan: big }\n";
  const std::string capped = base + "  t-flip: { plan: capped }\n";
  write(open);
  daemon_ = std::make_unique<Daemon>(redis_, dir_, open);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> sent{0}, failed{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::string body = R"({"tenant":"t-big","user":"u)" + std::to_string(c) + R"("})";
      while (!stop.load()) {
        auto r = admit(body);
        ++sent;
        if (r.status != 200) {
          ++failed;
          std::lock_guard lock(mu);
          if (failures.size() < 5) failures.push_back(std::to_string(r.status) + " " + r.body);
        }
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    bool to_capped = i % 2 == 0;
    const std::string& text = to_capped ? capped : open;
    write(text);
    if (i % 4 < 2) {
      auto r = reload();
      ASSERT_EQ(r.status, 200) << r.body;
    } else {
      ASSERT_EQ(kill(daemon_->pid(), SIGHUP), 0);
      ASSERT_TRUE(eventually([&] { return reloads("ok") == i + 1; }, 10s)) << daemon_->log();
    }
    SCOPED_TRACE("reload " + std::to_string(i + 1));
    EXPECT_EQ(hash(), fnv1a64(text));
    auto a = admit(R"({"tenant":"t-flip","tokens":2})");
    if (to_capped) {
      EXPECT_EQ(a.status, 429) << a.body;
      EXPECT_EQ(a.body_json()["gate"], "quota") << a.body;
    } else {
      EXPECT_EQ(a.status, 200) << a.body;
      EXPECT_EQ(a.body_json()["class"], "silver") << a.body;
    }
    std::this_thread::sleep_for(50ms);
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0) << ::testing::PrintToString(failures);
  EXPECT_GT(sent.load(), 100);
  std::printf("20 reloads under load: %lld requests, %lld failed\n",
              static_cast<long long>(sent.load()), static_cast<long long>(failed.load()));
  EXPECT_EQ(reloads("ok"), 20);
  EXPECT_EQ(reloads("error"), 0);
  EXPECT_EQ(daemon_->terminate(), 0);
}

// ---------------------------------------------------------------------------------------------
// Redis outages under redis.on_failure open and local (the outage suite: `meson test
// control_outage_test` runs these, http_test the rest).

constexpr char kOutagePlans[] = R"(
plans:
  metered:
    gates:
      tenant: { capacity: 10, refill_per_s: 20 }
    quota: { tokens_per_month: 1000000000 }
tenants:
  t-m: { plan: metered }
)";

std::string outage_config(const std::string& redis_extra) {
  return "redis: { url: \"redis://127.0.0.1:1/0\", timeout_ms: 100" + redis_extra +
         " }\ncontrol: { listen: \"127.0.0.1:8080\", threads: 2, dataplane_socket: "
         "/nonexistent/dp.sock }\n" +
         kOutagePlans;
}

TEST(OutageOpen, AdmitsUncheckedSaysSoAndCountsThenRedisDecidesAgain) {
  RedisServer redis;
  TempDir dir;
  Daemon d(redis, dir, outage_config(", on_failure: open"));
  ASSERT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"t-m","tokens":5})").status, 200);
  redis.stop();
  for (int i = 0; i < 30; ++i) {  // 3 times the bucket: no gate is consulted
    auto r = http(d.port(), "POST", "/v1/admit", R"({"tenant":"t-m","tokens":5})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("dripgate-degraded"), "open");
    EXPECT_EQ(r.body_json()["degraded"], "open");
    std::string rid = r.body_json()["request_id"];
    EXPECT_EQ(rid.rfind("t-m.", 0), 0u) << rid;
  }
  auto h = http(d.port(), "GET", "/healthz");
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.body_json()["status"], "degraded") << h.body;
  EXPECT_EQ(h.body_json()["mode"], "open") << h.body;
  EXPECT_GE(h.body_json()["outage_s"].get<double>(), 0.0) << h.body;
  std::string m = http(d.port(), "GET", "/metrics").body;
  EXPECT_NE(m.find("dripgate_degraded_decisions_total{mode=\"open\",result=\"allowed\"} 30\n"),
            std::string::npos)
      << m;
  auto s =
      http(d.port(), "POST", "/v1/settle", R"({"request_id":"t-m.0123456789abcdef","tokens":3})");
  EXPECT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.body_json()["detail"], "not_recorded") << s.body;
  EXPECT_EQ(s.header("dripgate-degraded"), "open");
  redis.start();
  bool by_redis = false;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!by_redis && std::chrono::steady_clock::now() < deadline) {
    auto r = http(d.port(), "POST", "/v1/admit", R"({"tenant":"t-m","tokens":5})");
    ASSERT_TRUE(r.status == 200 || r.status == 429) << r.body;
    by_redis = r.header("dripgate-degraded") == "<absent>";
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(by_redis) << d.log();
  EXPECT_TRUE(
      eventually([&] { return http(d.port(), "GET", "/healthz").body_json()["status"] == "ok"; }));
}

// What the load of an outage test saw.
struct OutageLoad {
  std::atomic<int64_t> admitted{0}, refused{0}, failed{0}, local{0}, settled_tokens{0};
  std::mutex mu;
  std::vector<std::string> failures;
  // Answers to admissions sent after the kill and answered before the restart.
  std::atomic<int64_t> during_200{0}, during_503{0}, during_other{0};
  std::atomic<int64_t> first_200_after_ms{-1};
};

// 4 clients, each at a steady 40 admissions a second (4 times what the bucket lets through),
// each admission then settled with 1..20 tokens; Redis is killed (SIGKILL) after 2 s for 5 s
// and restarted from its append-only file; 3 s more after it. ports: the daemons, the clients
// spread over them.
void run_outage_load(RedisServer& redis, const std::vector<int>& ports, OutageLoad& load) {
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> killed_at{0}, restarted_at{0};  // ms since start, 0: not yet
  const auto t0 = Clock::now();
  auto ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(c) + 1);
      int port = ports[static_cast<size_t>(c) % ports.size()];
      auto fail = [&](const std::string& what) {
        ++load.failed;
        std::lock_guard lock(load.mu);
        if (load.failures.size() < 10) load.failures.push_back(what);
      };
      for (auto next = Clock::now(); !stop; next += 25ms) {
        std::this_thread::sleep_until(next);
        int64_t sent = ms();
        auto r = http(port, "POST", "/v1/admit", R"({"tenant":"t-m","tokens":10})");
        int64_t answered = ms();
        if (killed_at && sent > killed_at && (!restarted_at || answered < restarted_at)) {
          (r.status == 200   ? load.during_200
           : r.status == 503 ? load.during_503
                             : load.during_other)++;
        }
        if (restarted_at && sent >= restarted_at && r.status == 200 && load.first_200_after_ms < 0)
          load.first_200_after_ms = answered - restarted_at;
        if (r.status == 429) {
          ++load.refused;
          continue;
        }
        if (r.status != 200) {
          fail("admit " + std::to_string(r.status) + " " + r.body);
          continue;
        }
        ++load.admitted;
        if (r.header("dripgate-degraded") == "local") ++load.local;
        int tokens = static_cast<int>(rng() % 20) + 1;
        std::string rid = r.body_json()["request_id"];
        auto s = http(port, "POST", "/v1/settle",
                      R"({"request_id":")" + rid + R"(","tokens":)" + std::to_string(tokens) + "}");
        if (s.status == 200 && s.body_json()["settled"] == true)
          load.settled_tokens += tokens;
        else
          fail("settle " + std::to_string(s.status) + " " + s.body);
      }
    });
  }
  std::this_thread::sleep_for(2s);
  redis.stop();
  killed_at = ms();
  std::this_thread::sleep_for(5s);
  restarted_at = ms();  // from here an admission may be Redis's again
  redis.start();
  std::this_thread::sleep_for(3s);
  stop = true;
  for (auto& t : clients) t.join();
}

// Two daemons (two gateway boxes) on local_share 0.5 each: together within the global limit,
// nothing lost. The bound: the tenant bucket lets through capacity + refill * elapsed; each
// daemon's own bucket starts full when Redis goes (a second capacity at most), so admitted <=
// (capacity + refill * elapsed) * 1.10 (10 % tolerance).
TEST(OutageLocal, TwoBoxesStayWithinTheLimitAndReconcileTheQuotaExactly) {
  RedisServer redis(RedisServer::Durability::kAppendFsyncAlways);
  TempDir dir_a, dir_b;
  auto config = [&](const TempDir& dir) {
    return outage_config(", on_failure: local, local_share: 0.5, journal: " + dir.path() +
                         "/journal");
  };
  Daemon a(redis, dir_a, config(dir_a)), b(redis, dir_b, config(dir_b));
  OutageLoad load;
  const auto t0 = std::chrono::steady_clock::now();
  run_outage_load(redis, {a.port(), b.port()}, load);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(load.failed.load(), 0) << ::testing::PrintToString(load.failures);
  const double limit = 10 + 20 * elapsed;
  EXPECT_LE(static_cast<double>(load.admitted.load()), limit * 1.10);
  // The outage's 5 s at 20/s: the two halves admitted most of it.
  EXPECT_GE(load.local.load(), 50);
  EXPECT_GE(static_cast<double>(load.admitted.load()), limit * 0.5);
  // Every journal reaches Redis: the month's counter is what was settled, exactly.
  for (const Daemon* d : {&a, &b})
    EXPECT_TRUE(eventually(
        [&] {
          auto h = http(d->port(), "GET", "/healthz").body_json();
          return h["status"] == "ok" && !h.contains("journal_pending");
        },
        15s))
        << d->log();
  std::string key = redis.cli("--scan --pattern 'dg:{t:t-m}:q:*'");
  ASSERT_FALSE(key.empty());
  EXPECT_EQ(std::stoll(redis.cli("GET '" + key + "'")), load.settled_tokens.load());
  std::string m = http(a.port(), "GET", "/metrics").body + http(b.port(), "GET", "/metrics").body;
  EXPECT_NE(m.find("dripgate_degraded_decisions_total{mode=\"local\",result=\"allowed\"}"),
            std::string::npos);
  std::printf(
      "outage (local, 2 boxes x 0.5): %.1f s, admitted %lld (%lld locally) of a limit of %.0f, "
      "refused %lld, failed %lld, settled %lld tokens = the quota counter\n",
      elapsed, static_cast<long long>(load.admitted.load()),
      static_cast<long long>(load.local.load()), limit, static_cast<long long>(load.refused.load()),
      static_cast<long long>(load.failed.load()),
      static_cast<long long>(load.settled_tokens.load()));
}

// A daemon killed (SIGKILL) during the outage reads its journal back: its local reservations
// are still settled locally, and everything reaches Redis. A daemon that crashed after Redis
// took its records but before its journal said so sends them all again: charged once.
TEST(OutageLocal, ARestartLosesNothingAndAResentJournalIsChargedOnce) {
  RedisServer redis(RedisServer::Durability::kAppendFsyncAlways);
  TempDir dir;
  const std::string journal = dir.path() + "/journal";
  const std::string cfg = outage_config(", on_failure: local, journal: " + journal);
  auto d = std::make_unique<Daemon>(redis, dir, cfg);
  auto admit = [&] {
    return http(d->port(), "POST", "/v1/admit", R"({"tenant":"t-m","tokens":10})");
  };
  auto settle = [&](const std::string& rid, int tokens) {
    return http(d->port(), "POST", "/v1/settle",
                R"({"request_id":")" + rid + R"(","tokens":)" + std::to_string(tokens) + "}");
  };
  int64_t settled = 0;
  auto by_redis = admit();
  ASSERT_EQ(by_redis.status, 200) << by_redis.body;
  ASSERT_EQ(by_redis.header("dripgate-degraded"), "<absent>");
  redis.stop();
  std::vector<std::string> local;
  for (int i = 0; i < 8; ++i) {
    auto r = admit();
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.header("dripgate-degraded"), "local");
    local.push_back(r.body_json()["request_id"]);
  }
  // Redis's reservation settled during the outage: journaled for Redis.
  auto s = settle(by_redis.body_json()["request_id"], 7);
  ASSERT_EQ(s.status, 200) << s.body;
  settled += 7;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(settle(local[static_cast<size_t>(i)], i + 1).status, 200);
    settled += i + 1;
  }
  d.reset();  // SIGKILL
  d = std::make_unique<Daemon>(redis, dir, cfg);
  auto h = http(d->port(), "GET", "/healthz");
  EXPECT_EQ(h.body_json()["status"], "degraded") << h.body;
  // 8 local admissions, 4 local settles and the settle Redis missed
  EXPECT_EQ(h.body_json()["journal_pending"], 13) << h.body;
  for (int i = 4; i < 8; ++i) {
    auto r = settle(local[static_cast<size_t>(i)], 20 + i);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body_json()["settled"], true) << r.body;
    EXPECT_EQ(r.header("dripgate-degraded"), "local");
    settled += 20 + i;
  }
  EXPECT_EQ(settle(local[0], 99).body_json()["settled"], false);  // settled before the restart
  std::filesystem::copy_file(journal, journal + ".before");
  redis.start();
  auto reconciled = [&] {
    return eventually(
        [&] {
          auto j = http(d->port(), "GET", "/healthz").body_json();
          return !j.contains("journal_pending");
        },
        15s);
  };
  ASSERT_TRUE(reconciled()) << d->log();
  const std::string key = redis.cli("--scan --pattern 'dg:{t:t-m}:q:*'");
  ASSERT_FALSE(key.empty());
  EXPECT_EQ(std::stoll(redis.cli("GET '" + key + "'")), settled);
  d.reset();
  std::filesystem::copy_file(journal + ".before", journal,
                             std::filesystem::copy_options::overwrite_existing);
  d = std::make_unique<Daemon>(redis, dir, cfg);
  ASSERT_TRUE(reconciled()) << d->log();
  EXPECT_EQ(std::stoll(redis.cli("GET '" + key + "'")), settled);
}

// The default, closed: every admission during the outage is a 503, and Redis decides again
// within 2 s of its restart.
TEST(OutageClosed, AllUnavailableDuringTheOutageThenAdmitsWithinTwoSeconds) {
  RedisServer redis(RedisServer::Durability::kAppendFsyncAlways);
  TempDir dir;
  Daemon d(redis, dir, outage_config(""));
  OutageLoad load;
  run_outage_load(redis, {d.port()}, load);
  EXPECT_GT(load.during_503.load(), 50);
  EXPECT_EQ(load.during_200.load(), 0);
  EXPECT_EQ(load.during_other.load(), 0);
  EXPECT_GE(load.first_200_after_ms.load(), 0);
  EXPECT_LE(load.first_200_after_ms.load(), 2000);
  std::printf("outage (closed): %lld answered 503 during it, first 200 %lld ms after the restart\n",
              static_cast<long long>(load.during_503.load()),
              static_cast<long long>(load.first_200_after_ms.load()));
}

// ---- the tenant registry: /v1/admin/tenants ----

class TenantRegistryHttpTest : public HttpTest {
 protected:
  const std::vector<std::string> admin_ = {"Authorization: Bearer adm1n"};
  DaemonSetup setup_{.control_extra = ", admin_token: \"adm1n\""};
  HttpResponse tenants(const std::string& method, const std::string& rest,
                       const std::string& body = "") {
    return on(*daemon_, method, rest, body);
  }
  HttpResponse on(const Daemon& d, const std::string& method, const std::string& rest,
                  const std::string& body = "") {
    return http(d.port(), method, "/v1/admin/tenants" + rest, body, admin_);
  }
};

TEST_F(TenantRegistryHttpTest, PutGetDeleteAndTheListWithTheAdminToken) {
  start(setup_);
  auto put = tenants("PUT", "/newco", R"({"plan":"big"})");
  ASSERT_EQ(put.status, 201) << put.body;
  EXPECT_EQ(put.body_json(), json({{"tenant", "newco"}, {"plan", "big"}, {"source", "registry"}}));
  put = tenants("PUT", "/newco", R"({"plan":"small"})");
  ASSERT_EQ(put.status, 200) << put.body;
  auto get = tenants("GET", "/newco");
  ASSERT_EQ(get.status, 200) << get.body;
  EXPECT_EQ(get.body_json(),
            json({{"tenant", "newco"}, {"plan", "small"}, {"source", "registry"}}));
  // A tenant of the file only.
  get = tenants("GET", "/t-big");
  ASSERT_EQ(get.status, 200) << get.body;
  EXPECT_EQ(get.body_json(), json({{"tenant", "t-big"}, {"plan", "big"}, {"source", "config"}}));
  EXPECT_EQ(tenants("GET", "/nobody").status, 404);

  // The list: this daemon's copy, in id order, in pages that follow the cursor.
  for (const char* id : {"c-3", "a-1", "b-2"})
    ASSERT_EQ(tenants("PUT", std::string("/") + id, R"({"plan":"big"})").status, 201);
  HttpResponse page;
  ASSERT_TRUE(eventually([&] {
    page = tenants("GET", "?limit=2");
    return page.status == 200 && page.body_json()["version"] == 5;
  })) << page.body;
  json j = page.body_json();
  ASSERT_EQ(j["tenants"].size(), 2u) << page.body;
  EXPECT_EQ(j["tenants"][0], json({{"tenant", "a-1"}, {"plan", "big"}}));
  EXPECT_EQ(j["tenants"][1]["tenant"], "b-2");
  ASSERT_EQ(j["next_cursor"], "b-2");
  page = tenants("GET", "?limit=2&cursor=b-2");
  ASSERT_EQ(page.status, 200) << page.body;
  j = page.body_json();
  ASSERT_EQ(j["tenants"].size(), 2u) << page.body;
  EXPECT_EQ(j["tenants"][0]["tenant"], "c-3");
  EXPECT_EQ(j["tenants"][1], json({{"tenant", "newco"}, {"plan", "small"}}));
  EXPECT_TRUE(j["next_cursor"].is_null()) << page.body;

  auto del = tenants("DELETE", "/newco");
  EXPECT_EQ(del.status, 204) << del.body;
  EXPECT_EQ(del.body, "");
  del = tenants("DELETE", "/newco");
  EXPECT_EQ(del.status, 404) << del.body;
  // The file's tenants are the file's.
  del = tenants("DELETE", "/t-big");
  EXPECT_EQ(del.status, 404) << del.body;
  EXPECT_NE(del.body.find("the configuration file lists it"), std::string::npos) << del.body;
  EXPECT_EQ(tenants("GET", "/newco").status, 404);
  EXPECT_EQ(daemon_->terminate(), 0);
}

TEST_F(TenantRegistryHttpTest, TheAdminTokenGuardsItAndWithoutOneItIsOff) {
  start();
  for (auto [method, rest] :
       {std::pair{"PUT", "/x"}, {"GET", "/x"}, {"DELETE", "/x"}, {"GET", ""}}) {
    auto r = http(daemon_->port(), method, std::string("/v1/admin/tenants") + rest,
                  std::string(method) == "PUT" ? R"({"plan":"big"})" : "");
    EXPECT_EQ(r.status, 404) << method << rest << " " << r.body;
    EXPECT_NE(r.body.find("control.admin_token"), std::string::npos) << r.body;
  }
  daemon_.reset();
  start(setup_);
  for (auto [method, rest] :
       {std::pair{"PUT", "/x"}, {"GET", "/x"}, {"DELETE", "/x"}, {"GET", ""}}) {
    auto path = std::string("/v1/admin/tenants") + rest;
    std::string body = std::string(method) == "PUT" ? R"({"plan":"big"})" : "";
    EXPECT_EQ(http(daemon_->port(), method, path, body).status, 401) << path;
    EXPECT_EQ(http(daemon_->port(), method, path, body, {"Authorization: Bearer s3cret"}).status,
              401)
        << path;
  }
  // Nothing was written by the refused calls.
  EXPECT_EQ(redis_.cli("EXISTS dg:{registry}:tenants"), "0");
}

TEST_F(TenantRegistryHttpTest, BadInputIs400NamingTheField) {
  start(setup_);
  struct Case {
    std::string method, rest, body, starts;
  };
  std::vector<Case> cases = {
      {"PUT", "/a%20b", R"({"plan":"big"})", "tenant: "},
      {"PUT", "/" + std::string(65, 'x'), R"({"plan":"big"})", "tenant: "},
      {"PUT", "/ok", R"({"plan":"platinum"})", "plan: unknown plan 'platinum'"},
      {"PUT", "/ok", R"({"plan":5})", "plan: must be a string"},
      {"PUT", "/ok", R"({})", "plan: required"},
      {"PUT", "/ok", R"({"plan":"big","tier":"x"})", "tier: unknown field"},
      {"PUT", "/ok", R"({"plan":"big","plan":"small"})", "plan: duplicate key"},
      {"PUT", "/ok", "{nope", "body is not valid JSON"},
      {"GET", "/a:b", "", "tenant: "},
      {"DELETE", "/a/b", "", "tenant: "},
      {"GET", "?limit=0", "", "limit: "},
      {"GET", "?limit=1001", "", "limit: "},
      {"GET", "?limit=ten", "", "limit: "},
      {"GET", "?cursor=a%20b", "", "cursor: "},
      {"GET", "?page=2", "", "page: unknown parameter"},
  };
  for (const auto& c : cases) {
    auto r = tenants(c.method, c.rest, c.body);
    EXPECT_EQ(r.status, 400) << c.method << " " << c.rest << " " << c.body << ": " << r.body;
    std::string error = r.body_json().value("error", "");
    EXPECT_EQ(error.rfind(c.starts, 0), 0u) << c.method << " " << c.rest << ": " << error;
  }
  auto r = tenants("PUT", "/ok", R"({"plan":"platinum"})");
  EXPECT_NE(r.body.find("big, small"), std::string::npos) << r.body;
  r = tenants("POST", "/ok", R"({"plan":"big"})");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.header("allow"), "GET, PUT, DELETE");
  EXPECT_EQ(redis_.cli("EXISTS dg:{registry}:tenants"), "0");
  EXPECT_EQ(tenants("GET", "?limit=1000").status, 200);
  EXPECT_EQ(daemon_->terminate(), 0);
}

// A reload that removes a plan the registry names: its tenants are refused, saying why, until
// they are put on a plan the configuration has.
TEST_F(TenantRegistryHttpTest, ARegistryTenantWhosePlanAReloadRemovedIsRefused) {
  start(setup_);
  ASSERT_EQ(tenants("PUT", "/newco", R"({"plan":"big"})").status, 201);
  auto admit_newco = [&] { return admit(R"({"tenant":"newco"})"); };
  ASSERT_TRUE(eventually([&] { return admit_newco().status == 200; }));
  std::string text = test_config(dp_socket_, setup_);
  text.erase(text.find("  big:\n"), text.find("tenants:\n") - text.find("  big:\n"));
  text.erase(text.find("  t-big: { plan: big }\n"), 23);
  std::ofstream(dir_.path() + "/control.yaml.new") << text;
  std::filesystem::rename(dir_.path() + "/control.yaml.new", dir_.path() + "/control.yaml");
  auto r = http(daemon_->port(), "POST", "/v1/admin/reload", "", admin_);
  ASSERT_EQ(r.status, 200) << r.body;
  auto a = admit_newco();
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(a.body_json()
                .value("error", "")
                .rfind("tenant: 'newco' is on plan 'big' in the tenant registry", 0),
            0u)
      << a.body;
  // A plan the configuration no longer has cannot be given either.
  EXPECT_EQ(tenants("PUT", "/other", R"({"plan":"big"})").status, 400);
  ASSERT_EQ(tenants("PUT", "/newco", R"({"plan":"small"})").status, 200);
  ASSERT_TRUE(eventually([&] { return admit_newco().status == 200; }));
  EXPECT_EQ(admit_newco().body_json()["class"], "gold");
  EXPECT_EQ(daemon_->terminate(), 0);
}

// Started while Redis is down, the daemon serves after a bounded wait and says the registry is
// missing until Redis is back and the registry was read.
TEST_F(TenantRegistryHttpTest, WithoutRedisAtStartReadyzSaysTheRegistryIsMissing) {
  redis_.stop();
  start(setup_);
  auto r = http(daemon_->port(), "GET", "/readyz");
  ASSERT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.body_json()["why"], json({"redis: down", "tenant registry: not read yet"})) << r.body;
  EXPECT_NE(daemon_->log().find("tenant registry: not read within 5 s"), std::string::npos);
  EXPECT_EQ(tenants("PUT", "/newco", R"({"plan":"big"})").status, 503);
  redis_.start();
  ASSERT_TRUE(
      eventually([&] { return http(daemon_->port(), "GET", "/readyz").status == 200; }, 15s))
      << daemon_->log();
  EXPECT_EQ(tenants("PUT", "/newco", R"({"plan":"big"})").status, 201);
  EXPECT_EQ(daemon_->terminate(), 0);
}

// Two daemons share one Redis: a tenant put on a plan on one is admitted on that plan's limits
// by the other within a second (its poller asks every 100 ms); the registry wins over the file
// while it names the tenant, and the file's entry is back once it is taken out.
TEST_F(TenantRegistryHttpTest, TwoDaemonsSeeAChangeWithinASecond) {
  start(setup_);
  TempDir other_dir;
  Daemon other(redis_, other_dir, test_config(dp_socket_, setup_));
  auto admit_on = [&](const Daemon& d, const std::string& tenant) {
    return http(d.port(), "POST", "/v1/admit", R"({"tenant":")" + tenant + R"("})");
  };
  // Unknown to both (no default plan in this file).
  EXPECT_EQ(admit_on(other, "newco").status, 400);

  using Clock = std::chrono::steady_clock;
  auto seen_within = [&](const std::function<bool()>& cond) {
    auto t0 = Clock::now();
    bool ok = eventually(cond, 1s);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    std::printf("seen by the other daemon after %lld ms\n", static_cast<long long>(ms));
    return ok;
  };
  ASSERT_EQ(tenants("PUT", "/newco", R"({"plan":"small"})").status, 201);
  HttpResponse a;
  ASSERT_TRUE(seen_within([&] {
    a = admit_on(other, "newco");
    return a.status == 200;
  })) << a.body
      << other.log();
  // On "small": class gold, a tenant bucket of 2 (refilling 0.5/s): the second is the last.
  EXPECT_EQ(a.body_json()["class"], "gold");
  EXPECT_EQ(admit_on(other, "newco").status, 200);
  a = admit_on(other, "newco");
  EXPECT_EQ(a.status, 429) << a.body;
  EXPECT_EQ(a.body_json()["gate"], "tenant") << a.body;

  // The registry wins over the file: t-small (file: small, gold) moves to big (silver).
  ASSERT_EQ(tenants("PUT", "/t-small", R"({"plan":"big"})").status, 201);
  ASSERT_TRUE(seen_within([&] {
    a = admit_on(other, "t-small");
    return a.status == 200 && a.body_json()["class"] == "silver";
  })) << a.body;
  auto get = on(other, "GET", "/t-small");
  EXPECT_EQ(get.body_json()["source"], "registry") << get.body;
  // Taken out of the registry: the file's plan again.
  ASSERT_EQ(tenants("DELETE", "/t-small").status, 204);
  ASSERT_TRUE(seen_within([&] {
    a = admit_on(other, "t-small");
    return a.status == 200 && a.body_json()["class"] == "gold";
  })) << a.body;
  EXPECT_EQ(on(other, "GET", "/t-small").body_json()["source"], "config");
  // The metrics label registry tenants as one.
  auto m = http(other.port(), "GET", "/metrics").body;
  EXPECT_NE(m.find("tenant=\"@registry\""), std::string::npos);
  EXPECT_EQ(m.find("dripgate_admissions_total{tenant=\"newco\""), std::string::npos);
  EXPECT_EQ(daemon_->terminate(), 0);
}

// The status page (GET /ui) and its JSON (GET /v1/admin/status): off without an admin token,
// as the admin API is; with one, the token as the password of HTTP Basic (what a browser
// sends) or as a bearer token, for these two GETs only.
TEST_F(HttpTest, StatusPageIsBehindTheAdminTokenAsBasicOrBearer) {
  start();
  for (const char* path : {"/ui", "/v1/admin/status"}) {
    auto r = http(daemon_->port(), "GET", path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_NE(r.body.find("control.admin_token"), std::string::npos) << r.body;
  }
  daemon_.reset();
  start({.control_extra = ", admin_token: \"adm1n\""});
  auto r = http(daemon_->port(), "GET", "/ui");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.header("www-authenticate"), "Basic realm=\"dripgate\", charset=\"UTF-8\"");
  EXPECT_EQ(r.body.find("adm1n"), std::string::npos);
  // "x:adm1n", "x:adm1", "adm1n" (no user part), not base64.
  const std::string good = "Authorization: Basic eDphZG0xbg==";
  for (const char* bad : {"Authorization: Basic eDphZG0x",
                          "Authorization: Basic YWRtMW4=", "Authorization: Basic !!!!",
                          "Authorization: Basic ", "Authorization: Bearer adm1"})
    EXPECT_EQ(http(daemon_->port(), "GET", "/ui", "", {bad}).status, 401) << bad;
  r = http(daemon_->port(), "GET", "/ui", "", {good});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(r.header("content-security-policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_NE(r.body.find("<title>dripgate status</title>"), std::string::npos);
  EXPECT_NE(r.body.find("/v1/admin/status"), std::string::npos);
  EXPECT_LT(r.body.size(), 16u * 1024);
  EXPECT_EQ(http(daemon_->port(), "GET", "/ui", "", {"Authorization: Bearer adm1n"}).status, 200);
  r = http(daemon_->port(), "GET", "/v1/admin/status", "", {good});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body_json()["health"]["status"], "ok") << r.body;
  // A browser sends cached Basic credentials with a cross-site form too: the admin API's
  // changes take the bearer token only.
  EXPECT_EQ(http(daemon_->port(), "POST", "/v1/admin/reload", "", {good}).status, 401);
  EXPECT_EQ(http(daemon_->port(), "DELETE", "/v1/admin/brake", "", {good}).status, 401);
  EXPECT_EQ(daemon_->terminate(), 0);
}

// What the page shows: a refusal counted by gate, the tenant nearest its limit (also as the
// gauge), the dataplane's classes and the receiver's histogram from endpoints the test serves.
TEST_F(HttpTest, StatusJsonShowsRefusalsTheClosestTenantsTheDataplaneAndTheReceiver) {
  dripgate::testing::MetricsServer dp, iat;
  dp.set_body(
      "dripgate_dataplane_sent_bytes_total{class=\"gold\",port=\"0\"} 5000\n"
      "dripgate_dataplane_drip_configured_bytes_per_second{class=\"gold\"} 125000\n"
      "dripgate_dataplane_queue_depth_packets{class=\"gold\"} 12\n"
      "dripgate_dataplane_queue_limit_packets{class=\"gold\"} 1024\n"
      "dripgate_dataplane_drops_total{class=\"gold\",cause=\"ttl\"} 4\n");
  iat.set_body(
      "dripgate_iat_interarrival_seconds_bucket{iface=\"cluster0\",le=\"0.001\"} 3\n"
      "dripgate_iat_interarrival_seconds_bucket{iface=\"cluster0\",le=\"+Inf\"} 5\n"
      "dripgate_iat_burst_factor{iface=\"cluster0\",window=\"10ms\"} 1.25\n");
  start({.control_extra = ", admin_token: \"adm1n\", status: { dataplane_metrics_url: \"" +
                          dp.url() + "\", iat_metrics_url: \"" + iat.url() + "\" }"});
  // t-small's bucket holds 2.
  EXPECT_EQ(admit(R"({"tenant":"t-small"})").status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-small"})").status, 200);
  EXPECT_EQ(admit(R"({"tenant":"t-small"})").status, 429);
  EXPECT_EQ(admit(R"({"tenant":"t-big"})").status, 200);
  auto status = [&] {
    return http(daemon_->port(), "GET", "/v1/admin/status", "", {"Authorization: Bearer adm1n"});
  };
  auto r = status();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("cache-control"), "no-store");
  json j = r.body_json();
  EXPECT_EQ(j["admissions"]["allowed"], 3) << r.body;
  EXPECT_EQ(j["admissions"]["refused"], json({{"tenant", 1}})) << r.body;
  EXPECT_EQ(j["redis"]["up"], true);
  EXPECT_EQ(j["redis"]["breaker_open"], 0);
  EXPECT_EQ(j["brake_factor"], 1);
  EXPECT_GT(j["now_ms"].get<int64_t>(), 1'700'000'000'000);
  // Closest first: t-small's bucket (under one token left of 2), then t-big's.
  ASSERT_GE(j["closest"].size(), 3u) << r.body;
  EXPECT_EQ(j["closest"][0]["quota"], "tenant");
  EXPECT_EQ(j["closest"][0]["tenant"], "t-small");
  EXPECT_LT(j["closest"][0]["ratio"].get<double>(), 0.5);
  EXPECT_EQ(j["closest"][0]["limit"], 2);
  EXPECT_EQ(j["closest"][1]["tenant"], "t-big");
  bool quota = false;
  for (const json& c : j["closest"])
    quota = quota || (c["quota"] == "quota" && c["tenant"] == "t-small" && c["limit"] == 1000);
  EXPECT_TRUE(quota) << r.body;
  const std::string m = metrics();
  const std::string gauge = "dripgate_quota_remaining_ratio{tenant=\"t-small\",quota=\"tenant\"} ";
  const size_t at = m.find(gauge);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_LT(std::stod(m.substr(at + gauge.size())), 0.5) << m;
  EXPECT_NE(m.find("dripgate_quota_remaining_ratio{tenant=\"t-small\",quota=\"quota\"} 1\n"),
            std::string::npos);
  // The dataplane and the receiver: scraped once the page asked, within a second or two.
  ASSERT_TRUE(eventually([&] {
    j = status().body_json();
    return j["dataplane"]["at_ms"] != 0 && j["iat"]["at_ms"] != 0;
  })) << j.dump();
  ASSERT_EQ(j["dataplane"]["classes"].size(), 1u) << j.dump();
  const json& gold = j["dataplane"]["classes"][0];
  EXPECT_EQ(gold["class"], "gold");
  EXPECT_EQ(gold["queue_depth"], 12);
  EXPECT_EQ(gold["queue_limit"], 1024);
  EXPECT_EQ(gold["configured_bytes_per_s"], 125000);
  EXPECT_EQ(gold["drops"]["ttl"]["total"], 4);
  EXPECT_EQ(j["dataplane"]["url"], dp.url());
  ASSERT_EQ(j["iat"]["ifaces"].size(), 1u) << j.dump();
  EXPECT_EQ(j["iat"]["ifaces"][0]["counts"], json({3, 2}));
  EXPECT_EQ(j["iat"]["ifaces"][0]["le"], json({0.001, "+Inf"}));
  EXPECT_EQ(j["iat"]["ifaces"][0]["burst_factor"]["10ms"], 1.25);
  // An endpoint that stops answering: said, the last figures kept.
  dp.set_mode(dripgate::testing::MetricsServer::Mode::kStatus500);
  ASSERT_TRUE(eventually([&] {
    j = status().body_json();
    return j["dataplane"].contains("error");
  })) << j.dump();
  EXPECT_EQ(j["dataplane"]["error"], "http: status 500");
  EXPECT_EQ(j["dataplane"]["classes"].size(), 1u);
  EXPECT_EQ(daemon_->terminate(), 0);
}

}  // namespace
