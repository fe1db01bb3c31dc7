// The saturation scrape against a metrics endpoint the test serves (tests/metrics_server.h):
// the bounded GET (every way an endpoint can fail, each with its cause, none hanging or eating
// memory), then the scraper publishing the shares a served signal moves, following a reload,
// and drifting back to the configured rate when the endpoint goes silent.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "control/registry/saturation_sync.h"
#include "control/registry/scrape.h"
#include "tests/metrics_server.h"

namespace dripgate::control {
namespace {

using std::chrono::milliseconds;
using testing::MetricsServer;
using Clock = std::chrono::steady_clock;

constexpr const char* kPage =
    "# HELP vllm:num_requests_waiting waiting\n# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"llama\"} 3\n";

common::HttpUrl url_of(const MetricsServer& s, const std::string& path = "/metrics") {
  return *common::parse_http_url(s.url(path));
}

TEST(Scrape, GetsTheBodyByLengthOrChunked) {
  MetricsServer s;
  s.set_body(kPage);
  scrape::Result r = scrape::http_get(url_of(s, "/metrics?x=1"), milliseconds(2000));
  EXPECT_EQ(r.failure, scrape::Failure::kNone) << r.error;
  EXPECT_EQ(r.body, kPage);
  EXPECT_EQ(s.last_target(), "/metrics?x=1");
  s.set_mode(MetricsServer::Mode::kChunked);
  r = scrape::http_get(url_of(s), milliseconds(2000));
  EXPECT_EQ(r.failure, scrape::Failure::kNone) << r.error;
  EXPECT_EQ(r.body, kPage);
}

TEST(Scrape, EachFailureHasItsCause) {
  MetricsServer s;
  s.set_body(kPage);
  s.set_mode(MetricsServer::Mode::kStatus500);
  scrape::Result r = scrape::http_get(url_of(s), milliseconds(2000));
  EXPECT_EQ(r.failure, scrape::Failure::kHttp);
  EXPECT_EQ(r.error, "status 500");
  s.set_mode(MetricsServer::Mode::kHugeLength);
  r = scrape::http_get(url_of(s), milliseconds(2000));
  EXPECT_EQ(r.failure, scrape::Failure::kTooLarge);
  EXPECT_EQ(r.error, "Content-Length 100000000000");
  // A port nobody listens on: refused at once.
  common::HttpUrl closed = url_of(s);
  {
    MetricsServer gone;
    closed.port = gone.port();
  }
  r = scrape::http_get(closed, milliseconds(2000));
  EXPECT_EQ(r.failure, scrape::Failure::kConnect);
  EXPECT_EQ(scrape::failure_name(r.failure), "connect");
}

// A silent endpoint costs the timeout, no more; an endless body is cut at the cap, within the
// timeout, holding no more than the cap.
TEST(Scrape, SilentAndEndlessEndpointsAreBounded) {
  MetricsServer s;
  s.set_mode(MetricsServer::Mode::kSilent);
  auto t0 = Clock::now();
  scrape::Result r = scrape::http_get(url_of(s), milliseconds(300));
  auto took = Clock::now() - t0;
  EXPECT_EQ(r.failure, scrape::Failure::kTimeout);
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, milliseconds(1500));
  s.set_mode(MetricsServer::Mode::kEndless);
  r = scrape::http_get(url_of(s), milliseconds(5000), 1 << 20);
  EXPECT_EQ(r.failure, scrape::Failure::kTooLarge) << r.error;
  EXPECT_TRUE(r.body.empty());
  // A stop asked for ends a scrape at once.
  s.set_mode(MetricsServer::Mode::kSilent);
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancel = true;
  });
  t0 = Clock::now();
  r = scrape::http_get(url_of(s), milliseconds(10000), scrape::kMaxBodyBytes, &cancel);
  stopper.join();
  EXPECT_NE(r.failure, scrape::Failure::kNone);
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
}

// Answers no HTTP server would send: each an error with its cause, never a body; random
// bytes alike.
TEST(Scrape, MalformedAnswersAreHttpFailures) {
  MetricsServer s;
  s.set_mode(MetricsServer::Mode::kRaw);
  auto get = [&](std::string raw) {
    s.set_body(std::move(raw));
    return scrape::http_get(url_of(s), milliseconds(2000));
  };
  for (const char* raw : {"", "SSH-2.0-OpenSSH\r\n", "HTTP/1.1 2x0 OK\r\n\r\nm 1\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nm 1\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nm 1\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n"}) {
    scrape::Result r = get(raw);
    EXPECT_EQ(r.failure, scrape::Failure::kHttp) << raw << ": " << r.error;
    EXPECT_TRUE(r.body.empty());
  }
  EXPECT_EQ(get("HTTP/1.1 200 OK\r\nX: a:b\r\ncontent-length:  4 \r\n\r\nm 1\nmore").body, "m 1\n");
  EXPECT_EQ(get("HTTP/1.1 200 OK\r\n\r\nm 1\n").body, "m 1\n");  // ends at the close
  EXPECT_EQ(get("HTTP/1.0 200\r\n" + std::string(20000, 'x')).failure, scrape::Failure::kHttp);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 50; ++i) {
    std::string raw = "HTTP/1.1 200 OK\r\n";
    raw.resize(raw.size() + rng() % 300);
    for (size_t k = 17; k < raw.size(); ++k) raw[k] = static_cast<char>(rng());
    scrape::Result r = get(raw);
    EXPECT_TRUE(r.failure != scrape::Failure::kNone || r.body.size() < raw.size());
  }
}

