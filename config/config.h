// The configuration model: plain values ("profiles"), no runtime state. Filled from YAML by the
// loader (loader.cc and its load_*.cc sections); every field here corresponds to a documented
// YAML key.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "common/error.h"
#include "common/prom_text.h"
#include "common/quota_period.h"
#include "common/redis_url.h"

namespace dripgate::config {

// A gate's `mode`: enforce (refuse) or shadow (compute and consume as enforce would, but admit,
// naming the gate that would have refused in the answer's shadow_refused): a new limit tried
// on live traffic.
enum class GateMode { kEnforce, kShadow };
// "enforce", "shadow".
std::string_view gate_mode_name(GateMode mode);
std::optional<GateMode> parse_gate_mode(std::string_view name);

// A request gate's limit: a token bucket (capacity, refill_per_s), or an exact sliding window
// (limit admissions in any window_s; request gates only, since a window counts admissions, not
// tokens).
enum class Algorithm { kTokenBucket, kSlidingWindow };
// "token_bucket", "sliding_window".
std::string_view algorithm_name(Algorithm a);
std::optional<Algorithm> parse_algorithm(std::string_view name);

// The most admissions a sliding window holds: its Redis sorted set has one member per
// admission in the window, so this bounds the memory of one window key.
inline constexpr int64_t kMaxWindowLimit = 100000;
// The longest window (s): 31 days.
inline constexpr double kMaxWindowS = 31 * 86400;

// A model gate's hold-back on its inference backends' own saturation signal
// (control/admission/saturation.h): every interval_ms the control daemon scrapes `url`
// (Prometheus text), reads `metric` and moves the gate's share of its configured rate (capacity
// and refill, or a window's limit): times `decrease` when the signal is above `target`, plus
// `increase` when it is at or below it, within [min_share, max_share]. After `failures` failed
// scrapes in a row the share drifts back toward the configured rate (1) by `increase` an
// interval. Only on global_gates.model and global_gates.model_tokens.
struct Saturation {
  std::string url;     // http://host[:port][/path] (common/http_url.h)
  std::string metric;  // name{label="value",...} (common/prom_text.h)
  common::PromAggregate aggregate = common::PromAggregate::kMax;  // over the matching series
  double target = 0;
  double min_share = 0.1;
  double max_share = 1;
  double increase = 0.05;  // share per interval
  double decrease = 0.7;   // factor, at most once per interval
  int64_t interval_ms = 1000;
  int64_t timeout_ms = 1000;  // a scrape's whole deadline; absent: min(1000, interval_ms)
  int64_t failures = 3;

  bool operator==(const Saturation&) const = default;
};

struct Bucket {
  double capacity = 0;
  double refill_per_s = 0;
  GateMode mode = GateMode::kEnforce;
  Algorithm algorithm = Algorithm::kTokenBucket;
  // algorithm sliding_window: at most `limit` admissions in any `window_s` seconds.
  int64_t limit = 0;
  double window_s = 0;
  // Warm-up (s, 0: none): a bucket the gate creates (first use, its key expired or lost) starts
  // at a third of capacity and refill and ramps linearly to all of them over warmup_s
  // (lua/lib_bucket.lua).
  double warmup_s = 0;
  // global_gates.model / model_tokens only.
  std::optional<Saturation> saturation = std::nullopt;

  bool operator==(const Bucket&) const = default;
};

// One of a plan's token quotas, `quota.tokens_per_<period>`: at most `tokens` LLM tokens in each
// period (minute, hour, day, ISO week, calendar month) of the plan's quota_timezone.
struct QuotaLimit {
  common::Period period = common::Period::kMonth;
  int64_t tokens = 0;

