// The async Redis client against a real redis-server on a real libevent loop.
#include "control/redis/redis_client.h"

#include <event2/event.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "lua/lua_scripts.h"
#include "tests/event_loop.h"
#include "tests/redis_result.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct Observer : RedisObserver {
  std::map<std::string, int> errors;
  std::vector<bool> ups;
  int round_trips = 0;
  void round_trip(double s) override {
    EXPECT_GE(s, 0);
    ++round_trips;
  }
  void error(const std::string& kind) override { ++errors[kind]; }
  void up(bool is_up) override { ups.push_back(is_up); }
};

using Result = dripgate::testing::RedisResult;

using Loop = dripgate::testing::EventLoop;

RedisClient::Callback into(Result& out) {
  return out.into();
}

RedisOptions options(int port, int timeout_ms = 1000) {
  RedisOptions o;
  o.port = port;
  o.timeout_ms = timeout_ms;
  o.pool_size = 2;
  return o;
}

std::vector<const lua::Script*> all_scripts() {
  return std::vector<const lua::Script*>(std::begin(lua::kAll), std::end(lua::kAll));
}

// What the default logger writes while it lives, until stop().
class LogCapture {
 public:
  LogCapture() : saved_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { stop(); }
  std::string text() const { return text_.str(); }
  std::string stop() {
    if (saved_) spdlog::set_default_logger(std::exchange(saved_, nullptr));
    return text_.str();
  }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> saved_;
};

Result call(Loop& loop, RedisClient& c, std::vector<std::string_view> argv) {
  Result r;
  c.command(argv, into(r));
  EXPECT_FALSE(r.done) << "callback ran inside command()";
  EXPECT_TRUE(loop.wait_until([&] { return r.done; }, milliseconds(5000)));
  return r;
}

TEST(RedisClient, CommandsAndScriptsLoadedAtConnect) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisClient c(loop.base(), options(redis.port()), all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  Result set = call(loop, c, {"SET", "k", "v\r\n with bytes"});
  EXPECT_EQ(set.str, "OK");
  Result get = call(loop, c, {"GET", "k"});
  EXPECT_EQ(get.str, "v\r\n with bytes");
  // Every script is in the cache once a connection is up, under the SHA1 computed at build.
  for (const auto* s : lua::kAll) {
    EXPECT_EQ(redis.cli("SCRIPT EXISTS " + std::string(s->sha1)), "1") << s->name;
  }
  // release.lua on a missing lease answers 0.
  Result ev;
  std::string_view keys[] = {"dg:{t:x}:leases"};
  std::string_view args[] = {"x.1"};
  c.evalsha(lua::kRelease, keys, args, into(ev));
  ASSERT_TRUE(loop.wait_until([&] { return ev.done; }, milliseconds(3000)));
  EXPECT_EQ(ev.type, REDIS_REPLY_INTEGER) << ev.error << ev.str;
  EXPECT_EQ(ev.integer, 0);
  EXPECT_GE(obs.round_trips, 3);
  ASSERT_FALSE(obs.ups.empty());
  EXPECT_TRUE(obs.ups.back());
}

// A Redis ACL user (redis://user:password@host) authenticates as itself, not as the default user.
TEST(RedisClient, AclUserAuthenticatesAsItself) {
  testing::RedisServer redis;
  ASSERT_EQ(redis.cli("ACL SETUSER gateway on '>s3cret' '~*' '+@all'"), "OK");
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port());
  o.user = "gateway";
  o.password = "s3cret";
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  EXPECT_EQ(call(loop, c, {"ACL", "WHOAMI"}).str, "gateway");
  EXPECT_EQ(obs.errors["auth"], 0);
}

