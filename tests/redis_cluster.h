// A real Redis Cluster for tests: `masters` cluster-enabled redis-servers (RedisServer,
// Mode::kCluster) with `replicas` replicas each, on loopback, torn down with their nodes.conf by
// RAII. The cluster is built by hand (SET-CONFIG-EPOCH, ADDSLOTSRANGE, MEET, REPLICATE) rather
// than with `redis-cli --cluster create`: no fixed sleeps, no replica placement of its own, and
// masters 0..masters-1 own equal slot ranges in order. The constructor returns once every node
// says cluster_state:ok, every node reports the same slot owners and every replica is in sync.
//
// The helpers block (a short hiredis connection per command) and throw std::runtime_error on
// failure; a test runs them from its own thread while the client under test runs its loop.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/redis_server.h"

struct redisReply;

namespace dripgate::testing {

class RedisCluster {
 public:
  explicit RedisCluster(int masters = 3, int replicas = 1);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  size_t size() const { return nodes_.size(); }
  RedisServer& node(size_t i) { return *nodes_[i]; }
  const std::string& id(size_t i) const { return ids_[i]; }
  // "127.0.0.1:port" of every node (masters first, as created): seeds for a client.
  std::vector<std::string> seeds() const;

  // One command on node i; the reply as text: a string, status, error ("ERR ...") or integer
  // as such, an array's elements (strings or integers) one per line.
  std::string call(size_t i, const std::vector<std::string>& argv) const;
  // Commands on node i written at once on one connection, their replies as call() gives them.
  // Redis runs the commands it reads in one go back to back, before it serves another client:
  // a DEBUG SLEEP in front holds back whatever other clients send meanwhile until the commands
  // behind it ran. Blocks until the last reply.
  std::vector<std::string> pipeline(size_t i,
                                    const std::vector<std::vector<std::string>>& commands) const;

  // The hash slot of a key as Redis computes it (CLUSTER KEYSLOT).
  int keyslot(std::string_view key) const;
  // The node serving a slot (its master), as the nodes agree once wait_stable() returned.
  size_t owner(int slot) const;
  // The nodes that are masters now.
  std::vector<size_t> masters() const;
  // Keys of `slot` stored on node i (CLUSTER COUNTKEYSINSLOT).
  long long count_keys(size_t i, int slot) const;

  // A slot migration in its three steps, as `redis-cli --cluster reshard` does them:
  // begin_migration marks the slot IMPORTING on `to` and MIGRATING on its owner; move_key
  // MIGRATEs one key; finish_migration moves the remaining keys, gives the slot to `to` on every
  // master and waits until all nodes agree. migrate_slot does all three.
  void begin_migration(int slot, size_t to);
  void move_key(const std::string& key);
  void finish_migration(int slot);
  void migrate_slot(int slot, size_t to);

  // CLUSTER FAILOVER on a replica of `master`; returns once that replica is master and the
  // cluster is stable again. Returns the promoted node.
  size_t failover(size_t master);

  // SIGKILL on a master; returns once the cluster's own failure detection (node timeout 1 s)
  // promoted its replica and the nodes still running are stable. Returns the promoted node.
  // The killed node stays down until restart().
  size_t kill_master(size_t master);
  // Starts a stopped node again (same port, same nodes.conf: it rejoins, as a replica of the
  // node that took its slots) and waits until the cluster is stable.
  void restart(size_t i);

  // Until every running node is ok, agrees on the slot owners and every replica's link is up;
  // throws after `limit_ms`.
  void wait_stable(int limit_ms = 20000) const;

 private:
  void with_reply(size_t i, const std::vector<std::string>& argv,
                  const std::function<void(const redisReply&)>& fn) const;
  // node i's view of the slot owners: "start-end:port" per range, sorted.
  std::string slot_view(size_t i) const;
  size_t index_of_port(long long port) const;
  // The owner of a slot as node i sees it.
  size_t owner_seen_by(size_t i, int slot) const;
  size_t replica_of(size_t master) const;

  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<std::string> ids_;
  int migrating_from_ = -1;  // the source node of the migration in progress
  int migrating_to_ = -1;
};

}  // namespace dripgate::testing