  bool operator==(const QuotaLimit&) const = default;
};

// The gate a quota refuses as (the 429's `gate`, reason "quota"): "quota" for the month, as
// before plans had several quotas, "quota_<period>" for the others ("quota_day").
std::string_view quota_gate(common::Period period);
// Whether a gate name is a quota's ("quota", "quota_<period>"): refused with reason "quota".
bool is_quota_gate(std::string_view gate);
// "tokens_per_<period>": the configuration key of a quota.
std::string quota_key(common::Period period);

struct Quota {
  // At most one per period, shortest period first; at least one.
  std::vector<QuotaLimit> limits;
  int64_t reservation_ttl_s = 600;
  // Open reservations (admitted, not yet settled) a tenant may have; 0: no cap. Beyond it an
  // admission is refused (429, reason "reservations"), so a client that never settles cannot
  // fill Redis.
  int64_t max_open_reservations = 0;
  GateMode mode = GateMode::kEnforce;  // of the quotas and the reservations cap

  // The monthly limit; nullopt when the plan has no monthly quota.
  std::optional<int64_t> tokens_per_month() const;
  // A plan with a monthly quota alone (`quota: {tokens_per_month: tokens, ...}`).
  static Quota monthly(int64_t tokens, int64_t reservation_ttl_s = 600,
                       int64_t max_open_reservations = 0);

  bool operator==(const Quota&) const = default;
};

// What one LLM token of each type weighs against a plan's quota and token-rate gates, in
// millionths (kOne is a weight of 1): fixed point, so that the weighted cost of a count is exact
// integer arithmetic, the same on every daemon (0.1 is no double). The types are disjoint: a
// client reports its cached input apart from its other input, its reasoning apart from its
// other output.
struct TokenWeights {
  static constexpr int64_t kOne = 1'000'000;
  // The largest weight: a count of at most 2^50 tokens times it stays far inside 128 bits.
  static constexpr int64_t kMax = 1000 * kOne;
  int64_t input = kOne, output = kOne, cached_input = kOne, reasoning = kOne;

  bool operator==(const TokenWeights&) const = default;
};

struct Concurrency {
  int64_t max_streams = 0;
  int64_t lease_s = 120;
  GateMode mode = GateMode::kEnforce;

  bool operator==(const Concurrency&) const = default;
};

// What a client refused for quota (or by a model's gate) is told to do instead: a cheaper
// model, and/or where to upgrade the plan. At least one of the two is set.
struct Degrade {
  std::string model;        // an id; empty: none
  std::string upgrade_url;  // http(s) URL; empty: none

  bool operator==(const Degrade&) const = default;
};

// A plan's waiting room: a request a rate gate refuses may wait in dripgate-control, up to
// max_wait_ms, to be admitted when the gate allows (control/gateway/wait_queue.h) rather than be
// answered 429 at once. max_wait_ms is the default of a request that does not ask and the most
// one may ask for; priority is the band it waits in (0 first, up to WaitQueue::kBands - 1).
struct PlanQueue {
  int64_t max_wait_ms = 0;
  int priority = 0;

  bool operator==(const PlanQueue&) const = default;
};
// The longest a request may wait (ms): a client's own timeout is seconds, not minutes.
inline constexpr int64_t kMaxWaitMs = 300000;
inline constexpr int kQueueBands = 8;

// What dripgate-control decides while Redis does not answer (redis.on_failure, or a plan's own
// on_failure): refuse (503), admit without any gate, or decide locally on a share of each limit
// and reconcile into Redis when it is back.
enum class OnFailure { kClosed, kOpen, kLocal };
// "closed", "open", "local".
std::string_view on_failure_name(OnFailure mode);
std::optional<OnFailure> parse_on_failure(std::string_view name);

struct Plan {
  std::string name;
  std::string cls = "default";  // dataplane class for admitted flows (`class:` in YAML)
  std::optional<Bucket> tenant, user, api_key;
  // Each client address (a request's client_ip; IPv6 per /64) within the tenant.
  std::optional<Bucket> ip;
  // Token-rate buckets: each admission takes its `tokens` estimate, not 1, from the tenant's,
  // the user's and the API key's; settle and stream charges correct it to the tokens used.
  std::optional<Bucket> tenant_tokens, user_tokens, api_key_tokens;
  std::optional<Quota> quota;
  // The time zone of the quota's calendar months (a name of the system's tz database, checked
  // by the loader): a month begins at local midnight of its first day (common/quota_period.h).
  std::string quota_timezone = "UTC";
  // A settle's or charge's count split by type is weighed by these before it reaches the quota
  // and the token-rate gates; a plain count is taken as it is (control/admission/token_cost.h).
  TokenWeights weights;
  std::optional<Concurrency> concurrency;
  std::optional<Degrade> degrade;
  // Unset: its requests never wait (a request's max_wait_ms is capped at 0).
  std::optional<PlanQueue> queue;
  // Overrides redis.on_failure for this plan's tenants; unset: redis.on_failure.
  std::optional<OnFailure> on_failure;
  // kShadow: every gate of the plan (buckets, quota, reservations, concurrency) is in shadow
  // mode, whatever the gate's own mode says.
  GateMode mode = GateMode::kEnforce;