TEST(RedisClient, NoscriptLoadsAndRetries) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisClient c(loop.base(), options(redis.port()), all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  redis.cli("ZADD dg:{t:x}:leases 99999999999999 x.1");
  EXPECT_EQ(redis.cli("SCRIPT FLUSH"), "OK");
  EXPECT_EQ(redis.cli("SCRIPT EXISTS " + std::string(lua::kRelease.sha1)), "0");
  Result ev;
  std::string_view keys[] = {"dg:{t:x}:leases"};
  std::string_view args[] = {"x.1"};
  c.evalsha(lua::kRelease, keys, args, into(ev));
  ASSERT_TRUE(loop.wait_until([&] { return ev.done; }, milliseconds(3000)));
  EXPECT_EQ(ev.type, REDIS_REPLY_INTEGER) << ev.error << ev.str;
  EXPECT_EQ(ev.integer, 1);
  EXPECT_EQ(obs.errors["noscript"], 1);
  EXPECT_EQ(redis.cli("SCRIPT EXISTS " + std::string(lua::kRelease.sha1)), "1");
}

TEST(RedisClient, NoServerFailsFastAndNeverInline) {
  int port = testing::free_port();
  Loop loop;
  Observer obs;
  RedisOptions o = options(port);
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  auto t0 = Clock::now();
  Result r = call(loop, c, {"PING"});
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));
  EXPECT_FALSE(c.up());
  EXPECT_EQ(r.type, 0);
  EXPECT_EQ(r.error.rfind("redis: ", 0), 0u) << r.error;
  EXPECT_GE(obs.errors["connect"], 1);
  bool ran = false;
  c.post([&] { ran = true; });
  EXPECT_FALSE(ran);
  EXPECT_TRUE(loop.wait_until([&] { return ran; }, milliseconds(1000)));
}

// A call is answered by its deadline, and its connection, stalled, is dropped at once: the call
// may still run (a paused Redis runs what it read once it resumes), so its LateReply learns
// that it may have (no reply), and new calls fail fast, unwritten, while the pool reconnects.
TEST(RedisClient, TimeoutDropsTheStalledConnection) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port(), 100);
  o.pool_size = 1;
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  redis.cli("ZADD dg:{t:x}:leases 99999999999999 x.1");
  ASSERT_EQ(redis.cli("CLIENT PAUSE 700 ALL"), "OK");
  Result r;
  int lost = 0, late_replies = 0;
  std::string_view keys[] = {"dg:{t:x}:leases"};
  std::string_view args[] = {"x.1"};
  auto t0 = Clock::now();
  c.evalsha(lua::kRelease, keys, args, into(r),
            [&](const redisReply* reply) { ++(reply ? late_replies : lost); });
  ASSERT_TRUE(loop.wait_until([&] { return r.done; }, milliseconds(3000)));
  auto took = Clock::now() - t0;
  EXPECT_EQ(r.error, "redis: timeout after 100 ms");
  EXPECT_GE(took, milliseconds(90));
  EXPECT_LT(took, milliseconds(600));
  EXPECT_EQ(obs.errors["timeout"], 1);
  EXPECT_EQ(obs.errors["stall"], 1);
  EXPECT_FALSE(c.up());
  // The reconnect's setup waits behind the pause: a call does not wait behind it.
  Result fast = call(loop, c, {"PING"});
  EXPECT_EQ(fast.error, "redis: not connected");
  ASSERT_TRUE(loop.wait_until([&] { return lost == 1; }, milliseconds(3000)));
  EXPECT_EQ(late_replies, 0);
  EXPECT_EQ(obs.errors["lost"], 1);
  EXPECT_TRUE(
      loop.wait_until([&] { return call(loop, c, {"PING"}).str == "PONG"; }, milliseconds(5000)));
}

// A written call whose connection goes away before its reply (Redis killed) may have run: its
// LateReply learns so, with no reply, after the call itself was answered, on the loop.
TEST(RedisClient, LostReplyIsHandedToTheLateReply) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port(), 5000);
  o.pool_size = 1;
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  ASSERT_EQ(redis.cli("CLIENT PAUSE 5000 ALL"), "OK");
  Result r;
  int lost = 0, late_replies = 0;
  std::string_view keys[] = {"dg:{t:x}:leases"};
  std::string_view args[] = {"x.1"};
  c.evalsha(lua::kRelease, keys, args, into(r), [&](const redisReply* reply) {
    EXPECT_TRUE(r.done) << "the late reply came before the call was answered";
    ++(reply ? late_replies : lost);
  });
  loop.wait_until([] { return false; }, milliseconds(200));  // written, unanswered
  redis.stop();
  ASSERT_TRUE(loop.wait_until([&] { return lost == 1; }, milliseconds(3000)));
  EXPECT_EQ(r.error.rfind("redis: connection lost", 0), 0u) << r.error;
  EXPECT_EQ(late_replies, 0);
  EXPECT_EQ(obs.errors["lost"], 1);
}

