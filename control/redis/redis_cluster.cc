#include "control/redis/redis_cluster.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "control/redis/slot.h"

namespace dripgate::control {

namespace {

using Clock = std::chrono::steady_clock;

bool is_error(const redisReply* r, std::string_view prefix) {
  return r && r->type == REDIS_REPLY_ERROR && std::string_view(r->str, r->len).starts_with(prefix);
}

// MOVED and ASK: the command did not run.
bool is_redirect(const redisReply* r) {
  return is_error(r, "MOVED ") || is_error(r, "ASK ");
}

timeval ms_timeval(long long ms) {
  if (ms < 0) ms = 0;
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
}

}  // namespace

RedisClusterOptions RedisClusterOptions::from(const config::Redis& r) {
  RedisClusterOptions o;
  o.seeds = r.cluster;
  o.node = RedisOptions::from(r);
  return o;
}

struct RedisCluster::Node {
  std::string addr;  // "host:port", as CLUSTER SLOTS and MOVED name it
  std::string host;
  std::unique_ptr<RedisClient> client;
  bool master = false;  // owns slots in the current map
};

int RedisCluster::connected() const {
  int n = 0;
  for (const auto& node : nodes_) n += node->client ? node->client->connected() : 0;
  return n;
}

// One call, owned until answered: a redirect sends it again, after the caller's spans are gone.
struct RedisCluster::Call {
  const lua::Script* script = nullptr;  // EVALSHA; a plain command when null
  std::vector<std::string> parts;       // keys then args, or the command's argv
  size_t nkeys = 0;
  Callback cb;
  LateReply late;
  WhenStalled stalled = WhenStalled::kFailFast;
  int slot = -1;                  // of its first key; -1: none
  int redirects = 0;              // since its last TRYAGAIN (try_again)
  Clock::time_point try_until{};  // sent again on TRYAGAIN until then; set by the first
};

// A call waiting for its TRYAGAIN timer, owned by the cluster (so that a cluster shut down in
// the meantime answers it and frees the timer).
struct RedisCluster::Retry {
  RedisCluster* self = nullptr;
  std::shared_ptr<Call> call;
  event* ev = nullptr;
  std::list<std::unique_ptr<Retry>>::iterator at;
  ~Retry() {
    if (ev) event_free(ev);
  }
};

// The nodes' round trips and errors go to the cluster's observer; a node going up or down
// makes the cluster look again at whether every slot is served.
struct RedisCluster::Forward : RedisObserver {
  RedisCluster* cluster = nullptr;
  RedisObserver* to = nullptr;
  void round_trip(double seconds) override {
    if (to) to->round_trip(seconds);
  }
  void error(const std::string& kind) override {
    if (to) to->error(kind);
  }
  void up(bool) override {
    if (!cluster->shutting_down_) cluster->update_up();
  }
};

RedisCluster::RedisCluster(event_base* base, RedisClusterOptions opts,
                           std::vector<const lua::Script*> scripts, RedisObserver* observer)
    : base_(base),
      opts_(std::move(opts)),
      scripts_(std::move(scripts)),
      observer_(observer),
      forward_(std::make_unique<Forward>()),
      slots_(kClusterSlots, nullptr) {
  if (opts_.seeds.empty()) throw std::invalid_argument("redis cluster: no seed node");
  forward_->cluster = this;
  forward_->to = observer_;
  if (observer_) observer_->up(false);
  for (const auto& s : opts_.seeds)
    if (!node_at(s)) throw std::invalid_argument("redis cluster: bad seed " + s);
  refresh_ev_ = evtimer_new(base_, &RedisCluster::on_refresh_timer, this);
  refresh();
}

RedisCluster::~RedisCluster() {
  shutting_down_ = true;
  event_free(refresh_ev_);
  for (auto& r : retries_) r->call->cb(nullptr, "redis: client shut down");
  retries_.clear();
  // Each client answers its pending calls as it goes; on_reply passes them through, and a
  // call made from one of those callbacks is refused at once.
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.swap(nodes_);
  for (auto& n : nodes) n.reset();
}

RedisCluster::Node* RedisCluster::node_at(std::string_view where) {
  // "host:port", "v6:address:port" (as Redis names nodes) or "[v6:address]:port" (a seed).
  size_t colon = where.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(where.data() + colon + 1, where.data() + where.size(), port).ec !=
          std::errc{} ||
      port <= 0 || port > 65535)
    return nullptr;
  std::string_view host = where.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  std::string addr = std::string(host) + ":" + std::to_string(port);
  for (auto& n : nodes_)
    if (n->addr == addr) return n.get();
  auto n = std::make_unique<Node>();
  n->addr = addr;
  n->host = std::string(host);
  RedisOptions o = opts_.node;
  o.host = n->host;
  o.port = port;
  o.unix_path.clear();
  o.db = 0;  // a cluster has only db 0
  n->client = std::make_unique<RedisClient>(base_, o, scripts_, forward_.get());
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

RedisCluster::Node* RedisCluster::route(int slot) {
  if (slot >= 0 && slots_[slot]) return slots_[slot];
  for (auto& n : nodes_)
    if (n->client->up()) return n.get();
  return nodes_.front().get();
}

int64_t RedisCluster::measured_offset_ms() const {
  for (const auto& n : nodes_)
    if (n->client && n->client->clock_offset_ms() != RedisClient::kUnknownOffset)
      return n->client->clock_offset_ms();
  return RedisClient::kUnknownOffset;
}

int64_t RedisCluster::script_deadline_ms() const {
  const int64_t give_up = static_cast<int64_t>(2 * opts_.max_redirects + 3) * opts_.node.timeout_ms;
  return RedisClient::deadline_for(measured_offset_ms(), give_up);
}

int64_t RedisCluster::clock_offset_ms() const {
  const int64_t o = measured_offset_ms();
  return o == RedisClient::kUnknownOffset ? 0 : o;
}

std::string RedisCluster::owner_of(int slot) const {
  return slot >= 0 && slot < kClusterSlots && slots_[slot] ? slots_[slot]->addr : std::string();
}

void RedisCluster::send(std::shared_ptr<Call> call, Node* node, bool asking) {
  std::vector<std::string_view> v(call->parts.begin(), call->parts.end());
  Callback cb = [this, call](const redisReply* r, std::string_view error) {
    on_reply(call, r, error);
  };
  std::span<const std::string_view> all(v);
  // Every late reply goes to the call's LateReply, a refusal (MOVED, ASK, CLUSTERDOWN, TRYAGAIN)
  // too, unfollowed: it says the command did not run, which an undo must know to be sent again.
  if (call->script)
    node->client->evalsha(*call->script, all.first(call->nkeys), all.subspan(call->nkeys),
                          std::move(cb), call->late, call->stalled, asking);
  else
    node->client->command(all, std::move(cb), asking);
}

void RedisCluster::on_reply(const std::shared_ptr<Call>& call, const redisReply* r,
                            std::string_view error) {
  if (!shutting_down_) {
    if (is_redirect(r) && redirect(call, std::string_view(r->str, r->len))) return;
    if (is_error(r, "TRYAGAIN") && try_again(call)) return;
    // An unreachable node or a cluster without a quorum: a failover may be under way.
    if (!r || is_error(r, "CLUSTERDOWN")) request_refresh();
  }
  call->cb(r, error);
}

bool RedisCluster::redirect(const std::shared_ptr<Call>& call, std::string_view err) {
  // "MOVED <slot> <host:port>" or "ASK <slot> <host:port>"
  const bool moved = err.starts_with("MOVED ");
  err.remove_prefix(moved ? 6 : 4);
  size_t space = err.find(' ');
  int slot = -1;
  if (space == std::string_view::npos ||
      std::from_chars(err.data(), err.data() + space, slot).ec != std::errc{} || slot < 0 ||
      slot >= kClusterSlots)
    return false;
  if (call->redirects >= opts_.max_redirects) {
    if (observer_) observer_->error("redirects");
    call->cb(nullptr, kTooManyRedirects);
    return true;
  }
  Node* to = node_at(err.substr(space + 1));
  if (!to) return false;
  ++call->redirects;
  if (moved) {
    ++stats_.moved;
    if (observer_) observer_->error("moved");
    slots_[slot] = to;
    request_refresh();
  } else {
    ++stats_.asked;
    if (observer_) observer_->error("ask");
  }
  send(call, to, !moved);
  return true;
}

// TRYAGAIN: a call with several keys met its slot in the middle of a migration, some of its keys
// moved already and some not (it did not run). Sent again, routed afresh, every 10 ms for as
// long as a node's timeout lasts from its first TRYAGAIN: a migration moves a slot's keys in
// quick batches, and an admission declares several keys of its tenant's slot.
//
// A TRYAGAIN also starts the call's redirect count again. During a migration a call meets ASK
// (on the source, once none of its keys is left there) and TRYAGAIN (on the importing node,
// while some of them are not there: an admission declares keys it never created) alternately
// until the slot is given away; counted over the whole call, those ASKs alone would end it
// after max_redirects round trips, tens of milliseconds, long before the window. So the window
// bounds a migration, and max_redirects still bounds redirects with no TRYAGAIN between them (a
// MOVED or ASK loop of a misconfigured cluster). Both bounds hold together: at most
// timeout_ms / 10 TRYAGAINs, each followed by at most max_redirects redirects.
bool RedisCluster::try_again(const std::shared_ptr<Call>& call) {
  constexpr auto kTryAgain = std::chrono::milliseconds(10);
  const Clock::time_point now = Clock::now();
  if (call->try_until == Clock::time_point{})
    call->try_until = now + std::chrono::milliseconds(opts_.node.timeout_ms);
  if (now + kTryAgain > call->try_until) return false;
  call->redirects = 0;
  if (observer_) observer_->error("tryagain");
  auto retry = std::make_unique<Retry>();
  Retry* r = retry.get();
  r->self = this;
  r->call = call;
  r->ev = evtimer_new(
      base_,
      [](int, short, void* arg) {
        Retry* r = static_cast<Retry*>(arg);
        RedisCluster* self = r->self;
        std::shared_ptr<Call> call = std::move(r->call);
        self->retries_.erase(r->at);  // frees r and its timer (no longer pending)
        self->send(call, self->route(call->slot), false);
      },
      r);
  r->at = retries_.insert(retries_.end(), std::move(retry));
  timeval tv = ms_timeval(kTryAgain.count());
  evtimer_add(r->ev, &tv);
  return true;
}

void RedisCluster::refresh() {
  timeval every = ms_timeval(opts_.refresh_ms);
  evtimer_add(refresh_ev_, &every);
  update_up();
  if (refreshing_) return;
  // A node with a connection up, the next one in turn; else the next one at all.
  Node* from = nullptr;
  for (size_t i = 0; i < nodes_.size() && !from; ++i) {
    Node* n = nodes_[(next_source_ + i) % nodes_.size()].get();
    if (n->client->up()) from = n;
  }
  if (!from) from = nodes_[next_source_ % nodes_.size()].get();
  next_source_ = (next_source_ + 1) % nodes_.size();
  refreshing_ = true;
  last_refresh_ = Clock::now();
  std::string_view argv[] = {"CLUSTER", "SLOTS"};
  from->client->command(argv, [this, from](const redisReply* r, std::string_view error) {
    if (shutting_down_) return;
    refreshing_ = false;
    if (r && r->type == REDIS_REPLY_ARRAY) {
      apply_slots(from, r);
      refresh_failing_ = false;
    } else {
      // Once per outage, not once per attempt (every min_refresh_gap_ms while it lasts).
      if (!refresh_failing_)
        spdlog::warn("redis cluster: CLUSTER SLOTS from {} failed: {}", from->addr,
                     r ? std::string(r->str, r->len) : std::string(error));
      refresh_failing_ = true;
      request_refresh();  // from the next node
    }
    update_up();
  });
}

void RedisCluster::request_refresh() {
  if (refreshing_ || shutting_down_) return;
  auto due = last_refresh_ + std::chrono::milliseconds(opts_.min_refresh_gap_ms);
  timeval tv =
      ms_timeval(std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count());
  evtimer_add(refresh_ev_, &tv);
}

void RedisCluster::on_refresh_timer(int, short, void* arg) {
  static_cast<RedisCluster*>(arg)->refresh();
}

void RedisCluster::apply_slots(const Node* from, const redisReply* r) {
  // Each entry: start, end, then the master [host, port, id, ...], then its replicas.
  std::vector<Node*> fresh(kClusterSlots, nullptr);
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
      continue;
    const redisReply* m = e->element[2];
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
      continue;
    long long first = std::max(0LL, e->element[0]->integer);
    long long last = std::min<long long>(kClusterSlots - 1, e->element[1]->integer);
    // An empty or "?" host: the node answering is the one named.
    std::string host(m->element[0]->str, m->element[0]->len);
    if (host.empty() || host == "?") host = from->host;
    Node* n = node_at(host + ":" + std::to_string(m->element[1]->integer));
    if (!n) continue;
    for (long long s = first; s <= last; ++s) fresh[static_cast<size_t>(s)] = n;
  }
  slots_ = std::move(fresh);
  for (auto& n : nodes_) n->master = false;
  for (Node* n : slots_)
    if (n) n->master = true;
  ++stats_.refreshes;
}

