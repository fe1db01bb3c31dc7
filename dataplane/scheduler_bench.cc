// Cost of the scheduler on the packet path: ns per enqueue + dequeue, measured with the real
// clock over many packets, for a few shapes of load; then a real-time pacing run (spin on the
// clock until next_departure(), poll, record the departure error) without a NIC, which shows
// what the scheduler plus a spin loop achieve on this machine. Prints figures; asserts nothing.
//
//   build-x/dataplane/scheduler_bench [packets] [pace_seconds]
//   build-x/dataplane/scheduler_bench --stalls SECONDS [RATE_PPS...]
//   build-x/dataplane/scheduler_bench --fairness [packets] [rounds]
// The third form prices a class's queueing discipline: one class, 1,000 tenants, bursts of 32
// through enqueue_burst, FIFO (fairness: none) against tenant-fair and tenant-fair with AQM,
// in alternating rounds; it prints TSC cycles and ns per packet of every round and the medians.
// The second form only probes the machine: it spins on the clock and reports, as one JSON line,
// how often the thread stopped running (gaps per second above a few thresholds) and, for each
// rate, the share of time a drip timeline with max_catchup 8 would lose to those gaps (a gap
// longer than 8 intervals is not caught up), and what an ideal pacer would achieve on this CPU
// (see IdealPacer). dp_pacing.sh prints it beside its results, so a shortfall of the machine
// can be told apart from one of the dataplane.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "dataplane/latency_hist.h"
#include "dataplane/scheduler.h"

namespace dp = dripgate::dataplane;
namespace config = dripgate::config;

namespace {

constexpr uint64_t kHz = 1'000'000'000;

// A FIFO class unless `fairness` says otherwise (the cases below compare scheduling, not the
// class's inner discipline; --fairness does that).
config::Class make_class(const std::string& name, uint32_t weight, double pps = 0,
                         config::Fairness fairness = config::Fairness::kNone) {
  config::Class c;
  c.name = name;
  c.weight = weight;
  c.rate_pps = pps;
  c.queue_depth = 4096;
  c.ttl_ms = 1000;
  c.fairness = fairness;
  return c;
}

// Keeps a result alive so the optimiser cannot drop the work.
volatile uint64_t g_sink;

// CPU time of this thread: on a shared, loaded machine wall time also counts the time the
// thread waited for a core; both are printed.
double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

struct Timer {
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = thread_cpu_ns();
  double wall_ns() const {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - wall0)
        .count();
  }
  double cpu_ns() const { return thread_cpu_ns() - cpu0; }
};

void print(const char* name, const char* unit, double cpu, double wall, uint64_t n) {
  std::printf("%-44s %7.1f ns CPU %7.1f ns wall per %s\n", name, cpu / static_cast<double>(n),
              wall / static_cast<double>(n), unit);
}

struct Case {
  const char* name;
  config::Drip drip;
  std::vector<config::Class> classes;
  unsigned burst;          // packets enqueued, then polled, per round
  bool burst_api = false;  // enqueue_burst() (as the fast path does) instead of enqueue()
};

