// dripgate-dataplane: loads the config, brings up the EAL, the mbuf pool and the two ports,
// starts the worker lcore(s) and serves the control socket on the main lcore (poll(), no spin)
// until SIGTERM/SIGINT or --duration; then drains, stops and prints the final stats as JSON.
// SIGHUP reads the YAML again and applies it live, or refuses it whole (reload.h).
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/ranges.h>
#include <rte_cycles.h>
#include <rte_lcore.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/metrics_http.h"
#include "config/config.h"
#include "dataplane/args.h"
#include "dataplane/classify.h"
#include "dataplane/control_socket.h"
#include "dataplane/fastpath.h"
#include "dataplane/flow_table.h"
#include "dataplane/init.h"
#include "dataplane/parse.h"
#include "dataplane/preflight.h"
#include "dataplane/prom_render.h"
#include "dataplane/reload.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"
#include "dataplane/tenants.h"

namespace dg = dripgate::dataplane;
namespace cfg = dripgate::config;

namespace {

// SIGTERM/SIGINT/SIGHUP arrive on a signalfd that the control loop polls. Blocked first thing in
// main(), before the EAL starts its threads, so every thread inherits the mask, only the
// signalfd sees them, and a SIGHUP during start-up is a reload request, never the end.
class SignalFd {
 public:
  SignalFd() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    fd_ = signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw std::runtime_error("signalfd failed");
  }
  ~SignalFd() { ::close(fd_); }
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;
  int fd() const { return fd_; }
  int take() {
    signalfd_siginfo si{};
    if (::read(fd_, &si, sizeof(si)) != sizeof(si)) return 0;
    return static_cast<int>(si.ssi_signo);
  }

 private:
  sigset_t set_;
  int fd_ = -1;
};

std::vector<std::string> cause_names() {
  std::vector<std::string> names;
  for (size_t i = 0; i < dg::kParseStatusCount; ++i) {
    auto st = static_cast<dg::ParseStatus>(i);
    bool malformed = st != dg::ParseStatus::kOk && st != dg::ParseStatus::kNotIp;
    names.push_back(malformed ? dg::to_string(st) : "");
  }
  return names;
}

uint64_t tsc_now() {
  return rte_rdtsc();
}

std::string join(const std::vector<std::string>& parts) {
  std::string all;
  for (const std::string& p : parts) all += (all.empty() ? "" : ", ") + p;
  return all;
}

// SIGHUP: the file read again; applied live whole, or refused whole with the reasons logged
// (the running configuration stays). Never stops the process.
void reload(const dg::Options& opt, dg::Reloader& reloader, dg::FlowTable& flows,
            dg::Stats& stats) {
  if (opt.config_path.empty()) {
    spdlog::warn("SIGHUP: running the embedded default configuration, no file to reload");
    return;
  }
  spdlog::info("SIGHUP: reloading {}", opt.config_path);
  cfg::LoadResult lr = cfg::load_file(opt.config_path, cfg::Secrets::kSkip);
  std::vector<std::string> errors;
  for (const auto& e : lr.errors) errors.push_back(e.str());
  if (lr.config && !lr.config->dataplane)
    errors.push_back(lr.config->source + ": no `dataplane:` section");
  if (errors.empty()) {
    cfg::Dataplane next = *lr.config->dataplane;
    dg::apply_overrides(opt, next);  // the command line still wins over the file
    const dg::Reloader::Outcome o = reloader.reload(next, std::chrono::milliseconds(2000));
    if (o.applied) {
      flows.set_idle_timeout(next.flow_idle_timeout_s);
      stats.reloads_applied.add();
      spdlog::info("reload applied: port {} pps / {} bps, {} classes, {} classify rules",
                   next.drip.rate_pps, next.drip.rate_bps, next.classes.size(),
                   next.classify.size());
      return;
    }
    if (!o.restart.empty())
      errors.push_back(lr.config->source + ": these fields need a restart: " + join(o.restart));
    for (const std::string& e : o.errors) errors.push_back(lr.config->source + ": " + e);
  }
  stats.reloads_refused.add();
  spdlog::error("reload refused, the running configuration stays:");
  for (const std::string& e : errors) spdlog::error("{}", e);
}

