#include "control/redis/redis_calls.h"

#include "control/redis/redis_cluster.h"

namespace dripgate::control {

namespace {

// RedisClient as RedisCalls: the client itself keeps no virtual calls of its own.
class OneNode final : public RedisCalls {
 public:
  OneNode(event_base* base, const config::Redis& r, std::vector<const lua::Script*> scripts,
          RedisObserver* observer)
      : client_(base, RedisOptions::from(r), std::move(scripts), observer),
        timeout_ms_(RedisOptions::from(r).timeout_ms) {}

  void evalsha(const lua::Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> args, Callback cb, LateReply late,
               WhenStalled stalled) override {
    client_.evalsha(script, keys, args, std::move(cb), std::move(late), stalled);
  }
  void command(std::span<const std::string_view> argv, Callback cb) override {
    client_.command(argv, std::move(cb));
  }
  void post(std::function<void()> fn) override { client_.post(std::move(fn)); }
  int64_t script_deadline_ms() const override { return client_.script_deadline_ms(timeout_ms_); }
  int64_t clock_offset_ms() const override {
    const int64_t o = client_.clock_offset_ms();
    return o == RedisClient::kUnknownOffset ? 0 : o;
  }
  bool up() const override { return client_.up(); }
  int connected() const override { return client_.connected(); }
  std::string_view state() const override { return client_.state(); }

 private:
  RedisClient client_;
  int timeout_ms_;
};

}  // namespace

std::unique_ptr<RedisCalls> make_redis_calls(event_base* base, const config::Redis& r,
                                             std::vector<const lua::Script*> scripts,
                                             RedisObserver* observer) {
  if (!r.cluster.empty())
    return std::make_unique<RedisCluster>(base, RedisClusterOptions::from(r), std::move(scripts),
                                          observer);
  return std::make_unique<OneNode>(base, r, std::move(scripts), observer);
}

}  // namespace dripgate::control