  bool operator==(const Plan&) const = default;
};

// The one tenant id that is not an id: `tenants: { "*": { plan: free } }` puts every tenant not
// listed on that plan, each with buckets and a quota of its own.
inline constexpr std::string_view kAnyTenant = "*";

struct Tenant {
  std::string name;  // an id, or kAnyTenant
  std::string plan;
  // The SHA-256 digests (64 lower-case hex digits) of the API keys that act as this tenant
  // under control.auth: tenant_keys; the keys themselves are never configured.
  std::vector<std::string> keys_sha256{};
  // Under tenant_keys, where a flow a key-authenticated /v1/admit tags may come from besides the
  // caller's own address: CIDRs as written, and parsed.
  std::vector<std::string> flows_from{};
  std::vector<common::Cidr> flows_from_nets{};

  bool operator==(const Tenant&) const = default;
};

// The endpoint's parts (host, port, db, user, password, unix_path) are parsed from `url` by
// set_url(), the one place a Redis URL becomes settings.
struct Redis : common::RedisUrl {
  std::string url = "redis://127.0.0.1:6379/0";
  // A file whose first line is the password (instead of one in the url): the secret stays out
  // of the YAML, and out of `ps` when the url is given on the command line.
  std::string password_file;
  // Or the name of an environment variable holding the password (a systemd Environment= or a
  // container's secret), for the same reasons.
  std::string password_env;
  int timeout_ms = 50;
  int pool_size = 4;  // connections per worker thread
  // A Redis Cluster's seed nodes ("host:port"); the client reads the rest of the cluster from
  // them. Set instead of `url` (a cluster has only db 0 and names its own nodes); the password
  // then comes from password_file or password_env, and `user` (RedisUrl::user) names an ACL
  // user. Empty: the single node of `url`.
  std::vector<std::string> cluster;
  // While Redis does not answer: the default mode of every plan (a plan may set its own).
  OnFailure on_failure = OnFailure::kClosed;
  // Under `local`: the share of each global limit (bucket capacity and refill, quota left,
  // streams) this daemon may use alone, e.g. 0.25 for four boxes, so that all together stay
  // within the limit.
  double local_share = 1.0;
  // Under `local`: the append-only file of the local decisions not yet reconciled into Redis
  // (required when any plan fails `local`), so a daemon restarted during an outage loses none.
  std::string journal;
  // How the journal reaches the disk (journal_fsync): "always" (before each local decision is
  // answered: survives a power loss; a disk flush per decision), "never" (survives a crash of
  // the daemon, not of the machine), or every journal_fsync_ms (the default: a power loss loses
  // at most that long of local decisions).
  enum class JournalSync { kAlways, kInterval, kNever };
  JournalSync journal_fsync = JournalSync::kInterval;
  int journal_fsync_ms = 100;
  // The memory the local decisions not yet in Redis may take; past it new local admissions are
  // decided as journal_full says (closed: 503; open: admitted without gates).
  int journal_max_mb = 256;
  OnFailure journal_full = OnFailure::kClosed;
  // When a worker takes Redis as away (control/gateway/breaker.h): after `failures` failed
  // calls in a row or a lost connection; then every request is decided as its on_failure says
  // without asking Redis, until, open_ms later, `probes` calls in a row are answered again. A
  // failed call while Redis is not taken as away is a 503 as itself.
  struct Breaker {
    int failures = 3;
    int open_ms = 1000;
    int probes = 3;
    bool operator==(const Breaker&) const = default;
  };
  Breaker breaker;