// The main lcore's loop: the control socket, signals, scrapes and the flow table's sweep, until
// SIGTERM/SIGINT or --duration.
void serve_until_stop(const dg::Options& opt, dg::ControlSocket& control,
                      dripgate::common::MetricsHttp* metrics, SignalFd& signals,
                      dg::Reloader& reloader, dg::FlowTable& flows, dg::Stats& stats) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto sweep_step = std::chrono::milliseconds(dg::FlowTable::kSweepStepMs);
  auto next_sweep = start + sweep_step;
  for (;;) {
    const uint32_t woken = control.poll_once(100, {signals.fd(), metrics ? metrics->fd() : -1});
    if (metrics) metrics->serve();  // also closes connections that outstayed their time
    if (woken & 1) {
      const int sig = signals.take();
      if (sig == SIGHUP) reload(opt, reloader, flows, stats);
      if (sig == SIGTERM || sig == SIGINT) {
        spdlog::info("signal {}: stopping", sig);
        return;
      }
    }
    const auto now = clock::now();
    if (opt.duration_s > 0 && now - start >= std::chrono::duration<double>(opt.duration_s)) {
      spdlog::info("--duration reached: stopping");
      return;
    }
    if (now >= next_sweep) {
      flows.sweep_step(rte_rdtsc());
      next_sweep = now + sweep_step;
    }
  }
}

