// dripgate-control: the admission daemon. Loads the config, serves the HTTP API (and Envoy's
// rate-limit service when control.grpc_listen is set) until SIGTERM or SIGINT, then stops
// accepting, finishes what is in flight and exits 0. SIGHUP reloads the config file.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/address.h"
#include "common/error.h"
#include "common/redis_url.h"
#include "config/config.h"
#include "control/http/http_server.h"
#include "control/http/tls_context.h"
#include "control/outage/fallback.h"
#include "control/registry/brake_sync.h"
#include "control/registry/reload.h"
#include "control/registry/saturation_sync.h"
#include "control/registry/status_scrape.h"
#include "control/registry/tenant_registry.h"
#include "control/rls/protobuf_log.h"
#include "control/rls/rls_credentials.h"
#include "control/rls/rls_service.h"

namespace cfg = dripgate::config;
namespace ctl = dripgate::control;
using cfg::Config;

namespace {

// How long a stopping daemon waits for a reload in progress once its requests are answered.
constexpr std::chrono::milliseconds kReloadGrace{2000};

// The command line: what overrides the file, and what to do instead of serving.
struct Args {
  std::string config_file, listen, redis_url, log_level = "info";
  bool check = false, print_config = false, no_io_uring = false;
  int threads = 0;
};

// Parses argv into args; returns an exit code when the run ends here (--help, a bad flag).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  CLI::App app{"dripgate-control: admission over HTTP, decided atomically in Redis"};
  app.add_option("--config", a.config_file, "YAML config file (default: the embedded default)");
  app.add_flag("--check", a.check, "validate the config, print every error, exit 0 or 1");
  app.add_flag("--print-config", a.print_config,
               "print the configuration in force (file, defaults and overrides) as YAML, secrets "
               "masked, and exit");
  app.add_option("--listen", a.listen, "override control.listen (host:port)");
  app.add_option("--redis", a.redis_url, "override redis.url");
  app.add_option("--threads", a.threads, "override control.threads")->check(CLI::Range(1, 256));
  app.add_flag("--no-io-uring", a.no_io_uring,
               "send each HTTP answer with its own send() instead of one io_uring submission per "
               "event-loop pass (for comparison; used anyway where the kernel refuses io_uring)");
  app.add_option("--log-level", a.log_level, "trace|debug|info|warn|error|critical|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// The command line's overrides, applied at start and again to every reload, so a reloaded file
// keeps them.
ctl::Overrides overrides_of(const Args& a) {
  return [a](Config& c) -> std::optional<cfg::Error> {
    if (!a.redis_url.empty()) {
      if (auto why = c.redis.set_url(a.redis_url))
        return cfg::Error{
            "--redis", 0, 0, "",
            "bad redis URL " +
                dripgate::common::quote(dripgate::common::redact_redis_url(a.redis_url)) + ": " +
                *why};
      c.redis.cluster.clear();  // --redis names one node, in place of any cluster seeds
    }
    if (!a.listen.empty()) {
      std::string host;
      std::optional<int> port;
      if (auto why = dripgate::common::split_host_port(a.listen, true, host, port))
        return cfg::Error{"--listen", 0, 0, "",
                          "bad listen address " + dripgate::common::quote(a.listen) + ": " + *why};
      c.control.listen = a.listen;
    }
    if (a.threads > 0) c.control.threads = a.threads;
    return std::nullopt;
  };
}

// What --print-config shows: the configuration without its secrets (an inline password or
// token; files are named, not read out).
Config masked(Config c) {
  c.redis.url = dripgate::common::redact_redis_url(c.redis.url);
  if (!c.control.auth_token.empty() && c.control.auth_token_file.empty() &&
      c.control.auth_token_env.empty())
    c.control.auth_token = "***";
  if (!c.control.admin_token.empty() && c.control.admin_token_file.empty() &&
      c.control.admin_token_env.empty())
    c.control.admin_token = "***";
  return c;
}

// Blocks the signals the daemon waits for; the workers inherit the mask, so only sigwait in
// main sees them.
sigset_t block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

ctl::ServerOptions server_options(const Config& c, const Args& a) {
  ctl::ServerOptions opts;
  opts.listen = c.control.listen;
  opts.threads = c.control.threads;
  opts.max_connections = c.control.max_connections;
  opts.request_timeout_s = c.control.request_timeout_s;
  opts.io_uring = !a.no_io_uring;
  return opts;
}

// Local decisions (redis.on_failure: local) and the journal that carries them into Redis, read
// back first: a restart during an outage keeps what was decided before it. False when the
// journal cannot be opened; fallback stays null when none is configured.
bool open_fallback(const Config& c, std::unique_ptr<ctl::Fallback>& fallback) {
  if (c.redis.journal.empty()) return true;
  std::string why;
  fallback = ctl::Fallback::open(c.redis.journal, &why, {}, ctl::fallback_options(c.redis));
  if (!fallback) spdlog::critical("redis.journal: {}", why);
  return fallback != nullptr;
}

// HTTPS's certificates (control.tls), read before serving; false when a file cannot be used.
bool open_tls(const Config& c, std::unique_ptr<ctl::TlsContext>& tls) {
  if (!c.control.tls.on()) return true;
  tls = std::make_unique<ctl::TlsContext>(c.control.tls, "control.tls");
  if (auto why = tls->load()) {
    spdlog::critical("{}", *why);
    return false;
  }
  return true;
}

// SIGHUP: the configuration file again, and HTTPS's certificate files; a file that cannot be
// used leaves the certificates in force.
void reload_on_sighup(ctl::ReloadThread& reloads, ctl::TlsContext* tls) {
  if (!tls) return reloads.request();
  reloads.request([tls](const ctl::ReloadOutcome&) {
    if (auto why = tls->load())
      spdlog::error("{}; the certificates in force stay", *why);
    else
      spdlog::info("control.tls: certificates read again");
  });
}

// The tenant registry's copy and the brake, read before serving so that the registry's tenants
// are known and a brake that is on is obeyed from the first request. Both are read at once,
// within the same 5 s; when Redis does not answer by then, serving starts all the same
// (/readyz says the registry is missing until it is read). False on an error that must stop
// the daemon.
bool start_pollers(ctl::BrakeSync& brake, ctl::RegistrySync& registry) {
  const auto read_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string err;
  if (!brake.start(std::chrono::milliseconds(0), err) && !err.empty()) {
    spdlog::critical("{}", err);
    return false;
  }
  if (!registry.start(std::chrono::seconds(5), err)) {
    if (!err.empty()) {
      spdlog::critical("{}", err);
      return false;
    }
    spdlog::warn("tenant registry: not read within 5 s; serving without it until it is");
  }
  if (!brake.wait_loaded(std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
          read_by - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{}))))
    spdlog::warn("brake: not read within 5 s; serving without it until it is");
  return true;
}