  // Parses `url` (common/redis_url.h) into this endpoint; on failure returns why and changes
  // nothing. With password_file or password_env set, the password is the one read from there
  // and the url must carry none.
  std::optional<std::string> set_url(std::string_view url);

  bool operator==(const Redis&) const = default;
};

// One JSON line per sampled admission decision, appended to `path` (empty: off).
struct DecisionLog {
  std::string path;
  double sample = 1.0;  // the share of decisions written, in (0, 1]

  bool operator==(const DecisionLog&) const = default;
};

// TLS on a listener: the certificate chain and private key files (PEM), and the CA whose
// certificates clients must present (mTLS; empty: no client certificate asked). The files are
// read when the listener starts, and again on SIGHUP (HTTP) or when they change (gRPC's own
// credentials); the paths change on a restart.
struct Tls {
  std::string cert_file;  // empty: plaintext
  std::string key_file;
  std::string client_ca_file;

  bool on() const { return !cert_file.empty(); }
  bool operator==(const Tls&) const = default;
};

struct Control {
  std::string listen = "127.0.0.1:8080";
  Tls tls;  // HTTPS on `listen`
  int threads = 2;
  std::string auth_token;       // empty: no bearer auth
  std::string auth_token_file;  // where auth_token was read from (first line), if not inline
  std::string auth_token_env;   // or the environment variable it was read from
  // Protects /v1/admin/* (reload). Empty: the admin API answers 403. Read from a file or an
  // environment variable as auth_token is.
  std::string admin_token;
  std::string admin_token_file;
  std::string admin_token_env;
  // control.auth: who may act as which tenant. false ("token"): the shared auth_token, when
  // set, admits any tenant (a trusted proxy authenticated it). true ("tenant_keys"): the API's
  // calls carry a key of the request's tenant (Tenant::keys_sha256, the registry's keys), or
  // the shared auth_token as a trusted proxy.
  bool tenant_keys = false;
  // Protects /metrics and /healthz when set; read as auth_token is.
  std::string metrics_token;
  std::string metrics_token_file;
  std::string metrics_token_env;
  std::string dataplane_socket = "/run/dripgate/dataplane.sock";
  // Open HTTP connections at most (all workers); beyond it the longest idle one is closed, or the
  // newcomer when every one has a request in progress.
  int max_connections = 10000;
  // A connection must deliver a complete request within this long of being accepted or of its
  // previous answer, or it is closed (slow or idle clients cannot hold a connection).
  int request_timeout_s = 10;
  DecisionLog decision_log;
  // The requests waiting for a gate (plans' `queue`), at most, in the whole daemon and of one
  // tenant; a request beyond either is answered 429 at once (reason "queue_full").
  struct Queue {
    int64_t max_waiters = 100000;
    int64_t max_waiters_per_tenant = 10000;
    bool operator==(const Queue&) const = default;
  };
  Queue queue;
  // What the status page (GET /ui) shows beside the daemon's own state: the dataplane's and the
  // receiver's (dripgate-iat serve) metrics endpoints, http:// URLs scraped only while the page
  // is watched; empty: not shown.
  struct Status {
    std::string dataplane_metrics_url;
    std::string iat_metrics_url;
    bool operator==(const Status&) const = default;
  };
  Status status;
  // An admission's answer (HTTP, and the gRPC front's response_headers_to_add) carries OpenAI's
  // x-ratelimit-{limit,remaining,reset}-{requests,tokens} beside the IETF RateLimit fields.
  bool openai_headers = true;
  // Envoy's rate-limit service (gRPC) on this host:port; empty: off.
  std::string grpc_listen;
  Tls grpc_tls;  // TLS on grpc_listen
  // gRPC calls in flight at most (arrived and not yet answered); beyond it a call is answered
  // RESOURCE_EXHAUSTED at once, before it costs a Redis call. 2048: about twice what one Redis
  // process answers within redis.timeout_ms's default (25,000 admissions/s x 50 ms = 1,250), so
  // a healthy daemon never meets it, while calls piling up behind a stalled Redis (each held up to
  // its timeout) stop at 2048 x 64 KiB (the largest request) = 128 MiB of requests. Read per call.
  int grpc_max_inflight = 2048;
  // Per rate-limit domain, Envoy's descriptor key -> the gate it names (tenant, user, api_key,
  // ip, model, tool). Configured domains replace these as a whole. Envoy's remote_address
  // action names its descriptor key "remote_address"; "client_ip" is the HTTP API's name.
  std::map<std::string, std::map<std::string, std::string>> rls_domains = {
      {"dripgate",
       {{"tenant", "tenant"},
        {"user", "user"},
        {"api_key", "api_key"},
        {"client_ip", "ip"},
        {"remote_address", "ip"},
        {"model", "model"},
        {"tool", "tool"}}}};