void run(const Case& c, uint64_t packets) {
  dp::Scheduler s(c.drip, c.classes, kHz);
  std::vector<dp::Departure> out(c.burst);
  std::vector<dp::Item> expired(c.burst);
  const unsigned n_cls = s.num_classes();
  uint64_t sent = 0, id = 1, fake_now = 0, checksum = 0;
  std::vector<dp::EnqueueReq> reqs(c.burst);
  std::vector<void*> refused(c.burst);
  const Timer t;
  while (sent < packets) {
    if (c.burst_api) {
      for (unsigned i = 0; i < c.burst; ++i, ++id) {
        reqs[i] =
            dp::EnqueueReq{reinterpret_cast<void*>(id), fake_now, static_cast<uint32_t>(id % n_cls),
                           static_cast<uint32_t>(64 + (id & 1023))};
      }
      if (s.enqueue_burst(reqs.data(), c.burst, refused.data()) != 0) {
        std::fprintf(stderr, "unexpected tail drop\n");
        std::exit(1);
      }
    }
    for (unsigned i = 0; i < c.burst && !c.burst_api; ++i) {
      if (!s.enqueue(static_cast<unsigned>(id % n_cls), reinterpret_cast<void*>(id),
                     64 + (id & 1023), fake_now)) {
        std::fprintf(stderr, "unexpected tail drop\n");
        std::exit(1);
      }
      ++id;
    }
    // Poll until this burst is out, moving the injected clock to each departure time, so a
    // rate-limited port costs what it costs when the caller spins on the TSC.
    unsigned got = 0;
    while (got < c.burst) {
      const uint64_t due = s.next_departure();
      if (due > fake_now) fake_now = due;
      unsigned n_exp = 0;
      const unsigned n =
          s.poll(fake_now, out.data(), c.burst - got, expired.data(), c.burst, &n_exp);
      for (unsigned i = 0; i < n; ++i) checksum += out[i].scheduled_tsc;
      got += n + n_exp;
    }
    sent += got;
  }
  const double cpu = t.cpu_ns(), wall = t.wall_ns();
  g_sink = checksum;
  print(c.name, "enqueue+dequeue", cpu, wall, sent);
}

void run_hist(uint64_t samples) {
  dp::LatencyHist h(kHz);
  uint64_t x = 88172645463325252ull;
  const Timer t;
  for (uint64_t i = 0; i < samples; ++i) {
    x ^= x << 13;  // xorshift: cheap, unpredictable errors around 0
    x ^= x >> 7;
    x ^= x << 17;
    h.record_ticks(static_cast<int64_t>(x % 2001) - 1000);
  }
  const double cpu = t.cpu_ns(), wall = t.wall_ns();
  const auto snap = h.snapshot();
  print("latency histogram record_ticks", "record", cpu, wall, samples);
  std::printf("  (check: p50 %lld ns, share within +-256 ns %.3f)\n",
              static_cast<long long>(snap.percentile(50)), snap.share_within(256));
}

// The fast path's case at unlimited rate: a TX burst of 32 departures sharing one scheduled
// time is one weighted record; the figure is per packet.
void run_hist_burst(uint64_t samples) {
  dp::LatencyHist h(kHz);
  uint64_t x = 88172645463325252ull;
  constexpr uint64_t kPerRecord = 32;
  const Timer t;
  for (uint64_t i = 0; i < samples; i += kPerRecord) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    h.record_ticks_n(static_cast<int64_t>(x % 2001) - 1000, kPerRecord);
  }
  const double cpu = t.cpu_ns(), wall = t.wall_ns();
  print("latency histogram record_ticks_n (32/call)", "packet", cpu, wall, h.count());
}

uint64_t clock_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Real-time pacing: the steady clock in ns stands in for the TSC (tsc_hz = 1e9). "Sent" is the
// moment poll() has returned, so the error is the spin loop's and the scheduler's, not a NIC's.
void run_pacing(double pps, double seconds) {
  config::Drip d;
  d.rate_pps = pps;
  d.max_catchup = 8;
  dp::Scheduler s(d, {make_class("a", 1)}, kHz);
  dp::LatencyHist h(kHz);
  dp::Departure out[32];
  uint64_t id = 1, first = 0, last = 0, n_sent = 0;
  const uint64_t end = clock_ns() + static_cast<uint64_t>(seconds * 1e9);
  for (;;) {
    uint64_t now = clock_ns();
    while (s.backlog() < 64) {
      if (!s.enqueue(0, reinterpret_cast<void*>(id++), 64, now)) return;
    }
    const uint64_t due = s.next_departure();
    while (now < due) now = clock_ns();
    if (now >= end) break;
    const unsigned n = s.poll(now, out, 32, nullptr, 0, nullptr);
    const uint64_t sent = clock_ns();
    for (unsigned i = 0; i < n; ++i) {
      h.record_ns(static_cast<int64_t>(sent - out[i].scheduled_tsc));
      if (n_sent++ == 0) first = out[i].scheduled_tsc;
      last = out[i].scheduled_tsc;
    }
  }
  const auto snap = h.snapshot();
  const double rate =
      n_sent > 1 ? static_cast<double>(n_sent - 1) * 1e9 / static_cast<double>(last - first) : 0.0;
  std::printf(
      "pacing %7.0f pps for %.0f s: %llu departures, scheduled rate %.2f pps (%.4f%% off), "
      "within +-64 %.4f, +-128 %.4f, +-256 %.4f, +-512 %.4f; p50 %lld p99 %lld p99.9 %lld max "
      "%lld ns; catch-up clamps %llu\n",
      pps, seconds, static_cast<unsigned long long>(n_sent), rate, (rate / pps - 1) * 100,
      snap.share_within(64), snap.share_within(128), snap.share_within(256), snap.share_within(512),
      static_cast<long long>(snap.percentile(50)), static_cast<long long>(snap.percentile(99)),
      static_cast<long long>(snap.percentile(99.9)), static_cast<long long>(snap.max_ns),
      static_cast<unsigned long long>(s.port_stats().stall_clamps));
}