int run(const dg::Options& opt, const cfg::Dataplane& dp,
        std::unique_ptr<dg::Classifier> classifier, SignalFd& signals) {
  // Destroyed after the EAL (declared before it): telemetry may read them until cleanup. The
  // tenant table interns the tags' tenants (the control socket) and names them for the stats
  // (any thread: tenants.h).
  dg::TenantTable tenants;
  std::unique_ptr<dg::Scheduler> sched;
  std::unique_ptr<dg::Stats> stats;
  dg::Eal eal(dg::eal_args(opt, dp, "dripgate-dataplane"));

  const uint64_t hz = rte_get_tsc_hz();
  sched = std::make_unique<dg::Scheduler>(dp.drip, dp.classes, hz);
  const auto n_rx = static_cast<uint16_t>(dp.rx_lcores.size());
  const uint16_t rx_queues = dp.rx_queues ? dp.rx_queues : n_rx;
  stats = std::make_unique<dg::Stats>(sched.get(), cause_names(), hz, rte_rdtsc(), n_rx);
  stats->tenant_name = [&tenants](uint32_t id) { return std::string(tenants.name(id)); };
  dg::register_telemetry(stats.get());

  dg::FlowTableParams fp;
  fp.entries = dp.flow_table_size;
  fp.tsc_hz = hz;
  fp.idle_timeout_s = dp.flow_idle_timeout_s;
  fp.socket_id = static_cast<int>(rte_socket_id());
  std::string err;
  std::unique_ptr<dg::FlowTable> flows = dg::FlowTable::create(fp, &err);
  if (!flows) throw std::runtime_error("flow table: " + err);

  if (dp.client_port == dp.cluster_port)
    throw std::runtime_error("dataplane.ports: client and cluster must be different ports");
  // Mbufs and ports for frames of dataplane.mtu, both ways.
  const dg::FramePlan frames = dg::plan_port_frames(dp.mtu, {dp.client_port, dp.cluster_port});
  dg::MbufPool pool("dg_mbufs", dp.mbufs, static_cast<int>(rte_socket_id()), frames.data_room);
  stats->mbufs_total = pool.size();
  // The client port: RSS over rx_queues, one TX queue per RX lcore (the reverse path). The
  // cluster port: as many RX queues (the reverse path, spread the same way), one TX queue (the
  // drip lcore's).
  dg::Port client(dp.client_port, pool.get(), frames.ports[0], rx_queues, n_rx);
  dg::Port cluster(dp.cluster_port, pool.get(), frames.ports[1], rx_queues, 1);
  spdlog::info("ports: client {} ({}), cluster {} ({}); mtu {}, mbufs of {} B{}", client.id(),
               client.name(), cluster.id(), cluster.name(), dp.mtu, frames.data_room,
               frames.chained ? ", longer frames chained" : "");

  dg::FastpathParams params;
  params.client_port = dp.client_port;
  params.cluster_port = dp.cluster_port;
  params.rx_lcores = dp.rx_lcores;
  params.drip_lcore = dp.drip_lcore;
  params.rx_queues = rx_queues;
  params.unknown = dp.unknown_flows;
  params.default_cls = sched->find_class("default");
  params.drain_ms = opt.drain_ms;
  if (!opt.shape_non_ip.empty()) {
    params.non_ip_cls = sched->find_class(opt.shape_non_ip);
    if (params.non_ip_cls < 0)
      throw std::runtime_error("--shape-non-ip: no class named '" + opt.shape_non_ip + "'");
  }
  dg::Fastpath fastpath(params, *sched, *flows, *classifier, *stats);
  dg::Reloader reloader(*sched, fastpath.drip_mailbox(), fastpath.rx_mailboxes(), dp,
                        std::move(classifier));

  const dg::ControlTargets targets{flows.get(), stats.get(), &fastpath.drip_mailbox(),
                                   sched.get(), &tsc_now,    &tenants};
  dg::ControlSocketOptions socket_options;
  socket_options.group = dg::socket_group(dp.control_socket_group);
  dg::ControlSocket control(dp.control_socket, dg::make_protocol(targets), socket_options,
                            dg::make_tag_fast_path(targets));
  // GET /metrics, on this lcore beside the control socket: rendered from the counters the stats
  // read, when asked, so a scrape costs the workers nothing.
  std::unique_ptr<dripgate::common::MetricsHttp> metrics;
  if (!dp.metrics_listen.empty()) {
    try {
      metrics = std::make_unique<dripgate::common::MetricsHttp>(dp.metrics_listen, [&] {
        return dg::render_metrics(*stats, {&reloader.running(), flows->size(), flows->capacity()});
      });
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("dataplane.metrics_listen: ") + e.what());
    }
    spdlog::info("metrics: http://{}/metrics (port {})", dp.metrics_listen, metrics->port());
  }
  fastpath.launch();
  spdlog::info(
      "running: {} layout (rx lcores {}, {} RX queues, drip lcore {}), port rate {} pps / {} "
      "bps, control socket {}",
      fastpath.split() ? "split" : "single-worker", fmt::join(dp.rx_lcores, ","), rx_queues,
      dp.drip_lcore, dp.drip.rate_pps, dp.drip.rate_bps, dp.control_socket);
  std::fflush(stdout);

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  serve_until_stop(opt, control, metrics.get(), signals, reloader, *flows, *stats);

  fastpath.stop_and_wait();
  client.close();
  cluster.close();
  // Every mbuf is back once the ports have released their rings: a leak shows here.
  stats->mbufs_available.store(pool.available());
  nlohmann::json final_stats = stats->to_json();
  final_stats["flows"] = flows->size();
  final_stats["uptime_s"] = std::chrono::duration<double>(clock::now() - start).count();
  std::cout << final_stats.dump() << std::endl;
  if (!opt.stats_file.empty()) {
    std::ofstream f(opt.stats_file);
    f << final_stats.dump(2) << "\n";
    if (!f) spdlog::error("cannot write --stats-file {}", opt.stats_file);
  }
  if (pool.available() != pool.size())
    spdlog::error("mbuf leak: {} of {} mbufs not returned", pool.size() - pool.available(),
                  pool.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  SignalFd signals;
  spdlog::set_default_logger(spdlog::stderr_color_mt("dataplane"));
  dg::ParseOutcome parsed = dg::parse_args(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const dg::Options& opt = *parsed.options;
  spdlog::set_level(spdlog::level::from_str(opt.log_level));

  cfg::LoadResult lr = opt.config_path.empty()
                           ? cfg::load_default()
                           : cfg::load_file(opt.config_path, cfg::Secrets::kSkip);
  if (!lr.errors.empty()) {
    for (const auto& e : lr.errors) std::cerr << e.str() << "\n";
    return 1;
  }
  if (!lr.config->dataplane) {
    std::cerr << lr.config->source << ": no `dataplane:` section\n";
    return 1;
  }
  cfg::Dataplane dp = *lr.config->dataplane;
  dg::apply_overrides(opt, dp);
  if (opt.preflight) {
    // The box as the EAL will see it: the config's arguments with those after `--`.
    cfg::Dataplane as_run = dp;
    as_run.eal = dg::eal_args(opt, dp, "dripgate-dataplane");
    as_run.eal.erase(as_run.eal.begin());
    std::string report;
    int rc = dg::print_preflight(dg::preflight(as_run), report);
    std::cout << report;
    return rc;
  }
  // What the loader cannot see: the rules compiled against the classes, the scheduler's limits.
  // The EAL is not up yet, so the scheduler is judged at a typical TSC rate; run() builds it at
  // the real one, which judges it again.
  constexpr uint64_t kTypicalTscHz = 2'000'000'000;
  dg::Judgement judged = dg::judge(dp, kTypicalTscHz);
  if (!judged.errors.empty()) {
    for (const auto& e : judged.errors) std::cerr << lr.config->source << ": " << e << "\n";
    return 1;
  }
  if (opt.check) {
    std::cout << lr.config->source << ": ok\n";
    return 0;
  }
  try {
    return run(opt, dp, std::move(judged.classifier), signals);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
