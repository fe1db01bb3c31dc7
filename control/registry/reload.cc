#include "control/registry/reload.h"

#include <spdlog/spdlog.h>

#include <malloc.h>

#include <utility>

namespace dripgate::control {

std::string config_hash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "fnv1a64:0000000000000000";
  for (size_t i = out.size(); i-- > 8; h >>= 4) out[i] = kDigits[h & 0xf];
  return out;
}

Loaded load_config(const std::string& path, const Overrides& overrides) {
  Loaded out;
  config::LoadResult r;
  if (path.empty()) {
    r = config::load_default();
    out.hash = config_hash(config::default_yaml());
  } else {
    // The text is read once, so that the hash is of exactly what was loaded; what is not a
    // configuration file (a directory, a FIFO, a device, too large) is refused unread.
    std::string text;
    if (auto why = config::read_config_file(path, text)) {
      r.errors.push_back(std::move(*why));
    } else {
      out.hash = config_hash(text);
      r = config::load_string(text, path);
    }
  }
  // The parse (yaml-cpp's node tree: about 1 KB per listed tenant) is freed by now, but glibc
  // keeps the pages; given back, 100,000 tenants cost what the tables hold, not what parsing
  // took (measured: 216 MB resident before, 107 MB after).
  malloc_trim(0);
  out.errors = std::move(r.errors);
  if (!out.errors.empty()) return out;
  if (auto why = overrides ? overrides(*r.config) : std::nullopt) {
    out.errors.push_back(std::move(*why));
    return out;
  }
  out.cfg = std::move(r.config);
  return out;
}

std::vector<config::Error> restart_only_changes(const config::Config& running,
                                                const config::Config& next) {
  std::vector<config::Error> out;
  auto differs = [&](bool changed, const char* field) {
    if (changed)
      out.push_back(config::Error{next.source, 0, 0, field,
                                  "changes only on a restart; the reload is refused (put the "
                                  "running value back, or restart)"});
  };
  const config::Redis &r = running.redis, &n = next.redis;
  differs(r.url != n.url, "redis.url");
  differs(r.cluster != n.cluster, "redis.cluster");
  differs(r.password_file != n.password_file || r.password_env != n.password_env ||
              r.password != n.password,
          "redis.password");
  differs(r.timeout_ms != n.timeout_ms, "redis.timeout_ms");
  differs(r.pool_size != n.pool_size, "redis.pool_size");
  // The journal is opened once: the local decisions not yet reconciled are in the running one.
  differs(r.journal != n.journal, "redis.journal");
  const config::Control &c = running.control, &d = next.control;
  differs(c.listen != d.listen, "control.listen");
  differs(c.threads != d.threads, "control.threads");
  differs(c.dataplane_socket != d.dataplane_socket, "control.dataplane_socket");
  differs(c.max_connections != d.max_connections, "control.max_connections");
  differs(c.request_timeout_s != d.request_timeout_s, "control.request_timeout_s");
  differs(c.decision_log != d.decision_log, "control.decision_log");
  differs(c.grpc_listen != d.grpc_listen, "control.grpc_listen");
  // The files are read again on SIGHUP (new certificates); where they are, on a restart.
  differs(c.tls != d.tls, "control.tls");
  differs(c.grpc_tls != d.grpc_tls, "control.grpc_tls");
  // Any other setting of these sections (one added later) is restart-only too, unless listed
  // here as reloadable: the tokens, the rate-limit service's domains and its cap on calls in
  // flight, OpenAI's headers, and the outage policy (redis.on_failure, redis.local_share) are
  // read per request.
  if (out.empty()) {
    config::Redis rr = r, rn = n;
    for (config::Redis* x : {&rr, &rn}) {
      x->on_failure = config::OnFailure::kClosed;
      x->local_share = 1;
    }
    config::Control cr = c, cn = d;
    for (config::Control* x : {&cr, &cn}) {
      x->auth_token = x->auth_token_file = x->auth_token_env = "";
      x->admin_token = x->admin_token_file = x->admin_token_env = "";
      x->rls_domains.clear();
      x->grpc_max_inflight = 0;
      x->openai_headers = true;
    }
    differs(!(rr == rn), "redis");
    differs(!(cr == cn), "control");
  }
  return out;
}

Reloader::Reloader(std::string path, Overrides overrides, ConfigStore& store, Metrics& metrics)
    : path_(std::move(path)), overrides_(std::move(overrides)), store_(store), metrics_(metrics) {}

ReloadOutcome Reloader::reload() {
  std::lock_guard lock(mu_);
  std::shared_ptr<const Snapshot> running = store_.current();
  Loaded next = load_config(path_, overrides_);
  if (next.cfg) next.errors = restart_only_changes(running->cfg, *next.cfg);
  ReloadOutcome out;
  if (next.errors.empty()) {
    std::string source = next.cfg->source;
    store_.publish(std::make_shared<const Snapshot>(std::move(*next.cfg), next.hash));
    out.ok = true;
    out.hash = next.hash;
    spdlog::info("config reloaded from {} ({})", source, next.hash);
  } else {
    out.hash = running->hash;
    spdlog::error("config reload refused ({} errors); the running configuration stays:",
                  next.errors.size());
    for (const auto& e : next.errors) {
      out.errors.push_back(e.str());
      spdlog::error("{}", out.errors.back());
    }
  }
  metrics_.config_reload(out.ok);
  return out;
}

ReloadThread::ReloadThread(Reloader& reloader)
    : thread_([&reloader, state = state_] { run(reloader, state); }) {}

ReloadThread::~ReloadThread() {
  if (thread_.joinable()) stop(std::chrono::milliseconds::max());
}

void ReloadThread::request(Done done) {
  std::lock_guard lock(state_->mu);
  if (state_->stopping) return;
  state_->pending = true;
  if (done) state_->waiting.push_back(std::move(done));
  state_->cv.notify_all();
}

bool ReloadThread::stop(std::chrono::milliseconds grace) {
  std::unique_lock lock(state_->mu);
  state_->stopping = true;
  state_->cv.notify_all();
  const auto idle = [this] { return !state_->busy; };
  const bool done = grace == std::chrono::milliseconds::max()
                        ? (state_->cv.wait(lock, idle), true)
                        : state_->cv.wait_for(lock, grace, idle);
  lock.unlock();
  if (done)
    thread_.join();
  else
    thread_.detach();
  return done;
}

void ReloadThread::run(Reloader& reloader, const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  for (;;) {
    state->cv.wait(lock, [&] { return state->pending || state->stopping; });
    if (state->stopping) return;
    state->pending = false;  // requests from here on make the next reload
    std::vector<Done> askers;
    askers.swap(state->waiting);
    state->busy = true;
    lock.unlock();
    spdlog::debug("reloading the configuration ({} waiting for the outcome)", askers.size());
    const ReloadOutcome out = reloader.reload();
    for (Done& done : askers) done(out);
    lock.lock();
    state->busy = false;
    state->cv.notify_all();
  }
}

}  // namespace dripgate::control