// An undo call (WhenStalled::kQueue) made while Redis is down is held, not refused, and runs
// first once a connection is up again; a plain call fails at once.
TEST(RedisClient, QueuedCallsWaitForAConnection) {
  testing::RedisServer redis(testing::RedisServer::Durability::kAppendFsyncAlways);
  Loop loop;
  RedisOptions o = options(redis.port());
  RedisClient c(loop.base(), o, all_scripts());
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  redis.cli("ZADD dg:{t:x}:leases 99999999999999 x.1");
  redis.stop();
  ASSERT_TRUE(loop.wait_until([&] { return !c.up(); }, milliseconds(3000)));
  Result held, plain;
  std::string_view keys[] = {"dg:{t:x}:leases"};
  std::string_view args[] = {"x.1"};
  c.evalsha(lua::kRelease, keys, args, into(held), {}, RedisClient::WhenStalled::kQueue);
  c.evalsha(lua::kRelease, keys, args, into(plain));
  ASSERT_TRUE(loop.wait_until([&] { return plain.done; }, milliseconds(3000)));
  EXPECT_EQ(plain.error, "redis: not connected");
  loop.wait_until([] { return false; }, milliseconds(500));
  EXPECT_FALSE(held.done);
  redis.start();
  ASSERT_TRUE(loop.wait_until([&] { return held.done; }, milliseconds(5000)));
  EXPECT_EQ(held.error, "");
  EXPECT_EQ(held.integer, 1);  // the lease the restarted Redis loaded was ended
}

// Redis stopped (SIGSTOP): the kernel accepts connections for it and nothing answers. Under a
// steady 500 calls a second (INCR, so that Redis counts every call that reached it), the first
// call past its deadline drops its connection; every reconnect connects and is dropped when its
// setup goes unanswered, and meanwhile the calls fail fast: the median failure after the first
// timeout is answered well inside timeout_ms (about 1 ms; the bound is a fifth of the 50 ms
// it would otherwise wait out), and Redis, once continued, ran only the few
// calls written before the stall was seen (not one per call of the stop).
TEST(RedisClient, StalledRedisIsDroppedAndCallsFailFast) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port(), 50);
  o.connect_timeout_ms = 200;  // so that the stop sees several reconnects
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  int answered = 0;
  std::vector<double> failed_ms;  // after the first timeout
  bool timed_out = false, stopped = false;
  size_t most_in_flight = 0;
  int in_flight = 0;
  auto issue = [&] {
    auto t0 = Clock::now();
    ++in_flight;
    c.command(std::vector<std::string_view>{"INCR", "calls"}, [&, t0](const redisReply* r,
                                                                      std::string_view error) {
      --in_flight;
      if (r) return static_cast<void>(++answered);
      if (error.starts_with("redis: timeout")) timed_out = true;
      if (stopped && timed_out && !error.starts_with("redis: timeout"))
        failed_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    });
    most_in_flight = std::max(most_in_flight, static_cast<size_t>(in_flight));
  };
  auto run_for = [&](milliseconds d) {
    for (auto until = Clock::now() + d; Clock::now() < until;) {
      issue();
      loop.wait_until([] { return false; }, milliseconds(2));
    }
  };
  run_for(milliseconds(300));
  redis.pause();
  stopped = true;
  run_for(milliseconds(2000));
  stopped = false;
  redis.resume();
  run_for(milliseconds(300));
  ASSERT_TRUE(loop.wait_until([&] { return in_flight == 0; }, milliseconds(3000)));
  ASSERT_TRUE(timed_out);
  ASSERT_GE(failed_ms.size(), 100u);
  std::sort(failed_ms.begin(), failed_ms.end());
  const double median = failed_ms[failed_ms.size() / 2];
  EXPECT_LT(median, 50.0 / 5) << "p99 " << failed_ms[failed_ms.size() * 99 / 100];
  EXPECT_GE(obs.errors["stall"], 2);  // the first stall, and a reconnect's unanswered setup
  EXPECT_GE(obs.errors["fail_fast"], 100);
  // Every call Redis ran was either answered or written in the ~50 ms before the stall was
  // seen (25 at this rate; 100 allows for a slow loop), not one per call of the 2 s stop.
  ASSERT_TRUE(
      loop.wait_until([&] { return call(loop, c, {"PING"}).str == "PONG"; }, milliseconds(5000)));
  const int ran = std::stoi(redis.cli("GET calls"));
  EXPECT_LE(ran - answered, 100) << ran << " ran, " << answered << " answered";
  EXPECT_LE(most_in_flight, 200u);
  std::printf(
      "stopped Redis: %zu failed fast (median %.2f ms, p99 %.2f ms), %d ran unanswered, "
      "%zu in flight at most, %d stalls\n",
      failed_ms.size(), median, failed_ms[failed_ms.size() * 99 / 100], ran - answered,
      most_in_flight, obs.errors["stall"]);
}