void RedisCluster::update_up() {
  bool is = std::all_of(slots_.begin(), slots_.end(), [](const Node* n) { return n; }) &&
            std::all_of(nodes_.begin(), nodes_.end(), [](const std::unique_ptr<Node>& n) {
              return !n->master || n->client->up();
            });
  if (up_.exchange(is, std::memory_order_relaxed) == is) return;
  if (observer_) observer_->up(is);
  if (is)
    spdlog::info("redis cluster: every slot served");
  else
    spdlog::warn("redis cluster: not every slot has a reachable owner");
}

void RedisCluster::evalsha(const lua::Script& script, std::span<const std::string_view> keys,
                           std::span<const std::string_view> args, Callback cb, LateReply late,
                           WhenStalled stalled) {
  if (shutting_down_) return cb(nullptr, "redis: client shut down");
  auto call = std::make_shared<Call>();
  call->script = &script;
  call->parts.reserve(keys.size() + args.size());
  call->parts.assign(keys.begin(), keys.end());
  call->parts.insert(call->parts.end(), args.begin(), args.end());
  call->nkeys = keys.size();
  call->cb = std::move(cb);
  call->late = std::move(late);
  call->stalled = stalled;
  call->slot = keys.empty() ? -1 : hash_slot(keys[0]);
  send(call, route(call->slot), false);
}

void RedisCluster::command(std::span<const std::string_view> argv, Callback cb) {
  if (shutting_down_) return cb(nullptr, "redis: client shut down");
  auto call = std::make_shared<Call>();
  call->parts.assign(argv.begin(), argv.end());
  call->cb = std::move(cb);
  call->slot = argv.size() > 1 ? hash_slot(argv[1]) : -1;
  send(call, route(call->slot), false);
}

void RedisCluster::post(std::function<void()> fn) {
  if (nodes_.empty()) return fn();  // shutting down: as RedisClient, deferred calls still run
  nodes_.front()->client->post(std::move(fn));
}

}  // namespace dripgate::control
