#include "common/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

namespace dripgate::common {
namespace {

using Status = PromReading::Status;

PromSelector sel(std::string_view s) {
  auto p = parse_prom_selector(s);
  EXPECT_TRUE(p) << s;
  return p.value_or(PromSelector{});
}

// A page as vLLM serves it (prometheus_client), two engines of one model.
constexpr std::string_view kVllm =
    R"(# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 3.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 5.0
vllm:num_requests_waiting{engine="0",model_name="other"} 40.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.25
vllm:gpu_cache_usage_perc{engine="1",model_name="llama"} 0.875
vllm:request_success_total{finished_reason="stop",model_name="llama"} 1.2e+06 1700000000000
)";

TEST(PromSelector, ParsesNameAndLabels) {
  EXPECT_EQ(sel("vllm:num_requests_waiting"), (PromSelector{"vllm:num_requests_waiting", {}}));
  EXPECT_EQ(sel(R"(m{a="x", b="q\"\\\n",})"), (PromSelector{"m", {{"a", "x"}, {"b", "q\"\\\n"}}}));
  EXPECT_EQ(sel("m{}"), (PromSelector{"m", {}}));
  auto why = [](std::string_view s) {
    std::string w;
    EXPECT_FALSE(parse_prom_selector(s, &w)) << s;
    return w;
  };
  EXPECT_EQ(why(""), "expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  EXPECT_EQ(why("1m"), "expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  EXPECT_EQ(why("m{a=x}"), "expected '\"' to open a label value");
  EXPECT_EQ(why(R"(m{a="x")"), "expected ',' or '}' after a label");
  EXPECT_EQ(why(R"(m{a="x)"), "unterminated label value");
  EXPECT_EQ(why(R"(m{a="\t"})"), "unknown escape '\\t' in a label value");
  EXPECT_EQ(why(R"(m{a="1",a="2"})"), "label a named twice");
  EXPECT_EQ(why(R"(m{a:b="1"})"), "expected '=' after label a");
  EXPECT_EQ(why("m x"), "unexpected ' x' after the selector");
}

TEST(PromText, AggregatesTheMatchingSeries) {
  auto r = read_prom_metric(kVllm, sel(R"(vllm:num_requests_waiting{model_name="llama"})"),
                            PromAggregate::kSum);
  EXPECT_EQ(r.status, Status::kOk);
  EXPECT_EQ(r.value, 8);
  EXPECT_EQ(r.series, 2u);
  r = read_prom_metric(kVllm, sel(R"(vllm:num_requests_waiting{model_name="llama"})"),
                       PromAggregate::kMax);
  EXPECT_EQ(r.value, 5);
  r = read_prom_metric(kVllm, sel("vllm:num_requests_waiting"), PromAggregate::kMax);
  EXPECT_EQ(r.value, 40);
  EXPECT_EQ(r.series, 3u);
  r = read_prom_metric(kVllm, sel("vllm:gpu_cache_usage_perc"), PromAggregate::kMax);
  EXPECT_EQ(r.value, 0.875);
  r = read_prom_metric(kVllm, sel(R"(vllm:request_success_total{model_name="llama"})"),
                       PromAggregate::kMax);
  EXPECT_EQ(r.value, 1.2e6);  // a timestamp after the value
}

TEST(PromText, AbsentNanAndInfinities) {
  auto r = read_prom_metric(kVllm, sel(R"(vllm:num_requests_waiting{model_name="none"})"),
                            PromAggregate::kMax);
  EXPECT_EQ(r.status, Status::kAbsent);
  EXPECT_EQ(read_prom_metric("", sel("m"), PromAggregate::kMax).status, Status::kAbsent);
  // A prefix of the name is another metric.
  EXPECT_EQ(read_prom_metric("m_total 1\n", sel("m"), PromAggregate::kMax).status, Status::kAbsent);
  r = read_prom_metric("m{a=\"1\"} NaN\nm{a=\"2\"} Nan\n", sel("m"), PromAggregate::kMax);
  EXPECT_EQ(r.status, Status::kNan);
  EXPECT_EQ(r.series, 2u);
  r = read_prom_metric("m{a=\"1\"} NaN\nm{a=\"2\"} 4\n", sel("m"), PromAggregate::kSum);
  EXPECT_EQ(r.status, Status::kOk);
  EXPECT_EQ(r.value, 4);
  r = read_prom_metric("m +Inf\nm 3\n", sel("m"), PromAggregate::kMax);
  EXPECT_TRUE(std::isinf(r.value) && r.value > 0);
  r = read_prom_metric("m -Inf\r\n", sel("m"), PromAggregate::kMax);
  EXPECT_TRUE(std::isinf(r.value) && r.value < 0);
  r = read_prom_metric("  m{a=\"x\\\"y\"}\t7 -5\n\n", sel(R"(m{a="x\"y"})"), PromAggregate::kMax);
  EXPECT_EQ(r.value, 7);
}

TEST(PromText, BadLinesAreErrorsNamingTheLine) {
  auto err = [](std::string_view body) {
    auto r = read_prom_metric(body, sel("m"), PromAggregate::kMax);
    EXPECT_EQ(r.status, Status::kParse) << body;
    return r.error;
  };
  EXPECT_EQ(err("<html><body>502 Bad Gateway</body></html>\n"), "line 1: expected a metric name");
  EXPECT_EQ(err("m 1\nm\n"), "line 2: expected a number, got ''");
  EXPECT_EQ(err("m one\n"), "line 1: expected a number, got 'one'");
  EXPECT_EQ(err("m ++1\n"), "line 1: expected a number, got '++1'");
  EXPECT_EQ(err("m 0x10\n"), "line 1: expected a number, got '0x10'");
  EXPECT_EQ(err("m 1 12.5\n"), "line 1: expected a timestamp in ms");
  EXPECT_EQ(err("m 1 12 x\n"), "line 1: unexpected text after the timestamp");
  EXPECT_EQ(err("m{a=\"1\"}1\n"), "line 1: expected a blank before the value");
  EXPECT_EQ(err("m{a=\"1\" 1\n"), "line 1: expected ',' or '}' after a label");
  EXPECT_EQ(err("m{a=\"1 1\n"), "line 1: unterminated label value");
}

// Random bytes and mutated pages: an answer or an error, never a crash or a hang (the ASan
// build checks the reads).
TEST(PromText, ArbitraryInputIsAnswered) {
  std::mt19937_64 rng(7);
  const PromSelector s = sel(R"(vllm:num_requests_waiting{model_name="llama"})");
  for (int i = 0; i < 20000; ++i) {
    std::string body(kVllm);
    if (i % 2) {
      body.resize(rng() % 200);
      for (auto& ch : body) ch = static_cast<char>(rng());
    } else {
      for (int k = 0; k < 4; ++k) body[rng() % body.size()] = static_cast<char>(rng());
      body.resize(rng() % (body.size() + 1));
    }
    auto r = read_prom_metric(body, s, i % 3 ? PromAggregate::kMax : PromAggregate::kSum);
    EXPECT_TRUE(r.status != Status::kParse || !r.error.empty());
  }
}

// Several metrics' series with their labels, as the status page reads a dataplane's: the other
// metrics skipped, a histogram's buckets by their own name, a bad line an error and nothing read.
TEST(PromText, SamplesOfSeveralMetrics) {
  const std::string body =
      "# TYPE dripgate_dataplane_queue_depth_packets gauge\n"
      "dripgate_dataplane_queue_depth_packets{class=\"gold\"} 12\n"
      "dripgate_dataplane_queue_depth_packets{class=\"a\\\"b\"} 3\n"
      "other_metric{class=\"gold\"} 99\n"
      "dripgate_dataplane_drops_total{class=\"gold\",cause=\"ttl\"} 4 1700000000000\n"
      "x_bucket{le=\"+Inf\"} 7\n";
  static constexpr std::string_view kNames[] = {"dripgate_dataplane_queue_depth_packets",
                                                "dripgate_dataplane_drops_total", "x_bucket"};
  std::vector<PromSample> out;
  ASSERT_EQ(read_prom_samples(body, kNames, out), "");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].name, "dripgate_dataplane_queue_depth_packets");
  EXPECT_EQ(out[0].labels, (std::vector<std::pair<std::string, std::string>>{{"class", "gold"}}));
  EXPECT_EQ(out[0].value, 12);
  EXPECT_EQ(out[1].labels[0].second, "a\"b");
  EXPECT_EQ(out[2].labels.size(), 2u);
  EXPECT_EQ(out[2].labels[1], (std::pair<std::string, std::string>{"cause", "ttl"}));
  EXPECT_EQ(out[2].value, 4);
  EXPECT_EQ(out[3].labels[0].second, "+Inf");
  EXPECT_EQ(read_prom_samples(body + "<html>\n", kNames, out), "line 7: expected a metric name");
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace dripgate::common
