// What OpenAI's headers add to an admission's answer: ns per render of a typical admitted
// answer (tenant, user and token-rate buckets, the quota) into the worker's kept Response, with
// control.openai_headers on and, as the baseline in the same run, off; rounds alternate, each
// round printed, then the medians. Prints figures; asserts nothing.
//
//   build/control/http/openai_headers_bench [rounds] [renders per round]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "control/http/api.h"

namespace api = dripgate::control::api;
using dripgate::control::AdmitResult;
using dripgate::control::bucket_remaining;
using dripgate::control::Outcome;

namespace {

// ns per render of `a` into one Response, `n` times.
double ns_per_render(const AdmitResult& a, bool openai, int n, api::Response& kept) {
  const auto t0 = std::chrono::steady_clock::now();
  size_t sink = 0;
  for (int i = 0; i < n; ++i) {
    api::render_admit(a, "ft-1", 1796083200, openai, kept);
    sink += kept.headers.size() + kept.body.size();
  }
  const auto t1 = std::chrono::steady_clock::now();
  if (sink == 0) std::puts("");  // keeps the loop
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int n = argc > 2 ? std::atoi(argv[2]) : 200000;
  AdmitResult a;
  a.outcome = Outcome::kAllowed;
  a.request_id = "ws-acme.00ff00ff00ff00ff";
  a.cls = "gold";
  a.remaining = {bucket_remaining("tenant", 100, 10, 41.7),
                 bucket_remaining("user", 20, 2, 7.25),
                 bucket_remaining("tenant_tokens", 150000, 2500, 149000),
                 {"quota", 700000, 1000000, 2592000, 86400}};
  api::Response kept;
  ns_per_render(a, true, n / 10, kept);  // warm: the kept strings have grown
  std::vector<double> on, off;
  std::printf("round  off (ns/render)  on (ns/render)\n");
  for (int r = 0; r < rounds; ++r) {
    off.push_back(ns_per_render(a, false, n, kept));
    on.push_back(ns_per_render(a, true, n, kept));
    std::printf("%5d  %15.1f  %14.1f\n", r + 1, off.back(), on.back());
  }
  std::printf("median %14.1f  %14.1f  (+%.1f ns with OpenAI's headers)\n", median(off), median(on),
              median(on) - median(off));
}