TEST(Scrape, Dechunk) {
  std::string out;
  EXPECT_TRUE(scrape::dechunk("3\r\nabc\r\n1;e=1\r\nd\r\n0\r\n\r\n", 100, out));
  EXPECT_EQ(out, "abcd");
  EXPECT_FALSE(scrape::dechunk("3\r\nabcd\r\n0\r\n\r\n", 100, out));
  EXPECT_FALSE(scrape::dechunk("x\r\nabc\r\n0\r\n\r\n", 100, out));
  EXPECT_FALSE(scrape::dechunk("3\r\nabc\r\n", 100, out));                 // no last chunk
  EXPECT_FALSE(scrape::dechunk("ffffffffffffffff\r\nabc\r\n", 100, out));  // over the cap
  EXPECT_FALSE(scrape::dechunk("4\r\nabcd\r\n0\r\n\r\n", 3, out));
}

config::Config config_for(const MetricsServer& s, double target, int64_t failures = 3) {
  config::Config c;
  config::Saturation sat;
  sat.url = s.url();
  sat.metric = "vllm:num_requests_waiting{model_name=\"llama\"}";
  sat.target = target;
  sat.min_share = 0.2;
  sat.increase = 0.2;
  sat.decrease = 0.5;
  sat.interval_ms = 100;
  sat.timeout_ms = 100;
  sat.failures = failures;
  config::Bucket b{100, 50};
  b.saturation = sat;
  c.global_gates.model["llama"] = b;
  c.global_gates.model["plain"] = config::Bucket{100, 50};
  return c;
}

// The share published for llama's model gate (1 when none is).
double share(const ConfigStore& store) {
  auto s = store.saturation();
  return s ? s->of("model", "llama") : 1;
}

// Waits up to 5 s for pred(share).
template <class Pred>
bool wait_share(const ConfigStore& store, Pred pred) {
  auto until = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < until) {
    if (pred(share(store))) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(SaturationSync, PublishesTheShareTheSignalMoves) {
  MetricsServer s;
  s.set_body(kPage);  // 3 waiting
  ConfigStore store(config_for(s, 8));
  Metrics metrics;
  SaturationSync sync(store, &metrics);
  sync.start();
  ASSERT_TRUE(wait_share(store, [](double) { return true; }));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(store.saturation());  // at or below the target: the configured rate, nothing
  s.set_body("vllm:num_requests_waiting{model_name=\"llama\"} 20\n");
  EXPECT_TRUE(wait_share(store, [](double v) { return v == 0.2; }));  // down to the floor
  EXPECT_NE(metrics.render().find("dripgate_saturation_share{gate=\"model\",model=\"llama\"} "
                                  "0.2\n"),
            std::string::npos);
  EXPECT_NE(metrics.render().find("dripgate_saturation_signal{gate=\"model\",model=\"llama\"} "
                                  "20\n"),
            std::string::npos);
  s.set_body(kPage);
  EXPECT_TRUE(wait_share(store, [](double v) { return v == 1; }));
  EXPECT_FALSE(store.saturation());
  // The metric gone from the page: counted, held, then back toward the configured rate.
  s.set_body("vllm:num_requests_waiting{model_name=\"llama\"} 20\n");
  ASSERT_TRUE(wait_share(store, [](double v) { return v < 0.5; }));
  s.set_body("other 1\n");
  EXPECT_TRUE(wait_share(store, [](double v) { return v == 1; }));
  EXPECT_GE(metrics.saturation_failures().value({"model", "llama", "absent"}), 3u);
  sync.stop();
}

TEST(SaturationSync, ASilentEndpointDriftsBackAndAReloadIsFollowed) {
  MetricsServer s;
  s.set_body("vllm:num_requests_waiting{model_name=\"llama\"} 20\n");
  ConfigStore store(config_for(s, 8));
  Metrics metrics;
  SaturationSync sync(store, &metrics);
  sync.start();
  ASSERT_TRUE(wait_share(store, [](double v) { return v == 0.2; }));
  s.set_mode(MetricsServer::Mode::kSilent);
  EXPECT_TRUE(wait_share(store, [](double v) { return v == 1; }));
  EXPECT_GE(metrics.saturation_failures().value({"model", "llama", "timeout"}), 3u);
  // A reload that raises the target: the signal is now within it; one that removes the
  // saturation: the gate is at its configured rate and its gauges go.
  s.set_mode(MetricsServer::Mode::kServe);
  ASSERT_TRUE(wait_share(store, [](double v) { return v == 0.2; }));
  store.publish(std::make_shared<const Snapshot>(config_for(s, 50), "h2"));
  EXPECT_TRUE(wait_share(store, [](double v) { return v == 1; }));
  config::Config none = config_for(s, 8);
  none.global_gates.model["llama"].saturation.reset();
  store.publish(std::make_shared<const Snapshot>(none, "h3"));
  auto until = Clock::now() + std::chrono::seconds(5);
  while (metrics.render().find("dripgate_saturation_share") != std::string::npos &&
         Clock::now() < until)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(metrics.render().find("dripgate_saturation_share"), std::string::npos);
  EXPECT_FALSE(store.saturation());
  sync.stop();
}

}  // namespace
}  // namespace dripgate::control
