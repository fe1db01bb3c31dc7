// The decisions one daemon makes alone while Redis does not answer (redis.on_failure: local):
// token buckets, a quota allowance and concurrency leases, each a share (redis.local_share) of
// the plan's limit, so that N daemons with a share of 1/N stay within the global limit
// together. Gates in shadow mode are evaluated and consume as enforcing ones but do not refuse,
// as the scripts do. Plain state without a clock of its own (every call is given the time) and
// without locking: Fallback (fallback.h) owns one and serialises the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "control/admission/admission.h"
#include "control/outage/keyed_hash.h"

namespace dripgate::control {

// One bucket as this daemon enforces it: the plan's capacity and refill times the share (and the
// brake's factor for an enforced gate under a brake).
struct LocalBucket {
  std::string key;   // the Redis key of the bucket (keys.cc): one local bucket per Redis one
  std::string gate;  // "tenant", "user", "api_key", "model", "tool", "tenant_tokens", ...
  // Negative: not known here (a reservation played back after a restart, whose local buckets
  // start full again): only Redis is corrected then.
  double capacity = 0;
  double refill = 0;
  double cost = 1;         // what an admission takes: 1, or a token-rate gate's estimate
  bool shadow = false;     // mode: shadow, its own or its plan's: reports, never refuses
  bool per_token = false;  // a token-rate gate: settle and stream charges correct it
  bool global = false;     // a global gate (its own hash slot); `gate` is its kind
  bool window = false;     // a sliding window, approximated by this bucket; not journaled
  std::string id;          // a global gate's model or tool ("" for total)
  // The plan's limits as the scripts take them (journal.h: reconciliation charges Redis's
  // bucket, not a share of it).
  std::string full_capacity, full_refill;
};

struct LocalAdmit {
  std::string tenant, request_id;
  uint64_t seq = 0;  // the journal record of the admission (0: none)
  std::vector<LocalBucket> buckets;
  // The tokens this daemon may charge the tenant alone during this outage (set when the tenant
  // has no allowance yet); nullopt: the plan has no quota.
  std::optional<int64_t> allowance;
  bool quota_shadow = false, streams_shadow = false;  // the quota / concurrency gate's mode
  int64_t tokens = 0;
  int64_t max_streams = -1;  // local leases at most; -1: no concurrency gate
  int64_t lease_ms = 0;
  int64_t reservation_ttl_ms = 0;
  std::string month;  // of the decision, for its settle
  int64_t month_end = 0;
  std::vector<QuotaPeriodRef> quotas;  // each quota's period of the decision (journal.h)
};

struct LocalVerdict {
  bool allowed = false;
  std::string gate, reason;  // refusals: the gate and "rate" | "quota" | "concurrency"
  int64_t retry_after_ms = 0;
  // Admitted only: the shadow gate that would have refused with the longest wait, and that wait.
  std::string shadow_refused;
  int64_t shadow_retry_ms = 0;
  std::vector<Remaining> remaining;  // the local levels (limits are the local shares)
  // Admitted only: what each bucket took (its cost, or 0 for a shadow bucket short of it).
  std::vector<double> taken;
};

// A local reservation, open until settled or expired (then its estimate stays charged).
struct LocalReservation {
  std::string tenant;
  int64_t reserved = 0;  // the estimate plus the stream charges so far
  int64_t expires_ms = 0;
  std::string month;
  int64_t month_end = 0;
  // The token-rate gates that took the estimate: settle and stream charges correct them.
  std::vector<LocalBucket> token_gates;
  uint64_t seq = 0;                    // the admission's journal record
  std::vector<QuotaPeriodRef> quotas;  // each quota's period of the admission (journal.h)
};

struct LocalSettle {
  bool first = false;  // false: settled before (nothing more is charged)
  int64_t delta = 0;   // what the quota counter takes now: actual - reserved
  int64_t charged = 0;
  int64_t remaining = -1;        // of the local allowance; -1: no quota
  LocalReservation reservation;  // first only: what the settle corrects
};

// A stream charge of a local reservation (charge.lua's semantics).
struct LocalCharge {
  enum class Code { kCharged, kSettled, kExpired };
  Code code = Code::kCharged;
  int64_t charged = 0;         // reserved after the charge
  int64_t lease_left_ms = -1;  // the renewed lease; -1: no live lease
  bool over_quota = false;     // the allowance is spent past its limit now (429 quota)
  int64_t quota_reset_ms = 0;
  std::vector<Remaining> remaining;  // the quota allowance, then the token-rate gates
  LocalReservation reservation;
};

class LocalLimiter {
 public:
  // All-or-nothing over every enforced gate of a; admitted: each bucket's cost from it (a
  // shadow bucket short of it gives nothing), the estimate charged to the allowance, a
  // reservation and (with a concurrency gate) a lease. An estimate above a bucket's local
  // capacity (within the plan's: prepare refuses more) is refused as rate, to retry once the
  // bucket is full again: Redis may be back by then.
  LocalVerdict admit(const LocalAdmit& a, int64_t now_ms);
  // nullopt: request_id is not a local reservation (a settle for Redis to decide).
  std::optional<LocalSettle> settle(const std::string& request_id, int64_t tokens, int64_t now_ms);
  // nullopt: request_id is not a local reservation. Charged: the reservation, the allowance
  // and the token-rate gates take the tokens (a bucket may go below zero) and a live lease is
  // renewed.
  std::optional<LocalCharge> charge(const std::string& request_id, int64_t tokens, int64_t now_ms);
  // nullopt: request_id holds no local lease; true: a live one ended.
  std::optional<bool> release(const std::string& request_id, int64_t now_ms);
  // Whether request_id is a local reservation, open or settled (until its time).
  bool is_local(const std::string& request_id) {
    return reservations_.count(request_id) || settled_.count(hash_(request_id));
  }