// The calls written and not answered are bounded per connection: beyond max_in_flight (or its
// bytes) a call fails fast, unwritten, even before any deadline passed.
TEST(RedisClient, CallsBeyondTheInFlightBoundFailFast) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port(), 1000);
  o.pool_size = 2;
  o.max_in_flight = 10;
  RedisClient c(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  redis.pause();
  std::vector<Result> results(30);
  for (auto& r : results) c.command(std::vector<std::string_view>{"INCR", "calls"}, into(r));
  ASSERT_TRUE(loop.wait_until([&] { return results.back().done; }, milliseconds(500)));
  EXPECT_EQ(obs.errors["fail_fast"], 10);
  for (size_t i = 20; i < results.size(); ++i)
    EXPECT_EQ(results[i].error, "redis: too many calls in flight");
  // The bytes bound alike: a call larger than what is left fails fast.
  redis.resume();
  ASSERT_TRUE(loop.wait_until(
      [&] { return std::all_of(results.begin(), results.end(), [](auto& r) { return r.done; }); },
      milliseconds(3000)));
  EXPECT_EQ(redis.cli("GET calls"), "20");
  o.max_in_flight_bytes = 64;
  RedisClient small(loop.base(), o, all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return small.up(); }, milliseconds(3000)));
  std::string big(100, 'x');
  EXPECT_EQ(call(loop, small, {"SET", "k", big}).error, "redis: too many calls in flight");
  EXPECT_EQ(call(loop, small, {"SET", "k", "v"}).str, "OK");
}

// The clock offset is read at connect, and a script call's deadline is Redis's clock plus the
// give-up time and the allowance.
TEST(RedisClient, ReadsRedisClockAtConnect) {
  testing::RedisServer redis;
  Loop loop;
  RedisClient c(loop.base(), options(redis.port()), all_scripts());
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  ASSERT_NE(c.clock_offset_ms(), RedisClient::kUnknownOffset);
  EXPECT_LT(std::abs(c.clock_offset_ms()), 1000);  // one machine's clock
  const int64_t now =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const int64_t d = c.script_deadline_ms(50) - c.clock_offset_ms() - now;
  EXPECT_GE(d, 50 + RedisClient::kSkewAllowanceMs);
  EXPECT_LE(d, 50 + RedisClient::kSkewAllowanceMs + 100);
}

