// The `redis` section: where the shared state lives, how to authenticate, and what happens
// while Redis cannot be reached.
#include <algorithm>
#include <optional>
#include <string>

#include "common/address.h"
#include "common/error.h"
#include "common/redis_url.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::quote;
using common::split_host_port;

namespace {

// redis.cluster: a non-empty list of host:port seeds, instead of a url.
void load_cluster_seeds(Ctx& ctx, const Fields& f, Redis& r) {
  const Entry* e = f.find("cluster");
  if (!e) return;
  if (f.find("url")) {
    ctx.error(e->value, f.path("cluster"),
              "redis.cluster and redis.url exclude each other: the cluster's seeds name its "
              "nodes (give the password with password_file or password_env)");
    return;
  }
  if (!e->value.IsSequence() || e->value.size() == 0) {
    ctx.error(e->value, f.path("cluster"),
              e->value.IsSequence()
                  ? std::string("must list at least one host:port seed")
                  : "expected a list of host:port seeds, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    auto s = get_string(ctx, e->value[i], index(f.path("cluster"), i));
    if (!s) continue;
    std::string host;
    std::optional<int> port;
    if (auto why = split_host_port(*s, true, host, port))
      ctx.error(
          e->value[i], index(f.path("cluster"), i),
          "bad seed " + quote(*s) + ": " + *why + "; expected host:port or [v6-address]:port");
    else
      r.cluster.push_back(*s);
  }
}

// redis.user: the ACL user dripgate authenticates as on every node of a cluster (seeds carry no
// url to name it in); its password comes from password_file or password_env. A single node's
// url names its own user.
void load_cluster_user(Ctx& ctx, const Fields& f, Redis& r) {
  const Entry* e = f.find("user");
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path("user"));
  if (!s) return;
  if (!f.find("cluster")) {
    ctx.error(e->value, f.path("user"),
              "only with redis.cluster: a url names its own user (redis://user@host)");
    return;
  }
  if (s->empty() ||
      std::any_of(s->begin(), s->end(), [](unsigned char c) { return c <= ' ' || c == 0x7f; })) {
    ctx.error(e->value, f.path("user"),
              "must be a Redis ACL user name: not empty, no spaces or control characters");
    return;
  }
  if (r.password.empty()) {
    ctx.error(e->value, f.path("user"),
              "user " + quote(*s) + " has no password (add password_file or password_env)");
    return;
  }
  r.user = *s;
}

// journal_fsync: always | never | a flush interval in ms.
void load_journal_fsync(Ctx& ctx, const Fields& f, Redis& r) {
  const Entry* e = f.find("journal_fsync");
  if (!e) return;
  const std::string path = f.path("journal_fsync");
  if (e->value.IsScalar() && e->value.Scalar() == "always") {
    r.journal_fsync = Redis::JournalSync::kAlways;
  } else if (e->value.IsScalar() && e->value.Scalar() == "never") {
    r.journal_fsync = Redis::JournalSync::kNever;
  } else if (e->value.IsScalar() &&
             e->value.Scalar().find_first_not_of("0123456789") == std::string::npos) {
    if (auto ms = get_int(ctx, e->value, path, 1, 60'000)) {
      r.journal_fsync = Redis::JournalSync::kInterval;
      r.journal_fsync_ms = static_cast<int>(*ms);
    }
  } else {
    ctx.error(e->value, path,
              "expected always (flush before answering), never (the kernel's own time) or a "
              "flush interval in ms (e.g. 100)");
  }
}

void load_breaker(Ctx& ctx, const Fields& parent, Redis::Breaker& b) {
  const Entry* e = parent.find("breaker");
  if (!e) return;
  Fields f(ctx, e->value, parent.path("breaker"), {"failures", "open_ms", "probes"});
  if (!f.ok()) return;
  set_int(ctx, f, "failures", b.failures, 1, 1000);
  set_int(ctx, f, "open_ms", b.open_ms, 1, 600'000);
  set_int(ctx, f, "probes", b.probes, 1, 1000);
}

void load_failure_policy(Ctx& ctx, const Fields& f, Redis& r, LocalModeUse& local) {
  if (auto mode = get_on_failure(ctx, f)) {
    r.on_failure = *mode;
    if (*mode == OnFailure::kLocal) local = {f.find("on_failure")->value, f.path("on_failure")};
  }
  set_share(ctx, f, "local_share", {0, true, "the share of each limit one daemon uses alone"},
            "the whole limit", r.local_share);
  set_nonempty_string(ctx, f, f.find("journal"), "journal", "journal", r.journal);
  load_journal_fsync(ctx, f, r);
  load_breaker(ctx, f, r.breaker);
  set_int(ctx, f, "journal_max_mb", r.journal_max_mb, 1, 1 << 20);
  if (const Entry* e = f.find("journal_full"))
    if (auto s = get_string(ctx, e->value, f.path("journal_full"))) {
      auto mode = parse_on_failure(*s);
      if (mode && *mode != OnFailure::kLocal)
        r.journal_full = *mode;
      else
        ctx.error(e->value, f.path("journal_full"),
                  "unknown mode " + quote(*s) +
                      "; expected closed (503) or open (admit, unchecked) once the journal holds "
                      "redis.journal_max_mb");
    }
}

}  // namespace

void load_redis(Ctx& ctx, const YAML::Node& n, Redis& r, LocalModeUse& local) {
  Fields f(ctx, n, "redis",
           {"url", "password_file", "password_env", "timeout_ms", "pool_size", "cluster", "user",
            "on_failure", "local_share", "journal", "journal_fsync", "journal_max_mb",
            "journal_full", "breaker"});
  if (!f.ok()) return;
  // The secret first: the url's checks (a user needs a password; not two passwords) see it.
  load_secret_file(ctx, f, "password_file", r.password_file, r.password);
  load_secret_env(ctx, f, "password_env", "password_file", r.password_env, r.password);
  if (const Entry* e = f.find("url")) {
    if (auto s = get_string(ctx, e->value, f.path("url"))) {
      if (auto why = r.set_url(*s))
        ctx.error(e->value, f.path("url"),
                  "bad redis URL " + quote(common::redact_redis_url(*s)) + ": " + *why +
                      "; expected redis://[[user][:password]@]host[:port][/db] or unix:///path");
    }
  }
  set_int(ctx, f, "timeout_ms", r.timeout_ms, 1);
  set_int(ctx, f, "pool_size", r.pool_size, 1);
  load_cluster_seeds(ctx, f, r);
  load_cluster_user(ctx, f, r);
  load_failure_policy(ctx, f, r, local);
}

}  // namespace dripgate::config::loader