// The pacer a perfect dataplane would be on this CPU: departures every 1e9/pps ns, each sent
// at the first loop pass at or after its time, with the dataplane's catch-up rule (at most
// max_catchup late ones after a gap, then re-based on now, the skipped slots lost). The loop
// pass costs a clock read, so the only errors beyond a few tens of ns are the gaps in which
// the thread did not run: its share within ±256 ns is this machine's ceiling for any software
// pacer on this CPU at this moment.
struct IdealPacer {
  double interval_ns;
  double next_ns;
  uint64_t departures = 0;
  uint64_t within[4] = {};  // ±64, ±128, ±256, ±512 ns
  uint64_t lost = 0;        // slots skipped by the catch-up rule

  void at(double t) {
    constexpr double kLag = 8;  // max_catchup
    if (t - next_ns > kLag * interval_ns) {
      const double skip = std::floor((t - next_ns) / interval_ns) - kLag;
      lost += static_cast<uint64_t>(skip);
      next_ns += skip * interval_ns;
    }
    while (next_ns <= t) {
      const double err = t - next_ns;
      ++departures;
      for (int i = 0; i < 4; ++i) within[i] += err <= 64.0 * (1 << i);
      next_ns += interval_ns;
    }
  }
};

int run_stalls(double seconds, const std::vector<double>& rates) {
  constexpr double kThresholdsNs[] = {1e3, 2e3, 5e3, 16e3, 80e3, 1e6};
  constexpr size_t kT = sizeof(kThresholdsNs) / sizeof(kThresholdsNs[0]);
  uint64_t over[kT] = {};
  std::vector<double> lost_ns(rates.size(), 0.0);
  uint64_t max_gap = 0;
  const uint64_t t0 = clock_ns();
  const uint64_t end = t0 + static_cast<uint64_t>(seconds * 1e9);
  std::vector<IdealPacer> ideal;
  for (double r : rates) ideal.push_back(IdealPacer{1e9 / r, static_cast<double>(t0)});
  uint64_t prev = t0;
  for (;;) {
    const uint64_t t = clock_ns();
    const uint64_t gap = t - prev;
    prev = t;
    for (IdealPacer& p : ideal) p.at(static_cast<double>(t));
    if (gap > 500) {
      max_gap = std::max(max_gap, gap);
      for (size_t i = 0; i < kT; ++i) over[i] += static_cast<double>(gap) > kThresholdsNs[i];
      for (size_t r = 0; r < rates.size(); ++r) {
        const double budget = 8e9 / rates[r];  // max_catchup 8 intervals
        if (static_cast<double>(gap) > budget) lost_ns[r] += static_cast<double>(gap) - budget;
      }
    }
    if (t >= end) break;
  }
  const double secs = static_cast<double>(prev - t0) / 1e9;
  std::printf("{\"seconds\": %.3f, \"max_gap_ns\": %llu, \"gaps_per_s\": {", secs,
              static_cast<unsigned long long>(max_gap));
  for (size_t i = 0; i < kT; ++i) {
    std::printf("%s\"%.0f\": %.1f", i ? ", " : "", kThresholdsNs[i],
                static_cast<double>(over[i]) / secs);
  }
  std::printf("}, \"lost_share\": {");
  for (size_t r = 0; r < rates.size(); ++r) {
    std::printf("%s\"%.0f\": %.6f", r ? ", " : "", rates[r], lost_ns[r] / (secs * 1e9));
  }
  std::printf("}, \"ideal\": {");
  for (size_t r = 0; r < rates.size(); ++r) {
    const IdealPacer& p = ideal[r];
    const double n = p.departures ? static_cast<double>(p.departures) : 1.0;
    std::printf(
        "%s\"%.0f\": {\"departures\": %llu, \"within_64ns\": %.6f, \"within_128ns\": %.6f, "
        "\"within_256ns\": %.6f, \"within_512ns\": %.6f, \"rate_off_pct\": %.4f}",
        r ? ", " : "", rates[r], static_cast<unsigned long long>(p.departures), p.within[0] / n,
        p.within[1] / n, p.within[2] / n, p.within[3] / n,
        (static_cast<double>(p.departures) / (rates[r] * secs) - 1) * 100);
  }
  std::printf("}}\n");
  return 0;
}

