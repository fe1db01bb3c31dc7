#include "control/outage/reconcile.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

#include "control/admission/keys.h"

namespace dripgate::control {

namespace {

// The tenant-slot part of a local admission, settle or stream charge.
ReconcileRecord tenant_record(const std::string& journal_id, const std::string& watermark,
                              const JournalRecord& r) {
  ReconcileRecord c;
  c.seq = std::to_string(r.seq);
  c.watermark = watermark;
  c.exact = r.exact();
  c.applied_key = keys::applied(r.tenant, journal_id);
  c.quota_key = keys::quota(r.tenant, r.month);
  c.month_end = std::to_string(r.month_end);
  c.tokens = r.tokens;
  c.buckets.assign(r.buckets.begin(), r.buckets.end());
  return c;
}

// A global gate's part: its bucket only, in its own slot.
ReconcileRecord global_record(const std::string& journal_id, const std::string& watermark,
                              const JournalRecord& r, const JournalRecord::Global& g) {
  ReconcileRecord c;
  c.seq = std::to_string(r.seq);
  c.watermark = watermark;
  c.exact = r.exact();
  c.applied_key = keys::global_applied(g.kind, g.name, journal_id);
  c.quota_key = c.applied_key;  // same slot; nothing is added to it (tokens 0)
  c.month_end = std::to_string(r.month_end);
  c.buckets = {g.bucket};
  return c;
}

}  // namespace

std::string_view reconciled_name(Reconciled r) {
  switch (r) {
    case Reconciled::kApplied:
      return "ok";
    case Reconciled::kRetry:
      return "retry";
    case Reconciled::kLost:
      return "lost";
  }
  return "unknown";
}

void reconcile(Engine& engine, const std::string& journal_id, uint64_t watermark,
               const JournalRecord& r, std::function<void(Reconciled, std::string)> done) {
  switch (r.op) {
    case JournalRecord::Op::kRelease:
      return done(Reconciled::kApplied, {});
    case JournalRecord::Op::kResettle:
      return engine.settle(
          SettleRequest{r.tenant, r.request_id, r.tokens, r.user, r.api_key, r.model},
          [done = std::move(done)](SettleResult s) {
            if (s.outcome == Outcome::kUnavailable) return done(Reconciled::kRetry, {});
            if (s.outcome != Outcome::kAllowed) return done(Reconciled::kLost, s.error);
            // Redis no longer holds the reservation: the estimate it took stays charged.
            if (s.detail == "expired")
              return done(Reconciled::kLost, "the reservation expired in Redis");
            done(Reconciled::kApplied, {});
          });
    case JournalRecord::Op::kRerelease:
      return engine.release(r.tenant, r.request_id, [done = std::move(done)](ReleaseResult s) {
        if (s.outcome == Outcome::kUnavailable) return done(Reconciled::kRetry, {});
        if (s.outcome == Outcome::kBadRequest) return done(Reconciled::kLost, s.error);
        done(Reconciled::kApplied, {});
      });
    case JournalRecord::Op::kAdmit:
    case JournalRecord::Op::kSettle:
    case JournalRecord::Op::kCharge:
      break;
  }
  const std::string w = std::to_string(watermark);
  std::vector<ReconcileRecord> parts{tenant_record(journal_id, w, r)};
  for (const JournalRecord::Global& g : r.globals)
    parts.push_back(global_record(journal_id, w, r, g));
  // All parts answer before done: applied only when every one is in Redis.
  struct Join {
    size_t left;
    bool ok = true;
    std::function<void(Reconciled, std::string)> done;
  };
  auto join = std::make_shared<Join>(Join{parts.size(), true, std::move(done)});
  for (const ReconcileRecord& c : parts)
    engine.reconcile(c, [join](std::string error) {
      if (!error.empty()) join->ok = false;
      if (--join->left == 0) join->done(join->ok ? Reconciled::kApplied : Reconciled::kRetry, {});
    });
}

}  // namespace dripgate::control