  bool operator==(const Control&) const = default;
};

struct GlobalGates {
  std::map<std::string, Bucket> tool;
  std::map<std::string, Bucket> model;
  // A model's LLM tokens per second across tenants: takes each admission's estimate.
  std::map<std::string, Bucket> model_tokens;
  // Every admission of every tenant: a flood stops here before the tenants' own limits.
  std::optional<Bucket> total;
  // Every admission naming a client address, per address across all tenants (IPv6: per /64,
  // common::client_ip_key): an address cannot get a fresh ip bucket by naming another tenant.
  std::optional<Bucket> ip;

  bool operator==(const GlobalGates&) const = default;
};

// ---- dataplane ----

struct DripRate {
  double rate_pps = 0;  // 0: unlimited
  double rate_bps = 0;  // 0: unlimited

  bool operator==(const DripRate&) const = default;
};

struct Drip {
  double rate_pps = 0;
  double rate_bps = 0;
  uint32_t batch = 1;
  uint32_t max_catchup = 8;

  bool operator==(const Drip&) const = default;
};

// Whom a class is fair to inside itself: one sub-queue per tenant (the flow's tag; an untagged
// flow counts as its own source), per flow, or none (one FIFO).
enum class Fairness { kTenant, kFlow, kNone };

// CoDel-style active queue management of a class (dataplane/codel.h).
struct Aqm {
  double target_ms = 5;      // the standing sojourn time tolerated
  double interval_ms = 100;  // how long it may stand above target before a drop
  bool ecn = false;          // mark ECN-capable packets CE instead of dropping them

  bool operator==(const Aqm&) const = default;
};

struct Class {
  std::string name;
  uint32_t weight = 1;
  double rate_pps = 0;
  double rate_bps = 0;
  uint32_t queue_depth = 1024;  // all the class's packets, over every sub-queue
  uint32_t ttl_ms = 1000;
  // Strict priority: a class is served before every class of a higher number (up to its own
  // rate cap); weights share among classes of one priority.
  uint32_t priority = 0;
  Fairness fairness = Fairness::kTenant;
  uint32_t subqueues = 1024;  // sub-queues of a fair class (tenants beyond share them)
  uint32_t tenant_depth = 0;  // most packets one sub-queue may hold; 0: queue_depth alone
  std::optional<Aqm> aqm;     // absent: no AQM (TTL and depth only)