  // Redis decided for the tenant again: the next outage starts from what Redis reports.
  void forget_quota(const std::string& tenant) { quota_.erase(tenant); }
  // Drops expired reservations, open or settled (by indexes of their expiry: what did not
  // expire is not walked, however many there are) and, at most once a second, expired leases.
  void sweep(int64_t now_ms);
  // Reservations and leases still open here.
  size_t open() const { return reservations_.size() + leases_.size(); }
  // Reservations settled here whose time has not come: kept so that a repeated settle is
  // answered "already settled" and a charge "settled", as by the scripts.
  size_t settled() const { return settled_.size(); }
  // The memory one open reservation or lease is counted for: a hash node with the
  // reservation and its request_id, the expiry index's node with its copy of the id, and the
  // allocator's headers (a lease takes less; counted the same).
  static constexpr size_t kEntryBytes = 384;
  // A settled one keeps only its count, expiry and tenant under a keyed hash of its id, in a
  // flat table (a 32 B slot and a control byte, the table 7/16 to 7/8 full) and an expiry heap
  // (a 16 B entry, up to twice that with the heap's spare capacity): 53-107 B, counted 88. Both
  // are single blocks apart from the heap's small objects (which an outage's open reservations
  // and journal index fill), so that what those leave when they go can be given back to the
  // system while settled reservations are still kept.
  static constexpr size_t kSettledBytes = 88;
  size_t bytes() const { return open() * kEntryBytes + settled() * kSettledBytes; }
  // The journal record of the oldest reservation still to be settled here (UINT64_MAX: none):
  // the journal keeps it and every later one, which a restart needs to settle it exactly.
  uint64_t oldest_unsettled() const {
    return unsettled_.empty() ? UINT64_MAX : *unsettled_.begin();
  }

  // A journal's records played back after a restart: the reservations, their charges to the
  // allowance and the leases come back; bucket levels do not (they start full, as at any
  // outage's start).
  void restore_admit(const LocalAdmit& a, int64_t at_ms, int64_t now_ms);
  void restore_settle(const std::string& request_id, int64_t delta);
  void restore_charge(const std::string& request_id, int64_t tokens);
  void restore_release(const std::string& request_id);

 private:
  struct Level {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  struct Allowance {
    int64_t limit = 0;
    int64_t spent = 0;
  };
  struct Lease {
    std::string tenant;
    int64_t until_ms = 0;
    int64_t lease_ms = 0;
  };
  double level(const LocalBucket& b, int64_t now_ms);
  // Takes delta tokens from b (negative gives back up to the capacity; may go below zero).
  double correct(const LocalBucket& b, double delta, int64_t now_ms);
  // The tenant's live leases, or a count of them with expired ones when that is below max.
  size_t live_leases(const std::string& tenant, int64_t now_ms, int64_t max);
  void put_lease(const std::string& request_id, Lease lease);
  std::map<std::string, Lease>::iterator drop_lease(std::map<std::string, Lease>::iterator it);
  void drop_count(const std::string& tenant);
  struct Settled {
    int64_t charged = 0;  // what the settle charged in all
    int64_t expires_ms = 0;
    uint32_t tenant = 0;  // in tenants_
  };
  using Expiry = std::pair<int64_t, uint64_t>;  // a settled reservation's expiry and hash
  void take(const LocalAdmit& a, const std::vector<double>& taken, int64_t now_ms);
  void reserve(const LocalAdmit& a, const std::vector<double>* taken, int64_t at_ms);
  // Settles it (charged in all): the open reservation becomes a Settled one; returned.
  LocalReservation bury(std::unordered_map<std::string, LocalReservation>::iterator it,
                        int64_t charged);
  int64_t remaining(const std::string& tenant) const;  // of the allowance; -1: none

  std::unordered_map<std::string, Level> buckets_;
  std::unordered_map<std::string, Allowance> quota_;                // by tenant
  std::unordered_map<std::string, LocalReservation> reservations_;  // open: not settled
  std::map<std::string, Lease> leases_;                             // by request_id
  std::unordered_map<std::string, size_t> held_;  // the leases in leases_, by tenant
  std::set<uint64_t> unsettled_;                  // the seq of each open reservation
  // Each open reservation's expiry and request_id, in order of expiry (an entry whose
  // reservation was replaced or is gone is skipped; a settle erases its own).
  std::multimap<int64_t, std::string> expiry_;
  KeyedHash hash_;
  absl::flat_hash_map<uint64_t, Settled> settled_;  // by hash_ of the request_id
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> settled_expiry_;
  // The tenants of settled reservations, by index (a few names, kept for the daemon's life).
  std::vector<std::string> tenants_;
  std::unordered_map<std::string, uint32_t> tenant_index_;
  int64_t leases_swept_ms_ = 0;
};

}  // namespace dripgate::control