// One round of the --fairness comparison: `packets` through one class of the given kind, in
// bursts of 32 from 1,000 tenants (each its own flow), released by an unlimited port in
// batches of 32 (so the scheduler's own cost is what is measured). Returns TSC cycles and
// CPU ns per packet.
struct Cost {
  double cycles, ns;
};
Cost run_discipline(config::Fairness fairness, bool aqm, uint64_t packets) {
  config::Class c = make_class("bulk", 1, 0, fairness);
  c.queue_depth = 65536;
  if (aqm) c.aqm = config::Aqm{5, 100, true};
  config::Drip d;
  d.batch = 32;
  dp::Scheduler s(d, {c}, kHz);
  constexpr unsigned kBurst = 32;
  dp::EnqueueReq reqs[kBurst];
  void* refused[kBurst];
  dp::Departure out[kBurst];
  dp::Item expired[kBurst];
  uint64_t id = 1, sent = 0, checksum = 0, now = 0;
  const Timer t;
  const uint64_t c0 = __builtin_ia32_rdtsc();
  while (sent < packets) {
    for (unsigned i = 0; i < kBurst; ++i, ++id) {
      const uint32_t tenant = static_cast<uint32_t>(id % 1000) + 1;
      reqs[i] = dp::EnqueueReq{reinterpret_cast<void*>(id),
                               now,
                               0,
                               static_cast<uint32_t>(64 + (id & 1023)),
                               tenant,
                               static_cast<uint16_t>(tenant * 40503u),
                               true};
    }
    if (s.enqueue_burst(reqs, kBurst, refused) != 0) {
      std::fprintf(stderr, "unexpected tail drop\n");
      std::exit(1);
    }
    unsigned got = 0;
    while (got < kBurst) {
      unsigned n_exp = 0;
      const unsigned n = s.poll(now, out, kBurst - got, expired, kBurst, &n_exp);
      for (unsigned i = 0; i < n; ++i) checksum += reinterpret_cast<uintptr_t>(out[i].pkt);
      got += n + n_exp;
    }
    sent += got;
    now += 3200;  // 32 packets per 3.2 us: 10 Mpps offered, sojourns near zero
  }
  const uint64_t cycles = __builtin_ia32_rdtsc() - c0;
  g_sink = checksum;
  return {static_cast<double>(cycles) / static_cast<double>(sent),
          t.cpu_ns() / static_cast<double>(sent)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run_fairness(uint64_t packets, int rounds) {
  struct Variant {
    const char* name;
    config::Fairness fairness;
    bool aqm;
    std::vector<double> cycles, ns;
  };
  Variant v[] = {{"FIFO (fairness: none)", config::Fairness::kNone, false, {}, {}},
                 {"tenant-fair", config::Fairness::kTenant, false, {}, {}},
                 {"tenant-fair + AQM (CoDel, ECN)", config::Fairness::kTenant, true, {}, {}}};
  std::printf(
      "scheduler_bench --fairness: one class, 1,000 tenants, bursts of 32, %llu packets "
      "a variant a round, %d alternating rounds (TSC cycles per packet / CPU ns)\n",
      static_cast<unsigned long long>(packets), rounds);
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r + 1);
    for (Variant& x : v) {
      const Cost c = run_discipline(x.fairness, x.aqm, packets);
      x.cycles.push_back(c.cycles);
      x.ns.push_back(c.ns);
      std::printf("  %s %.1f cyc / %.1f ns", x.name, c.cycles, c.ns);
    }
    std::printf("\n");
  }
  const double base = median(v[0].cycles);
  for (const Variant& x : v) {
    std::printf("%-32s median %6.1f cycles %6.1f ns per packet  (%.2fx FIFO)\n", x.name,
                median(x.cycles), median(x.ns), median(x.cycles) / base);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--fairness") {
    const uint64_t packets = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 5'000'000;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
    if (packets == 0 || rounds < 1) {
      std::fprintf(stderr, "usage: scheduler_bench --fairness [packets] [rounds]\n");
      return 2;
    }
    return run_fairness(packets, rounds);
  }
  if (argc > 1 && std::string(argv[1]) == "--stalls") {
    const double secs = argc > 2 ? std::strtod(argv[2], nullptr) : 3.0;
    std::vector<double> rates;
    for (int i = 3; i < argc; ++i) rates.push_back(std::strtod(argv[i], nullptr));
    if (!(secs > 0) || rates.empty()) {
      std::fprintf(stderr, "usage: scheduler_bench --stalls SECONDS RATE_PPS...\n");
      return 2;
    }
    return run_stalls(secs, rates);
  }
  const uint64_t packets = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20'000'000;
  const double pace_s = argc > 2 ? std::strtod(argv[2], nullptr) : 2.0;
  auto drip = [](double pps, double bps, uint32_t batch) {
    config::Drip d;
    d.rate_pps = pps;
    d.rate_bps = bps;
    d.batch = batch;
    d.max_catchup = 8;
    return d;
  };
  const std::vector<Case> cases = {
      {"1 class, unlimited, burst 32", drip(0, 0, 1), {make_class("a", 1)}, 32},
      {"1 class, unlimited, batch 32, enqueue_burst",
       drip(0, 0, 32),
       {make_class("a", 1)},
       32,
       true},
      {"1 class, 10 Mpps port, burst 32", drip(1e7, 0, 1), {make_class("a", 1)}, 32},
      {"4 classes DRR, 10 Gbit/s port, burst 32",
       drip(0, 1e10, 1),
       {make_class("a", 1), make_class("b", 2), make_class("c", 4), make_class("d", 8)},
       32},
      {"4 classes, 2 capped, 20 Mpps port, batch 8",
       drip(2e7, 0, 8),
       {make_class("a", 1, 5e6), make_class("b", 2), make_class("c", 4, 1e6), make_class("d", 8)},
       32},
      {"16 classes DRR, unlimited, burst 1", drip(0, 0, 1), {}, 1},
  };
  std::printf("scheduler_bench: %llu packets per case (injected clock; real time measured)\n",
              static_cast<unsigned long long>(packets));
  for (Case c : cases) {
    if (c.classes.empty()) {
      for (int i = 0; i < 16; ++i) c.classes.push_back(make_class("c" + std::to_string(i), 1 + i));
    }
    run(c, packets);
  }
  run_hist(packets);
  run_hist_burst(packets);
  if (pace_s > 0) {
    std::printf(
        "real-time pacing (steady_clock as TSC, no NIC; a shared or loaded machine shows "
        "its preemptions here):\n");
    run_pacing(100'000, pace_s);
    run_pacing(500'000, pace_s);
  }
  return 0;
}
