#include "control/registry/brake_sync.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "control/admission/keys.h"

namespace dripgate::control {

using json = nlohmann::json;

namespace {

const std::string& brake_key() {
  static const std::string k = keys::brake();
  return k;
}

// Why a reply is an error; empty when it is not.
std::string bad_reply(const redisReply* r, std::string_view error) {
  if (!r) return std::string(error.empty() ? "redis: no reply" : error);
  if (r->type == REDIS_REPLY_ERROR) return "redis: " + std::string(r->str, r->len);
  return {};
}

}  // namespace

std::string brake::encode(const Brake& b) {
  return json{{"factor", b.factor}, {"exempt_plans", b.exempt_plans}}.dump();
}

std::optional<Brake> brake::decode(std::string_view value) {
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto f = j.find("factor");
  auto e = j.find("exempt_plans");
  if (f == j.end() || !f->is_number() || e == j.end() || !e->is_array()) return std::nullopt;
  Brake b;
  b.factor = f->get<double>();
  if (!(b.factor >= 0 && b.factor <= 1)) return std::nullopt;
  for (const auto& p : *e) {
    if (!p.is_string()) return std::nullopt;
    b.exempt_plans.push_back(p.get<std::string>());
  }
  std::sort(b.exempt_plans.begin(), b.exempt_plans.end());
  return b;
}

void brake::set(RedisCalls& redis, const Brake& b, std::function<void(std::string)> done) {
  std::string value = encode(b);
  std::string ttl = std::to_string(b.ttl_s);
  std::array<std::string_view, 5> argv{"SET", brake_key(), value, "EX", ttl};
  redis.command(argv, [done = std::move(done)](const redisReply* r, std::string_view error) {
    done(bad_reply(r, error));
  });
}

void brake::lift(RedisCalls& redis, std::function<void(std::string)> done) {
  std::array<std::string_view, 2> argv{"DEL", brake_key()};
  redis.command(argv, [done = std::move(done)](const redisReply* r, std::string_view error) {
    done(bad_reply(r, error));
  });
}

void brake::read(RedisCalls& redis, std::function<void(std::optional<Brake>, std::string)> done) {
  std::array<std::string_view, 2> get{"GET", brake_key()};
  redis.command(
      get, [&redis, done = std::move(done)](const redisReply* r, std::string_view error) mutable {
        if (std::string bad = bad_reply(r, error); !bad.empty()) return done(std::nullopt, bad);
        if (r->type != REDIS_REPLY_STRING) return done(std::nullopt, {});
        std::optional<Brake> b = decode(std::string_view(r->str, r->len));
        if (!b) return done(std::nullopt, "redis: " + keys::brake() + " holds no brake");
        std::array<std::string_view, 2> ttl{"TTL", brake_key()};
        redis.command(ttl, [b = std::move(*b), done = std::move(done)](
                               const redisReply* r, std::string_view error) mutable {
          if (std::string bad = bad_reply(r, error); !bad.empty()) return done(std::nullopt, bad);
          // Gone in between (-2): lifted itself.
          if (r->type != REDIS_REPLY_INTEGER || r->integer == -2) return done(std::nullopt, {});
          b.ttl_s = r->integer;
          done(std::move(b), {});
        });
      });
}

BrakeSync::BrakeSync(ConfigStore& store, const config::Redis& redis,
                     std::function<void(double)> on_factor, std::chrono::milliseconds poll)
    : store_(store), on_factor_(std::move(on_factor)), poller_(redis, poll, {}, "brake") {}

bool BrakeSync::start(std::chrono::milliseconds wait, std::string& error) {
  return poller_.start([this] { poll(); }, wait, error);
}

void BrakeSync::poll() {
  if (busy_) return;
  busy_ = true;
  std::array<std::string_view, 2> argv{"GET", brake_key()};
  poller_.redis()->command(
      argv, [this](const redisReply* r, std::string_view error) { on_value(r, error); });
}

void BrakeSync::on_value(const redisReply* r, std::string_view error) {
  busy_ = false;
  if (std::string bad = bad_reply(r, error); !bad.empty()) {
    if (poller_.stopping() || failing_) return;
    failing_ = true;
    spdlog::warn("brake: cannot read it ({}); the brake read last stays in force", bad);
    return;
  }
  if (failing_) spdlog::info("brake: reachable again");
  failing_ = false;
  std::string value = r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "";
  if (last_ != value) {
    std::optional<Brake> b;
    if (!value.empty() && !(b = brake::decode(value)))
      spdlog::warn("brake: {} holds no brake; ignored", keys::brake());
    if (b) {
      std::string exempt;
      for (const auto& p : b->exempt_plans) exempt += (exempt.empty() ? "" : ", ") + p;
      spdlog::warn("brake: on, factor {} (exempt: {})", b->factor,
                   exempt.empty() ? "none" : exempt);
    } else if (last_ && !last_->empty())
      spdlog::info("brake: off");
    store_.publish_brake(b && b->factor < 1 ? std::make_shared<const Brake>(std::move(*b))
                                            : nullptr);
    if (on_factor_) on_factor_(b ? b->factor : 1.0);
    last_ = std::move(value);
  }
  poller_.set_loaded();
}

}  // namespace dripgate::control
