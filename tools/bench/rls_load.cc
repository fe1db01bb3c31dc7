// rls_load: a closed-loop load generator for Envoy's rate-limit service, the gRPC counterpart
// of wrk for tools/bench/rls_bench.sh. Keeps --calls ShouldRateLimit calls outstanding on one
// channel (the async stub and one completion queue, as Envoy's client does), for --seconds, and
// prints one line: RLS_RESULT <decisions/s> <p50 us> <p99 us> <calls> <errors>.
// A call that is answered OK or OVER_LIMIT is a decision; a gRPC error is an error.
// --rate R sends R calls a second instead (open loop, as a fleet of proxies does: a slow answer
// does not slow the sending), up to --calls outstanding; --log FILE writes one line per call,
// "<sent, unix s> <latency ms> ok|over|error", for tools/chaos.sh.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace pb = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

struct Call {
  grpc::ClientContext ctx;
  pb::RateLimitResponse resp;
  grpc::Status status;
  Clock::time_point sent;
  double sent_unix = 0;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RateLimitResponse>> reader;
};

// --rate: a call every 1/rate s until end (none while `most` are outstanding), then the rest
// answered; each call logged.
template <class Send>
int open_loop(Send& send, grpc::CompletionQueue& cq, double rate, int most, Clock::time_point end,
              const std::string& log_path) {
  std::FILE* log = log_path.empty() ? nullptr : std::fopen(log_path.c_str(), "w");
  const auto every =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1 / rate));
  auto next = Clock::now();
  int outstanding = 0;
  long sent = 0, skipped = 0, over = 0, errors = 0, ok_calls = 0;
  void* tag = nullptr;
  bool ok = false;
  while (true) {
    const auto now = Clock::now();
    if (now >= next && now < end) {
      if (outstanding < most) {
        send(std::make_unique<Call>());
        ++outstanding;
        ++sent;
      } else {
        ++skipped;
      }
      next += every;
      continue;
    }
    if (now >= end && outstanding == 0) break;
    const auto wait = now >= end ? now + std::chrono::seconds(5) : next;
    // gRPC's deadlines are on the system clock.
    auto st = cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + (wait - now));
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
    if (st == grpc::CompletionQueue::TIMEOUT) {
      if (now >= end) break;
      continue;
    }
    std::unique_ptr<Call> c(static_cast<Call*>(tag));
    --outstanding;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - c->sent).count();
    const char* outcome = "error";
    if (ok && c->status.ok()) {
      const bool refused = c->resp.overall_code() == pb::RateLimitResponse::OVER_LIMIT;
      outcome = refused ? "over" : "ok";
      ++(refused ? over : ok_calls);
    } else {
      ++errors;
    }
    if (log) std::fprintf(log, "%.6f %.3f %s\n", c->sent_unix, ms, outcome);
  }
  if (log) std::fclose(log);
  std::printf("RLS_OPEN %ld sent %ld ok %ld over %ld errors %ld skipped\n", sent, ok_calls, over,
              errors, skipped);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"rls_load: ShouldRateLimit decisions/s with N calls outstanding"};
  std::string target = "127.0.0.1:8081", domain = "dripgate", tenant = "ws-bench";
  int calls = 32;
  double seconds = 10;
  uint32_t hits = 1;
  double rate = 0;
  std::string log_path;
  app.add_option("--target", target, "host:port of the rate-limit service");
  app.add_option("--calls", calls, "calls outstanding")->check(CLI::Range(1, 100000));
  app.add_option("--seconds", seconds, "how long to send");
  app.add_option("--domain", domain);
  app.add_option("--tenant", tenant, "the tenant descriptor's value");
  app.add_option("--hits", hits, "hits_addend (the quota's token estimate)");
  app.add_option("--rate", rate, "calls a second, open loop (0: closed loop)");
  app.add_option("--log", log_path, "one line per call: sent (unix s), latency ms, outcome");
  CLI11_PARSE(app, argc, argv);

  pb::RateLimitRequest req;
  req.set_domain(domain);
  req.set_hits_addend(hits);
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("tenant");
  e->set_value(tenant);

  auto stub = pb::RateLimitService::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  auto send = [&](std::unique_ptr<Call> c) {
    c->sent = Clock::now();
    c->sent_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    c->reader = stub->PrepareAsyncShouldRateLimit(&c->ctx, req, &cq);
    c->reader->StartCall();
    Call* raw = c.release();
    raw->reader->Finish(&raw->resp, &raw->status, raw);
  };

  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (rate > 0) return open_loop(send, cq, rate, calls, end, log_path);
  for (int i = 0; i < calls; ++i) send(std::make_unique<Call>());
  std::vector<double> latency_us;
  latency_us.reserve(1 << 20);
  long errors = 0, answered = 0;
  int outstanding = calls;
  void* tag = nullptr;
  bool ok = false;
  while (outstanding > 0 && cq.Next(&tag, &ok)) {
    std::unique_ptr<Call> c(static_cast<Call*>(tag));
    auto now = Clock::now();
    ++answered;
    if (ok && c->status.ok()) {
      latency_us.push_back(std::chrono::duration<double, std::micro>(now - c->sent).count());
    } else {
      ++errors;
    }
    --outstanding;
    if (now < end) {
      send(std::make_unique<Call>());
      ++outstanding;
    }
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latency_us.begin(), latency_us.end());
  auto pct = [&](double p) {
    return latency_us.empty() ? 0.0 : latency_us[static_cast<size_t>(p * (latency_us.size() - 1))];
  };
  std::printf("RLS_RESULT %.1f %.1f %.1f %ld %ld\n",
              static_cast<double>(latency_us.size()) / elapsed, pct(0.5), pct(0.99), answered,
              errors);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return 0;
}
