// A Redis Cluster client on a libevent base: one RedisClient pool per node, each call routed by
// the hash slot (control/slot.h) of its first key, with RedisClient's own call surface
// (Callback, LateReply, WhenStalled), NOSCRIPT handling and deadlines on every node.
//
// Hand-written because Debian 12's hiredis (0.14) has no cluster support and hiredis-cluster
// is not packaged; what a cluster adds over one node is small and kept here:
// * the slot map, read with CLUSTER SLOTS from the seeds at start, every refresh_ms, after a
//   MOVED and after a call that found its node unreachable (a failover: the promoted replica
//   takes the slots, and the next map says so);
// * MOVED slot host:port: the slot now lives there. The map entry is fixed at once, a full
//   refresh is asked for, and the call goes again to the new owner;
// * ASK slot host:port: the slot is being migrated and this key already moved. The call goes
//   once to that node behind an ASKING (RedisClient's `asking`), the map unchanged;
// * at most max_redirects redirects in a row, then kTooManyRedirects (no reply, none late): a
//   TRYAGAIN (below) starts the count again, so a call meeting ASK and TRYAGAIN alternately
//   during a migration is bounded by the TRYAGAIN window, and a MOVED or ASK loop by this.
// A MOVED or ASK reply means the command did not run, so following it never runs a script
// twice. Such a refusal (or CLUSTERDOWN, TRYAGAIN) arriving as a late reply, after a timeout,
// is handed to LateReply as it is, not followed: it says the command did not run (nothing to
// undo; an undo is sent again, routed afresh). TRYAGAIN (a multi-key call during a migration,
// its keys split between two nodes) is sent again every 10 ms for up to a timeout from the
// first, then answered as it is, as CLUSTERDOWN is. Each attempt has the node's own timeout and
// none follows a timeout, so a call is answered within (2 * max_redirects + 3) timeouts
// (max_redirects + 1 attempts before its first TRYAGAIN, the TRYAGAIN window, max_redirects + 1
// attempts after its last), after at most (timeout_ms / 10 + 1) * (max_redirects + 1) attempts.
//
// A WhenStalled::kQueue call held for a node that is down waits for that node (RedisClient's
// holding): if the node comes back as a replica, the held call meets a MOVED there and follows
// it; if it never comes back, the call is answered at shutdown.
//
// Before the first map, and for a slot with no known owner, a call goes to any node and
// follows the MOVED it gets. A node once seen keeps its client (a node gone for good is
// reconnected to with backoff, quietly): clusters are small. Not thread-safe; callbacks run
// on the base.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "control/redis/redis_calls.h"
#include "control/redis/redis_client.h"

struct event;

namespace dripgate::control {

struct RedisClusterOptions {
  std::vector<std::string> seeds;  // "host:port"
  RedisOptions node;               // credentials, timeouts, pool size; host/port unused
  int refresh_ms = 1000;           // CLUSTER SLOTS this often, failover or not
  int min_refresh_gap_ms = 50;     // and no more often than this when redirects ask for it
  int max_redirects = 5;

  // From the `redis.cluster` seeds and the rest of `redis`.
  static RedisClusterOptions from(const config::Redis& r);
};

class RedisCluster final : public RedisCalls {
 public:
  // Counters for tests and metrics; read on the loop.
  struct Stats {
    uint64_t moved = 0;
    uint64_t asked = 0;
    uint64_t refreshes = 0;  // slot maps applied
  };

  // scripts: loaded on every connection of every node; must outlive the client.
  RedisCluster(event_base* base, RedisClusterOptions opts, std::vector<const lua::Script*> scripts,
               RedisObserver* observer = nullptr);
  ~RedisCluster() override;  // pending callbacks get "redis: client shut down"
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // As RedisClient's, routed by keys[0] (argv[1] for a command; a call without a key goes to
  // any node). Every key of one call must share a slot (a hash tag), as Redis demands.
  void evalsha(const lua::Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> args, Callback cb, LateReply late = {},
               WhenStalled stalled = WhenStalled::kFailFast) override;
  void command(std::span<const std::string_view> argv, Callback cb) override;
  // Past the router's own bound on a call ((2 * max_redirects + 3) timeouts, above),
  // on the clock of the first node whose offset is known.
  int64_t script_deadline_ms() const override;
  int64_t clock_offset_ms() const override;

  void post(std::function<void()> fn) override;
  // Every slot has an owner and every owner has a connection up. Readable from any thread.
  bool up() const override { return up_.load(std::memory_order_relaxed); }
  std::string_view state() const override { return up() ? "up" : "down"; }
  int connected() const override;
  event_base* base() const { return base_; }
  const Stats& stats() const { return stats_; }
  // The node ("host:port") the map gives for slot; empty when none. For tests.
  std::string owner_of(int slot) const;

 private:
  struct Node;
  struct Call;
  struct Forward;

  // The node at `where`, its client made on first sight; nullptr for a malformed address.
  Node* node_at(std::string_view where);
  Node* route(int slot);
  // The first measured node's clock offset (RedisClient::kUnknownOffset: none yet).
  int64_t measured_offset_ms() const;
  void send(std::shared_ptr<Call> call, Node* node, bool asking);
  void on_reply(const std::shared_ptr<Call>& call, const redisReply* r, std::string_view error);
  bool redirect(const std::shared_ptr<Call>& call, std::string_view err);
  bool try_again(const std::shared_ptr<Call>& call);
  void refresh();
  void request_refresh();
  void apply_slots(const Node* from, const redisReply* r);
  void update_up();
  static void on_refresh_timer(int fd, short what, void* arg);

  event_base* base_;
  RedisClusterOptions opts_;
  std::vector<const lua::Script*> scripts_;
  RedisObserver* observer_;
  std::unique_ptr<Forward> forward_;          // the nodes' observer: no per-node up()
  std::vector<std::unique_ptr<Node>> nodes_;  // every node seen, seeds first; never removed
  std::vector<Node*> slots_;                  // kClusterSlots entries; nullptr: unknown
  event* refresh_ev_ = nullptr;
  struct Retry;
  std::list<std::unique_ptr<Retry>> retries_;  // calls waiting to be sent again (TRYAGAIN)
  bool refreshing_ = false;
  bool refresh_failing_ = false;  // the last CLUSTER SLOTS got no map
  size_t next_source_ = 0;        // round robin over the nodes asked for CLUSTER SLOTS
  std::chrono::steady_clock::time_point last_refresh_{};
  bool shutting_down_ = false;
  std::atomic<bool> up_{false};
  Stats stats_;
};

}  // namespace dripgate::control