// Envoy's rate-limit service, beside the HTTP API and counted in the same metrics, when
// control.grpc_listen is set. False when it cannot listen.
bool start_rls(const Config& c, const ctl::ConfigStore& store, ctl::Metrics& metrics,
               ctl::Fallback* fallback, ctl::WaitBudget* waits, ctl::HttpServer& server,
               std::optional<ctl::RlsServer>& rls) {
  if (c.control.grpc_listen.empty()) return true;
  std::string err;
  auto creds = ctl::rls_credentials(c.control.grpc_tls, err);
  if (!creds) {
    spdlog::critical("{}", err);
    return false;
  }
  rls.emplace(store, metrics, c.control.threads, fallback, server.decisions(), waits);
  if (!rls->start(c.control.grpc_listen, err, std::move(creds))) {
    spdlog::critical("{}", err);
    return false;
  }
  spdlog::info("Envoy rate-limit service (gRPC) on {} (port {})", c.control.grpc_listen,
               rls->port());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (auto code = parse_args(argc, argv, args)) return *code;
  spdlog::set_default_logger(spdlog::stderr_color_mt("dripgate-control"));
  spdlog::set_level(spdlog::level::from_str(args.log_level));

  const ctl::Overrides overrides = overrides_of(args);
  auto loaded = ctl::load_config(args.config_file, overrides);
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::fprintf(stderr, "%s\n", e.str().c_str());
    return 1;
  }
  const Config& c = *loaded.cfg;
  if (args.print_config) {
    std::fputs(cfg::to_yaml(masked(c)).c_str(), stdout);
    return 0;
  }
  if (args.check) {
    std::printf("%s: ok\n", c.source.c_str());
    return 0;
  }

  sigset_t signals = block_signals();
  ctl::ServerOptions opts = server_options(c, args);
  std::unique_ptr<ctl::Fallback> fallback;
  if (!open_fallback(c, fallback)) return 1;
  opts.fallback = fallback.get();
  std::unique_ptr<ctl::TlsContext> tls;
  if (!open_tls(c, tls)) return 1;
  opts.tls = tls.get();
  // control.queue bounds the requests waiting for a gate in the whole daemon, both fronts.
  ctl::WaitBudget waits;
  opts.waits = &waits;
  ctl::ConfigStore store(std::make_shared<const ctl::Snapshot>(c, loaded.hash));
  ctl::Metrics metrics;
  // Before any thread may use protobuf, and destroyed after the gRPC front has stopped.
  ctl::ProtobufLog protobuf_log(metrics);
  ctl::Reloader reloader(args.config_file, overrides, store, metrics);
  // SIGHUP's reloads and POST /v1/admin/reload's run here, one at a time (reload.h).
  ctl::ReloadThread reloads(reloader);
  ctl::BrakeSync brake(store, c.redis, [&metrics](double f) { metrics.brake_factor(f); });
  ctl::RegistrySync registry(store, c.redis);
  if (!start_pollers(brake, registry)) return 1;
  // Model gates following their backends' saturation start at their configured rate.
  ctl::SaturationSync saturation(store, &metrics);
  saturation.start();
  // The status page's scrape of the dataplane and the receiver: idle until the page is watched.
  ctl::StatusScrape status(store);
  status.start();
  opts.status = &status;
  ctl::HttpServer server(store, metrics, opts, &reloads);
  std::string err;
  if (!server.start(err)) {
    spdlog::critical("{}", err);
    return 1;
  }
  spdlog::info("listening on {} (port {}, {}), {} worker threads, redis {}, config {} ({})",
               opts.listen, server.port(), tls ? "https" : "http", opts.threads,
               c.redis.cluster.empty() ? dripgate::common::redact_redis_url(c.redis.url)
                                       : "cluster (seed " + c.redis.cluster.front() + ")",
               c.source, loaded.hash);
  std::optional<ctl::RlsServer> rls;
  if (!start_rls(c, store, metrics, fallback.get(), &waits, server, rls)) return 1;

  int sig = 0;
  // SIGHUP reloads the config file (reload.h) on the reload thread, and serving goes on; the
  // others stop, whatever a reload is doing.
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) reload_on_sighup(reloads, tls.get());
  spdlog::info("{}: stopping (finishing requests in flight)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (rls) rls->stop();
  server.stop();
  server.join();
  registry.stop();
  brake.stop();
  saturation.stop();
  if (!reloads.stop(kReloadGrace)) {
    // The reload reads on (a hung mount?): the requests are answered, nothing is left to keep,
    // and waiting could be forever. The reload uses what main owns: no destructor runs.
    spdlog::warn("a reload of {} is still running after {} s; exiting without it", args.config_file,
                 kReloadGrace.count() / 1000);
    spdlog::info("stopped");
    spdlog::shutdown();
    std::_Exit(0);
  }
  spdlog::info("stopped");
  return 0;
}
