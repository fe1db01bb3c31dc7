// Reconciliation: a journaled local decision (journal.h) brought into Redis once it answers
// again. A local admission charges its estimate to the month's quota counter and takes what each
// of its buckets took locally, tenant and global (reconcile.lua, one call per hash slot); a local
// settle charges actual - reserved and a local stream charge its tokens, both correcting the
// reservation's token-rate buckets by the same amount (as settle.lua and charge.lua do); a
// settle or release that Redis missed during the outage is
// sent as it was asked (settle.lua and release.lua, idempotent by request_id). Every call is
// idempotent, so a record sent twice (a crash between Redis applying it and the journal saying
// so) is charged once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "control/admission/admission.h"
#include "control/outage/journal.h"

namespace dripgate::control {

// How many records one reconciliation batch sends: doubled while Redis answers a batch within
// kTargetUs, halved when it takes more than twice that. The answer time is Redis's own load
// (other daemons' admissions included) as this daemon sees it, so a drain takes what Redis can
// give, and an admission queued behind a batch on the same connections waits about kTargetUs.
class ReconcilePace {
 public:
  static constexpr int64_t kTargetUs = 5000;
  static constexpr size_t kMin = 16, kMax = 8192;
  size_t size() const { return size_; }
  void answered(int64_t us) {
    if (us < kTargetUs)
      size_ = std::min(kMax, size_ * 2);
    else if (us > 2 * kTargetUs)
      size_ = std::max(kMin, size_ / 2);
  }

 private:
  size_t size_ = 64;
};

// What became of a record sent to Redis.
enum class Reconciled {
  kApplied,  // all of it is in Redis (now, or by an earlier call)
  kRetry,    // Redis did not answer: to send again later
  // Redis can never take it: a tenant no longer configured, or a deferred settle whose
  // reservation Redis no longer holds (expired, or never admitted there). Its tokens stay as
  // Redis has them; the caller counts and logs it.
  kLost,
};
std::string_view reconciled_name(Reconciled r);

// The most records one reconcile.lua call carries: Redis runs a script alone, so a call of
// kRecordsPerCall records (~20 us each) holds the admissions behind it about a millisecond.
inline constexpr size_t kRecordsPerCall = 64;

// Sends batch (one claim's records, in sequence order) through engine: the admissions', settles'
// and stream charges' parts grouped into one reconcile.lua call per slot (one tenant's, or one
// global gate's) and kRecordsPerCall records, a missed settle or release as it was asked.
// done(i, result, why) once for each batch[i], with what became of it (why: for kLost).
// watermark: every record of the journal up to it is in Redis (Journal::watermark), for
// reconcile.lua to trim its applied sets. Runs on the engine's loop.
void reconcile(Engine& engine, const std::string& journal_id, uint64_t watermark,
               const std::vector<JournalRecord>& batch,
               std::function<void(size_t i, Reconciled, std::string why)> done);

}  // namespace dripgate::control