// A refused password backs off like a refused connect: the backoff restarts only once AUTH (and
// SELECT) succeeded. One log line per backoff step, not per pooled connection; the state and a
// metric say why Redis is down.
TEST(RedisClient, WrongPasswordBacksOffAndSaysSo) {
  testing::RedisServer redis;
  ASSERT_EQ(redis.cli("CONFIG SET requirepass pw-right-7f3"), "OK");
  auto connections = [&] {
    std::string info = redis.cli("-a pw-right-7f3 --no-auth-warning INFO stats");
    auto at = info.find("total_connections_received:");
    return at == std::string::npos ? -1 : std::stol(info.substr(at + 27));
  };
  long before = connections();
  ASSERT_GE(before, 0);
  LogCapture log;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port());
  o.pool_size = 4;
  o.password = "pw-wrong-9c1";
  {
    RedisClient c(loop.base(), o, all_scripts(), &obs);
    loop.wait_until([] { return false; }, milliseconds(3000));
    EXPECT_FALSE(c.up());
    EXPECT_EQ(c.state(), "auth_failed");
    Result r = call(loop, c, {"PING"});
    EXPECT_EQ(r.type, 0);
    EXPECT_FALSE(r.error.empty());
    // 4 connections, each backing off 20, 40, ... 1000 ms: about 8 attempts each in 3 s.
    long seen = connections() - before - 1;  // our own INFO connection
    EXPECT_GE(seen, 4);
    EXPECT_LE(seen, 4 * 10);
    std::printf("wrong password: %ld connections in 3 s\n", seen);
    EXPECT_GE(obs.errors["auth"], 4);
    // The right password (the server's changes) is picked up on the next attempt.
    ASSERT_EQ(redis.cli("-a pw-right-7f3 --no-auth-warning CONFIG SET requirepass pw-wrong-9c1"),
              "OK");
    EXPECT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
    EXPECT_EQ(c.state(), "up");
  }
  std::string text = log.stop();
  auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, 14) << text;
  std::printf("wrong password: %ld log lines\n", static_cast<long>(lines));
  EXPECT_EQ(text.find("pw-"), std::string::npos) << "a password reached the log";
}

// A Redis that refuses every SCRIPT LOAD (here an ACL without SCRIPT; a restarted Redis loading
// its dataset answers LOADING alike) gets one log line a second, not one per script and pooled
// connection; the metric counts every refusal.
TEST(RedisClient, RefusedScriptLoadsAreLoggedOnceASecond) {
  testing::RedisServer redis;
  ASSERT_EQ(redis.cli("ACL SETUSER loader on '>pw-load-4e2' '~*' '&*' '+@all' '-script'"), "OK");
  LogCapture log;
  Loop loop;
  Observer obs;
  RedisOptions o = options(redis.port());
  o.pool_size = 4;
  o.user = "loader";
  o.password = "pw-load-4e2";
  const int loads = o.pool_size * static_cast<int>(all_scripts().size());
  {
    RedisClient c(loop.base(), o, all_scripts(), &obs);
    EXPECT_TRUE(
        loop.wait_until([&] { return obs.errors["script_load"] == loads; }, milliseconds(3000)));
    EXPECT_TRUE(c.up());  // EVALSHA is allowed: the connection serves, its scripts unloaded
  }
  std::string text = log.stop();
  long lines = 0;
  for (size_t at = 0; (at = text.find("SCRIPT LOAD failed", at)) != std::string::npos; ++at)
    ++lines;
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, 2) << text;  // all within about a second; a slow box may see a second line
  EXPECT_NE(text.find("NOPERM"), std::string::npos) << text;
  EXPECT_EQ(text.find("pw-"), std::string::npos) << "a password reached the log";
  std::printf("%d refused SCRIPT LOADs, %ld log lines\n", loads, lines);
}

