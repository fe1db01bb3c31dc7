// dripgate-control: the admission daemon. Loads the config, serves the HTTP API until SIGTERM or
// SIGINT, then stops accepting, finishes what is in flight and exits 0.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "config/config.h"
#include "control/http_server.h"

namespace {

using dripgate::config::Config;

// redis://[[user]:password@]host[:port][/db] or unix:///path, for the --redis override.
bool apply_redis_url(const std::string& url, Config& cfg, std::string& error) {
  auto& r = cfg.redis;
  r.url = url;
  if (url.rfind("unix://", 0) == 0) {
    r.unix_path = url.substr(7);
    if (r.unix_path.empty() || r.unix_path[0] != '/') {
      error = "--redis: unix url needs an absolute path";
      return false;
    }
    return true;
  }
  if (url.rfind("redis://", 0) != 0) {
    error = "--redis: want redis://host:port[/db] or unix:///path";
    return false;
  }
  std::string rest = url.substr(8);
  r.unix_path.clear();
  r.password.clear();
  r.db = 0;
  auto at = rest.rfind('@');
  if (at != std::string::npos) {
    std::string cred = rest.substr(0, at);
    auto colon = cred.find(':');
    r.password = colon == std::string::npos ? cred : cred.substr(colon + 1);
    rest = rest.substr(at + 1);
  }
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      try {
        r.db = std::stoi(db);
      } catch (...) {
        error = "--redis: bad database number '" + db + "'";
        return false;
      }
    }
  }
  r.port = 6379;
  std::string host = rest;
  auto colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos ? true
                                                                        : colon > rest.find(']')) {
    if (colon != std::string::npos) {
      host = rest.substr(0, colon);
      try {
        r.port = std::stoi(rest.substr(colon + 1));
      } catch (...) {
        error = "--redis: bad port in '" + url + "'";
        return false;
      }
    }
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty() || r.port <= 0 || r.port > 65535) {
    error = "--redis: bad host or port in '" + url + "'";
    return false;
  }
  r.host = host;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dripgate-control: admission over HTTP, decided atomically in Redis"};
  std::string config_file, listen, redis_url, log_level = "info";
  bool check = false;
  int threads = 0;
  app.add_option("--config", config_file, "YAML config file (default: the embedded default)");
  app.add_flag("--check", check, "validate the config, print every error, exit 0 or 1");
  app.add_option("--listen", listen, "override control.listen (host:port)");
  app.add_option("--redis", redis_url, "override redis.url");
  app.add_option("--threads", threads, "override control.threads")->check(CLI::Range(1, 256));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("dripgate-control"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  auto loaded = config_file.empty() ? dripgate::config::load_default()
                                    : dripgate::config::load_file(config_file);
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::fprintf(stderr, "%s\n", e.str().c_str());
    return 1;
  }
  if (check) {
    std::printf("%s: ok\n", loaded.config->source.c_str());
    return 0;
  }
  Config cfg = std::move(*loaded.config);
  if (!redis_url.empty()) {
    std::string err;
    if (!apply_redis_url(redis_url, cfg, err)) {
      std::fprintf(stderr, "%s\n", err.c_str());
      return 1;
    }
  }
  if (!listen.empty()) cfg.control.listen = listen;
  if (threads > 0) cfg.control.threads = threads;

  // Workers inherit this mask; only sigwait below sees the signals.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  dripgate::control::ServerOptions opts;
  opts.listen = cfg.control.listen;
  opts.threads = cfg.control.threads;
  dripgate::control::HttpServer server(cfg, opts);
  std::string err;
  if (!server.start(err)) {
    spdlog::critical("{}", err);
    return 1;
  }
  spdlog::info("listening on {} (port {}), {} worker threads, redis {}, config {}", opts.listen,
               server.port(), opts.threads, cfg.redis.url, cfg.source);
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("{}: stopping (finishing requests in flight)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.stop();
  server.join();
  spdlog::info("stopped");
  return 0;
}
