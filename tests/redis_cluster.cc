#include "tests/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dripgate::testing {

namespace {

constexpr int kSlots = 16384;

using Clock = std::chrono::steady_clock;

std::string text_of(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return std::string(r.str, r.len);
    case REDIS_REPLY_INTEGER:
      return std::to_string(r.integer);
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r.elements; ++i) {
        if (i) out += '\n';
        out += text_of(*r.element[i]);
      }
      return out;
    }
    default:
      return {};
  }
}

// Polls pred every 20 ms until it holds; throws `what` after limit_ms.
template <class Pred>
void poll(Pred pred, int limit_ms, const std::string& what) {
  auto end = Clock::now() + std::chrono::milliseconds(limit_ms);
  while (!pred()) {
    if (Clock::now() > end) throw std::runtime_error("redis cluster: " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

RedisCluster::RedisCluster(int masters, int replicas) {
  const int n = masters * (1 + replicas);
  for (int i = 0; i < n; ++i)
    nodes_.push_back(
        std::make_unique<RedisServer>(RedisServer::Durability::kNone, RedisServer::Mode::kCluster));
  for (int i = 0; i < n; ++i) ids_.push_back(call(i, {"CLUSTER", "MYID"}));
  // Distinct epochs before the nodes meet: no epoch collision to resolve after.
  for (int i = 0; i < n; ++i) call(i, {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
  for (int m = 0; m < masters; ++m) {
    int first = m * kSlots / masters;
    int last = (m + 1) * kSlots / masters - 1;
    std::string r =
        call(m, {"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
    if (r != "OK") throw std::runtime_error("redis cluster: ADDSLOTSRANGE: " + r);
  }
  for (int i = 1; i < n; ++i)
    call(0, {"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[i]->port()),
             std::to_string(nodes_[i]->bus_port())});
  // A replica can only follow a master it knows by its id (a node in handshake still has a
  // made-up one).
  poll(
      [&] {
        for (int i = 0; i < n; ++i) {
          std::string nodes = call(i, {"CLUSTER", "NODES"});
          for (const auto& id : ids_)
            if (nodes.find(id) == std::string::npos) return false;
        }
        return true;
      },
      20000, "the nodes did not meet");
  for (int i = masters; i < n; ++i) {
    std::string r = call(i, {"CLUSTER", "REPLICATE", ids_[(i - masters) % masters]});
    if (r != "OK") throw std::runtime_error("redis cluster: REPLICATE: " + r);
  }
  wait_stable();
}

RedisCluster::~RedisCluster() = default;  // each RedisServer kills its node and removes its dir

std::vector<std::string> RedisCluster::seeds() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back("127.0.0.1:" + std::to_string(n->port()));
  return out;
}

namespace {

using Context = std::unique_ptr<redisContext, void (*)(redisContext*)>;
using Reply = std::unique_ptr<redisReply, void (*)(void*)>;

Context connect_to(int port, size_t i) {
  timeval tv{5, 0};
  Context c(redisConnectWithTimeout("127.0.0.1", port, tv), redisFree);
  if (!c || c->err)
    throw std::runtime_error("redis cluster: cannot connect to node " + std::to_string(i));
  // A node that never answers (stopped) fails the command rather than hang the test.
  redisSetTimeout(c.get(), timeval{15, 0});
  return c;
}

void append(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> a;
  std::vector<size_t> l;
  for (const auto& s : argv) {
    a.push_back(s.data());
    l.push_back(s.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(a.size()), a.data(), l.data());
}

Reply next_reply(redisContext* c, size_t i) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK || !r)
    throw std::runtime_error("redis cluster: no reply from node " + std::to_string(i));
  return Reply(static_cast<redisReply*>(r), freeReplyObject);
}

}  // namespace

void RedisCluster::with_reply(size_t i, const std::vector<std::string>& argv,
                              const std::function<void(const redisReply&)>& fn) const {
  Context c = connect_to(nodes_[i]->port(), i);
  append(c.get(), argv);
  fn(*next_reply(c.get(), i));
}

std::vector<std::string> RedisCluster::pipeline(
    size_t i, const std::vector<std::vector<std::string>>& commands) const {
  Context c = connect_to(nodes_[i]->port(), i);
  for (const auto& argv : commands) append(c.get(), argv);  // buffered: one write below
  std::vector<std::string> out;
  for (size_t k = 0; k < commands.size(); ++k) out.push_back(text_of(*next_reply(c.get(), i)));
  return out;
}

std::string RedisCluster::call(size_t i, const std::vector<std::string>& argv) const {
  std::string out;
  with_reply(i, argv, [&](const redisReply& r) { out = text_of(r); });
  return out;
}

int RedisCluster::keyslot(std::string_view key) const {
  return std::stoi(call(masters().front(), {"CLUSTER", "KEYSLOT", std::string(key)}));
}

size_t RedisCluster::index_of_port(long long port) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i]->port() == port) return i;
  throw std::runtime_error("redis cluster: unknown port " + std::to_string(port));
}

std::string RedisCluster::slot_view(size_t i) const {
  std::vector<std::string> ranges;
  with_reply(i, {"CLUSTER", "SLOTS"}, [&](const redisReply& r) {
    for (size_t k = 0; k < r.elements; ++k) {
      const redisReply& e = *r.element[k];
      ranges.push_back(std::to_string(e.element[0]->integer) + "-" +
                       std::to_string(e.element[1]->integer) + ":" +
                       std::to_string(e.element[2]->element[1]->integer));
    }
  });
  std::sort(ranges.begin(), ranges.end());
  std::string out;
  for (const auto& s : ranges) out += s + " ";
  return out;
}

size_t RedisCluster::owner(int slot) const {
  size_t ask = 0;
  while (ask + 1 < nodes_.size() && !nodes_[ask]->running()) ++ask;
  return owner_seen_by(ask, slot);
}

size_t RedisCluster::owner_seen_by(size_t ask, int slot) const {
  size_t found = nodes_.size();
  with_reply(ask, {"CLUSTER", "SLOTS"}, [&](const redisReply& r) {
    for (size_t k = 0; k < r.elements; ++k) {
      const redisReply& e = *r.element[k];
      if (slot >= e.element[0]->integer && slot <= e.element[1]->integer)
        found = index_of_port(e.element[2]->element[1]->integer);
    }
  });
  if (found == nodes_.size())
    throw std::runtime_error("redis cluster: no owner for slot " + std::to_string(slot));
  return found;
}

std::vector<size_t> RedisCluster::masters() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i]->running() && call(i, {"ROLE"}).starts_with("master")) out.push_back(i);
  return out;
}