  bool operator==(const Class&) const = default;
};

// A static classification rule; unset matchers match anything.
struct Rule {
  std::optional<std::string> src;  // CIDR, v4 or v6, as written
  std::optional<std::string> dst;  // CIDR
  std::optional<uint16_t> vlan;
  std::optional<uint8_t> dscp;
  std::string cls;
  std::optional<common::Cidr> src_net;  // src parsed by the loader (set iff src is)
  std::optional<common::Cidr> dst_net;  // dst parsed by the loader (set iff dst is)

  bool operator==(const Rule&) const = default;
};

enum class UnknownFlows { kDefault, kDrop, kPass };

struct Dataplane {
  std::vector<std::string> eal;
  uint16_t client_port = 0;
  uint16_t cluster_port = 1;
  // RX queues of the client port (and of the cluster port, for the reverse path), spread by
  // RSS; RX lcore i polls queues i, i + n, i + 2n, ... 0: one per RX lcore.
  uint16_t rx_queues = 0;
  // One entry: the single layout when it equals drip_lcore, else split. Several: RSS, each RX
  // lcore feeding the drip lcore through its own ring.
  std::vector<unsigned> rx_lcores{1};
  unsigned drip_lcore = 1;
  uint32_t mbufs = 16383;
  // The largest IP packet (L3 MTU) either port carries, both ways; frames are up to 26 B longer
  // (Ethernet header, two VLAN tags, FCS). Above what one 2 KiB mbuf holds, the ports receive
  // into chains of mbufs where they can, else into mbufs sized for the whole frame (init.cc).
  uint32_t mtu = 1500;
  Drip drip;
  std::vector<Class> classes;  // in YAML order
  std::vector<Rule> classify;
  UnknownFlows unknown_flows = UnknownFlows::kDefault;
  uint32_t flow_idle_timeout_s = 300;
  uint32_t flow_table_size = 65536;
  std::string control_socket = "/run/dripgate/dataplane.sock";
  // A group name or number: the socket is then 0660 and that group's, so a control daemon that
  // runs as another user of the group connects. Empty: 0600, the dataplane's user alone.
  std::string control_socket_group;
  // host:port where GET /metrics (Prometheus text) is served from the main lcore; empty: off.
  std::string metrics_listen;

  bool operator==(const Dataplane&) const = default;
};

struct Config {
  std::string source;  // file name, or "<embedded default>"
  Redis redis;
  Control control;
  std::map<std::string, Plan> plans;
  std::map<std::string, Tenant> tenants;
  GlobalGates global_gates;
  std::optional<Dataplane> dataplane;

  bool operator==(const Config&) const = default;
};

// One problem in a config file: `file:line:col: path.to.field: message`.
using Error = common::Error;

struct LoadResult {
  std::optional<Config> config;  // set only when errors is empty
  std::vector<Error> errors;
};

// Whether the files named by *_file keys (secrets) are read. Only dripgate-control needs them;
// the dataplane reads the same YAML without access to the control's credentials.
enum class Secrets { kRead, kSkip };

// A configuration is a few KiB; a larger file is refused before it is parsed, so a wrong path
// (a log, a core dump) cannot take minutes and gigabytes to report.
constexpr size_t kMaxConfigBytes = 16u << 20;
// A secret file (a *_file key: redis.password_file, control.auth_token_file, …) holds a
// password or a token on its first line, far below this: a larger file is a wrong path, refused
// unread.
constexpr size_t kMaxSecretBytes = 64u << 10;

LoadResult load_file(const std::string& path, Secrets secrets = Secrets::kRead);
// Reads a configuration file into text: a regular file of at most kMaxConfigBytes, read by
// read_regular_file (regular_file.h), which refuses anything else unread and without waiting.
// The error, if any, names the file.
std::optional<Error> read_config_file(const std::string& path, std::string& text);
LoadResult load_string(const std::string& yaml, const std::string& name,
                       Secrets secrets = Secrets::kRead);
// The default configuration compiled into the binaries (config/examples/default.yaml).
LoadResult load_default();
const std::string& default_yaml();

// Renders a config as YAML that load_string() reads back into an equal Config (round trip).
std::string to_yaml(const Config& cfg);

}  // namespace dripgate::config