long count(const std::string& text, const std::string& what) {
  long n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

// admit.lua makes a reservation window a hash table with a value of kListpackBreakerBytes, which
// works only while Redis's hash-max-listpack-value is smaller: the client reads it at connect,
// says once when it is not, and serves in every case, also when CONFIG is refused.
TEST(RedisClient, ChecksHashMaxListpackValueAtConnect) {
  const std::string breaker(kListpackBreakerBytes, '-');
  EXPECT_NE(lua::kAdmit.text.find("'" + breaker + "'"), std::string_view::npos);
  EXPECT_EQ(lua::kAdmit.text.find(breaker + "-"), std::string_view::npos);

  testing::RedisServer redis;
  ASSERT_EQ(redis.cli("CONFIG GET hash-max-listpack-value"), "hash-max-listpack-value\n64");
  Loop loop;
  const std::string too_large = "hash-max-listpack-value is 100";
  const std::string unknown = "cannot read hash-max-listpack-value";
  auto serves = [&](RedisClient& c) {
    EXPECT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
    EXPECT_EQ(call(loop, c, {"PING"}).str, "PONG");
  };
  {
    LogCapture log;
    RedisClient c(loop.base(), options(redis.port()), all_scripts());
    serves(c);
    loop.wait_until([] { return false; }, milliseconds(300));  // every connection has asked
    EXPECT_EQ(count(log.text(), "hash-max-listpack-value"), 0) << log.text();
  }
  ASSERT_EQ(redis.cli("CONFIG SET hash-max-listpack-value 100"), "OK");
  {
    LogCapture log;
    RedisClient c(loop.base(), options(redis.port()), all_scripts());
    serves(c);
    EXPECT_TRUE(
        loop.wait_until([&] { return count(log.text(), too_large) > 0; }, milliseconds(3000)));
    loop.wait_until([] { return false; }, milliseconds(300));
    EXPECT_EQ(count(log.text(), too_large), 1) << log.text();  // not once per connection
    EXPECT_NE(log.text().find("below " + std::to_string(kListpackBreakerBytes)), std::string::npos)
        << log.text();
  }
  ASSERT_EQ(redis.cli("ACL SETUSER noconfig on '>pw-cfg-71a' '~*' '&*' '+@all' '-config'"), "OK");
  {
    LogCapture log;
    RedisOptions o = options(redis.port());
    o.user = "noconfig";
    o.password = "pw-cfg-71a";
    RedisClient c(loop.base(), o, all_scripts());
    serves(c);
    EXPECT_TRUE(
        loop.wait_until([&] { return count(log.text(), unknown) > 0; }, milliseconds(3000)));
    loop.wait_until([] { return false; }, milliseconds(300));
    EXPECT_EQ(count(log.text(), unknown), 1) << log.text();
    EXPECT_NE(log.text().find("NOPERM"), std::string::npos) << log.text();
    EXPECT_EQ(log.text().find("pw-"), std::string::npos) << "a password reached the log";
  }
}

TEST(RedisClient, ReconnectsAfterRestartOnTheSamePort) {
  testing::RedisServer redis;
  Loop loop;
  Observer obs;
  RedisClient c(loop.base(), options(redis.port()), all_scripts(), &obs);
  ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
  redis.stop();
  EXPECT_TRUE(loop.wait_until([&] { return !c.up(); }, milliseconds(3000)));
  Result down = call(loop, c, {"PING"});
  EXPECT_EQ(down.type, 0);
  EXPECT_FALSE(down.error.empty());
  redis.start();
  EXPECT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(5000)));
  EXPECT_EQ(call(loop, c, {"PING"}).str, "PONG");
  // The restarted server has an empty script cache; the client loaded the scripts again.
  EXPECT_EQ(redis.cli("SCRIPT EXISTS " + std::string(lua::kAdmit.sha1)), "1");
  std::vector<bool> expect_tail = {false, true, false, true};
  ASSERT_GE(obs.ups.size(), 4u);
  EXPECT_EQ(std::vector<bool>(obs.ups.end() - 4, obs.ups.end()), expect_tail);
}

TEST(RedisClient, DestructionCompletesPendingCalls) {
  testing::RedisServer redis;
  Loop loop;
  Result r, p;
  bool posted = false;
  {
    RedisClient c(loop.base(), options(redis.port()), all_scripts());
    ASSERT_TRUE(loop.wait_until([&] { return c.up(); }, milliseconds(3000)));
    ASSERT_EQ(redis.cli("CLIENT PAUSE 300 ALL"), "OK");
    c.command(std::vector<std::string_view>{"PING"}, into(r));
    c.post([&] { posted = true; });
  }
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.error, "redis: client shut down");
  EXPECT_TRUE(posted);
}

}  // namespace
}  // namespace dripgate::control