long long RedisCluster::count_keys(size_t i, int slot) const {
  return std::stoll(call(i, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}));
}

void RedisCluster::wait_stable(int limit_ms) const {
  poll(
      [&] {
        std::string first;
        for (size_t i = 0; i < nodes_.size(); ++i) {
          if (!nodes_[i]->running()) continue;
          if (call(i, {"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos)
            return false;
          std::string view = slot_view(i);
          if (first.empty()) first = view;
          if (view != first) return false;
          std::string repl = call(i, {"INFO", "replication"});
          if (repl.find("role:slave") != std::string::npos &&
              repl.find("master_link_status:up") == std::string::npos)
            return false;
        }
        return true;
      },
      limit_ms, "not stable within " + std::to_string(limit_ms) + " ms");
}

void RedisCluster::begin_migration(int slot, size_t to) {
  // Asked of `to`, which is to answer anyway: another node may be stopped by the test.
  size_t from = owner_seen_by(to, slot);
  std::string s = std::to_string(slot);
  std::string a = call(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]});
  std::string b = call(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]});
  if (a != "OK" || b != "OK") throw std::runtime_error("redis cluster: SETSLOT: " + a + " " + b);
  migrating_from_ = static_cast<int>(from);
  migrating_to_ = static_cast<int>(to);
}

void RedisCluster::move_key(const std::string& key) {
  std::string r = call(
      migrating_from_,
      {"MIGRATE", "127.0.0.1", std::to_string(nodes_[migrating_to_]->port()), key, "0", "5000"});
  if (r != "OK" && r != "NOKEY") throw std::runtime_error("redis cluster: MIGRATE: " + r);
}

void RedisCluster::finish_migration(int slot) {
  std::string s = std::to_string(slot);
  for (;;) {
    std::string keys = call(migrating_from_, {"CLUSTER", "GETKEYSINSLOT", s, "100"});
    if (keys.empty()) break;
    std::vector<std::string> argv = {
        "MIGRATE", "127.0.0.1", std::to_string(nodes_[migrating_to_]->port()), "", "0",
        "5000",    "KEYS"};
    std::istringstream in(keys);
    for (std::string k; std::getline(in, k);) argv.push_back(k);
    std::string r = call(migrating_from_, argv);
    if (r != "OK") throw std::runtime_error("redis cluster: MIGRATE: " + r);
  }
  // The importing node first (it bumps its epoch, so its claim wins), then the source, then
  // every other master, so that no node serves the slot from a stale view for long.
  std::vector<std::string> setslot = {"CLUSTER", "SETSLOT", s, "NODE", ids_[migrating_to_]};
  call(migrating_to_, setslot);
  call(migrating_from_, setslot);
  for (size_t m : masters())
    if (m != static_cast<size_t>(migrating_to_) && m != static_cast<size_t>(migrating_from_))
      call(m, setslot);
  migrating_from_ = migrating_to_ = -1;
  wait_stable();
}

void RedisCluster::migrate_slot(int slot, size_t to) {
  begin_migration(slot, to);
  finish_migration(slot);
}

size_t RedisCluster::replica_of(size_t master) const {
  const std::string port = std::to_string(nodes_[master]->port());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i]->running()) continue;
    // ROLE of a replica: slave, master ip, master port, state, offset.
    if (call(i, {"ROLE"}).starts_with("slave\n127.0.0.1\n" + port + "\n")) return i;
  }
  throw std::runtime_error("redis cluster: node " + std::to_string(master) + " has no replica");
}

size_t RedisCluster::kill_master(size_t master) {
  size_t replica = replica_of(master);
  nodes_[master]->stop();
  poll([&] { return call(replica, {"ROLE"}).starts_with("master"); }, 20000,
       "the replica was not promoted");
  wait_stable();
  return replica;
}

void RedisCluster::restart(size_t i) {
  nodes_[i]->start();
  wait_stable();
}

size_t RedisCluster::failover(size_t master) {
  size_t replica = replica_of(master);
  std::string r = call(replica, {"CLUSTER", "FAILOVER"});
  if (r != "OK") throw std::runtime_error("redis cluster: CLUSTER FAILOVER: " + r);
  poll([&] { return call(replica, {"ROLE"}).starts_with("master"); }, 20000,
       "the replica was not promoted");
  wait_stable();
  return replica;
}

}  // namespace dripgate::testing
