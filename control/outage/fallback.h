// What dripgate-control decides while Redis does not answer (redis.on_failure, or a plan's own):
//   closed  503, as without this file;
//   open    admitted without any gate (open_admit), said (Dripgate-Degraded: open) and counted;
//   local   decided here by a LocalLimiter on redis.local_share of every limit (times the last
//           known brake factor for the enforced gates of a braked plan), shadow gates reporting
//           as they do in the scripts; each admission, settle, stream charge and release
//           journaled (journal.h) with the plan's own limits, and charged to Redis once it
//           answers again (reconcile.h).
// One Fallback per process, shared by every worker (HTTP and gRPC), so that a settle reaching
// another worker than its admission still finds its local reservation. Thread-safe (one mutex;
// taken on the request path only for tenants whose plan fails `local`, and for a settle, stream
// charge or release while local reservations are open).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"
#include "control/outage/journal.h"
#include "control/outage/local_limiter.h"

namespace dripgate::control {

// The mode a tenant's requests fail in: its plan's on_failure, else redis.on_failure (also for
// a tenant that is not configured: it is refused before Redis is asked). The plan is the one
// Tables::find resolves: the tenant registry's (null: none) when it names the tenant, else the
// file's entry, else "*".
config::OnFailure failure_mode(const config::Config& cfg, const std::string& tenant,
                               const TenantDirectory* registry = nullptr);

// An admission under `open`: allowed, the request id given or generated as the engine does,
// no gate consulted. req must have been validated (the engine answered 503, not 400).
AdmitResult open_admit(const Snapshot& snap, const AdmitRequest& req, std::mt19937_64& rng);

// The journal's bounds (redis.journal_fsync, journal_max_mb, journal_full).
struct FallbackOptions {
  JournalOptions journal;
  // The memory an outage's local decisions may take: the index of the records not yet in Redis
  // (Journal::kIndexBytes each), the local reservations and leases open
  // (LocalLimiter::kEntryBytes each) and the settled ones (kSettledBytes each, kept until
  // reservation_ttl_s after their admission); 0: no bound. Past it a new local
  // admission is decided as `full_mode` says (closed: 503; open: admitted without gates),
  // while settles, stream charges and releases are still journaled (they correct decisions
  // already made, and their number is bounded by those).
  size_t max_bytes = 0;
  config::OnFailure full_mode = config::OnFailure::kClosed;
};
FallbackOptions fallback_options(const config::Redis& redis);

class Fallback {
 public:
  using Clock = std::function<int64_t()>;  // unix ms
  // Opens the journal at path and plays its records back into the local limiter (a daemon
  // restarted during an outage); nullptr and *error when the file cannot be opened.
  static std::unique_ptr<Fallback> open(const std::string& path, std::string* error, Clock now = {},
                                        FallbackOptions options = {});

  // Under `local`: the decision of this daemon alone. kUnavailable when the journal cannot be
  // written (a decision that could not be charged later is not made). registry: the tenant
  // registry's copy in force (null: none), so that its tenants are decided as with Redis; brake:
  // the brake read last (null: none), which scales the local shares of the enforced gates.
  AdmitResult admit(const Snapshot& snap, const AdmitRequest& req, std::mt19937_64& rng,
                    const TenantDirectory* registry = nullptr, const Brake* brake = nullptr);
  // A local reservation's settle (decided here, before and after Redis is back); nullopt when
  // request_id is not one.
  std::optional<SettleResult> settle(const std::string& request_id, int64_t tokens);
  // A stream charge of a local reservation (charge.lua's answers: 200, 429 quota once the
  // allowance is spent past its limit, 409 after the settle, 404 once expired); nullopt when
  // request_id is not one. Its token-rate gates are the ones the admission took, whatever the
  // charge names.
  std::optional<ChargeResult> charge(const std::string& request_id, int64_t tokens);
  // A local lease's release; nullopt when request_id holds none.
  std::optional<ReleaseResult> release(const std::string& request_id);
  // A settle or release Redis could not take during the outage: journaled, sent to Redis when
  // it is back (settle.lua and release.lua are idempotent by request_id).
  SettleResult defer_settle(const SettleRequest& req);
  ReleaseResult defer_release(const std::string& tenant, const std::string& request_id);
  // Redis reported the tenant's quota left (an admission or a settle): the base of the tenant's
  // allowance in the next outage.
  void quota_left(const std::string& tenant, int64_t left);
  // Whether any local reservation (open, or settled and not yet past its time) or lease is
  // here: a settle, stream charge or release must look here first.
  bool any_local() const { return local_.load(std::memory_order_relaxed) > 0; }

  // Reconciliation, by one worker at a time: up to max records not yet in Redis (empty when
  // another worker holds the claim or nothing is pending), and in *watermark the sequence up to
  // which every record is in Redis; the records then reconciled() (all of a batch at once) or not,
  // and end_batch() releases the claim. Segments no longer needed are trimmed here.
  std::vector<JournalRecord> claim(size_t max, uint64_t* watermark = nullptr);
  void reconciled(std::span<const uint64_t> seqs);
  void reconciled(uint64_t seq) { reconciled({&seq, 1}); }
  void end_batch();
  // Periodic work off the request path: the journal's interval flush.
  void tick();
  const std::string& journal_id() const { return journal_->id(); }
  size_t pending() const { return pending_.load(std::memory_order_relaxed); }
  // The memory the local decisions take: the index of the pending records and the open local
  // reservations and leases (what journal_max_mb bounds).
  size_t pending_bytes() const { return pending_bytes_.load(std::memory_order_relaxed); }
  // The journal's segment files and their bytes on the disk.
  size_t segments() const;
  uint64_t disk_bytes() const;

 private:
  Fallback(std::unique_ptr<Journal> journal, std::vector<JournalRecord> records, Clock now,
           FallbackOptions options);
  // Whether the pending records are past max_bytes (logged on each change).
  bool full();
  void counts();  // refreshes local_ and pending_ (under mu_)
  // Journals a settle or release Redis missed (stamped now), for reconciliation to replay; false
  // when the journal cannot be written.
  bool journal_deferred(JournalRecord& rec);
  // A deferred settle's or release's answer (degraded "local"): allowed once rec is journaled,
  // 503 when it cannot be.
  template <class Result>
  Result deferred(JournalRecord& rec);

  mutable std::mutex mu_;
  std::unique_ptr<Journal> journal_;
  LocalLimiter limiter_;
  std::unordered_map<std::string, int64_t> known_left_;  // quota left per Redis, by tenant
  bool claimed_ = false;
  bool full_ = false;
  bool drained_ = true;     // nothing pending since the memory was last given back
  bool none_local_ = true;  // no local reservation or lease at the last claim
  Clock now_;
  FallbackOptions options_;
  std::atomic<size_t> local_{0}, pending_{0}, pending_bytes_{0};
};

}  // namespace dripgate::control
