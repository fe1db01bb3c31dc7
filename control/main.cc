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
#include <optional>
#include <string>

#include "common/address.h"
#include "common/error.h"
#include "common/redis_url.h"
#include "config/config.h"
#include "control/http/http_server.h"
#include "control/outage/fallback.h"
#include "control/registry/brake_sync.h"
#include "control/registry/reload.h"
#include "control/registry/tenant_registry.h"
#include "control/rls/rls_service.h"

using dripgate::config::Config;

namespace {

// What --print-config shows: the configuration without its secrets (an inline password or
// token; files are named, not read out).
Config masked(Config cfg) {
  cfg.redis.url = dripgate::common::redact_redis_url(cfg.redis.url);
  if (!cfg.control.auth_token.empty() && cfg.control.auth_token_file.empty() &&
      cfg.control.auth_token_env.empty())
    cfg.control.auth_token = "***";
  if (!cfg.control.admin_token.empty() && cfg.control.admin_token_file.empty() &&
      cfg.control.admin_token_env.empty())
    cfg.control.admin_token = "***";
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dripgate-control: admission over HTTP, decided atomically in Redis"};
  std::string config_file, listen, redis_url, log_level = "info";
  bool check = false, print_config = false, no_io_uring = false;
  int threads = 0;
  app.add_option("--config", config_file, "YAML config file (default: the embedded default)");
  app.add_flag("--check", check, "validate the config, print every error, exit 0 or 1");
  app.add_flag("--print-config", print_config,
               "print the configuration in force (file, defaults and overrides) as YAML, secrets "
               "masked, and exit");
  app.add_option("--listen", listen, "override control.listen (host:port)");
  app.add_option("--redis", redis_url, "override redis.url");
  app.add_option("--threads", threads, "override control.threads")->check(CLI::Range(1, 256));
  app.add_flag("--no-io-uring", no_io_uring,
               "send each HTTP answer with its own send() instead of one io_uring submission per "
               "event-loop pass (for comparison; used anyway where the kernel refuses io_uring)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("dripgate-control"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Applied at start and again to every reload, so a reloaded file keeps them.
  auto overrides = [&](Config& cfg) -> std::optional<dripgate::config::Error> {
    if (!redis_url.empty()) {
      if (auto why = cfg.redis.set_url(redis_url))
        return dripgate::config::Error{
            "--redis", 0, 0, "",
            "bad redis URL " +
                dripgate::common::quote(dripgate::common::redact_redis_url(redis_url)) + ": " +
                *why};
      cfg.redis.cluster.clear();  // --redis names one node, in place of any cluster seeds
    }
    if (!listen.empty()) {
      std::string host;
      std::optional<int> port;
      if (auto why = dripgate::common::split_host_port(listen, true, host, port))
        return dripgate::config::Error{
            "--listen", 0, 0, "",
            "bad listen address " + dripgate::common::quote(listen) + ": " + *why};
      cfg.control.listen = listen;
    }
    if (threads > 0) cfg.control.threads = threads;
    return std::nullopt;
  };
  auto loaded = dripgate::control::load_config(config_file, overrides);
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::fprintf(stderr, "%s\n", e.str().c_str());
    return 1;
  }
  const Config& cfg = *loaded.cfg;
  if (print_config) {
    std::fputs(dripgate::config::to_yaml(masked(cfg)).c_str(), stdout);
    return 0;
  }
  if (check) {
    std::printf("%s: ok\n", cfg.source.c_str());
    return 0;
  }

  // Workers inherit this mask; only sigwait below sees the signals.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  dripgate::control::ServerOptions opts;
  opts.listen = cfg.control.listen;
  opts.threads = cfg.control.threads;
  opts.max_connections = cfg.control.max_connections;
  opts.request_timeout_s = cfg.control.request_timeout_s;
  opts.io_uring = !no_io_uring;
  // Local decisions (redis.on_failure: local) and the journal that carries them into Redis,
  // read back first: a restart during an outage keeps what was decided before it.
  std::unique_ptr<dripgate::control::Fallback> fallback;
  if (!cfg.redis.journal.empty()) {
    std::string why;
    fallback = dripgate::control::Fallback::open(cfg.redis.journal, &why);
    if (!fallback) {
      spdlog::critical("redis.journal: {}", why);
      return 1;
    }
    opts.fallback = fallback.get();
  }
  dripgate::control::ConfigStore store(
      std::make_shared<const dripgate::control::Snapshot>(cfg, loaded.hash));
  dripgate::control::Metrics metrics;
  dripgate::control::Reloader reloader(config_file, overrides, store, metrics);
  // The tenant registry's copy, read before serving so that its tenants are known from the first
  // request; when Redis does not answer within the wait, serving starts all the same (/readyz
  // says the registry is missing until it is read).
  // The brake too, so that a daemon started while it is on obeys it from the first request;
  // both are read at once, within the same 5 s.
  const auto read_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string err;
  dripgate::control::BrakeSync brake(store, cfg.redis,
                                     [&metrics](double f) { metrics.brake_factor(f); });
  if (!brake.start(std::chrono::milliseconds(0), err) && !err.empty()) {
    spdlog::critical("{}", err);
    return 1;
  }
  dripgate::control::RegistrySync registry(store, cfg.redis);
  if (!registry.start(std::chrono::seconds(5), err)) {
    if (!err.empty()) {
      spdlog::critical("{}", err);
      return 1;
    }
    spdlog::warn("tenant registry: not read within 5 s; serving without it until it is");
  }
  if (!brake.wait_loaded(std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
          read_by - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{}))))
    spdlog::warn("brake: not read within 5 s; serving without it until it is");
  dripgate::control::HttpServer server(store, metrics, opts, &reloader);
  if (!server.start(err)) {
    spdlog::critical("{}", err);
    return 1;
  }
  spdlog::info("listening on {} (port {}), {} worker threads, redis {}, config {} ({})",
               opts.listen, server.port(), opts.threads,
               cfg.redis.cluster.empty() ? dripgate::common::redact_redis_url(cfg.redis.url)
                                         : "cluster (seed " + cfg.redis.cluster.front() + ")",
               cfg.source, loaded.hash);
  // Envoy's rate-limit service, beside the HTTP API and counted in the same metrics.
  std::optional<dripgate::control::RlsServer> rls;
  if (!cfg.control.grpc_listen.empty()) {
    rls.emplace(store, metrics, opts.threads, fallback.get(), server.decisions());
    if (!rls->start(cfg.control.grpc_listen, err)) {
      spdlog::critical("{}", err);
      return 1;
    }
    spdlog::info("Envoy rate-limit service (gRPC) on {} (port {})", cfg.control.grpc_listen,
                 rls->port());
  }
  int sig = 0;
  // SIGHUP reloads the config file (reload.h) and serving goes on; the others stop.
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) reloader.reload();
  spdlog::info("{}: stopping (finishing requests in flight)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (rls) rls->stop();
  server.stop();
  server.join();
  registry.stop();
  brake.stop();
  spdlog::info("stopped");
  return 0;
}
