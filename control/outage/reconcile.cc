#include "control/outage/reconcile.h"

#include <spdlog/spdlog.h>

#include <memory>

#include "control/admission/keys.h"

namespace dripgate::control {

namespace {

// The tenant-slot part of a local admission, settle or stream charge.
ReconcileRecord tenant_record(const std::string& record_id, const JournalRecord& r) {
  ReconcileRecord c;
  c.record_id = record_id;
  c.exact = r.exact();
  c.applied_key = keys::applied(r.tenant);
  c.quota_key = keys::quota(r.tenant, r.month);
  c.month_end = std::to_string(r.month_end);
  c.tokens = r.tokens;
  c.buckets.assign(r.buckets.begin(), r.buckets.end());
  return c;
}

// A global gate's part: its bucket only, in its own slot.
ReconcileRecord global_record(const std::string& record_id, const JournalRecord& r,
                     const JournalRecord::Global& g) {
  ReconcileRecord c;
  c.record_id = record_id;
  c.exact = r.exact();
  c.applied_key = keys::global_applied(g.kind, g.name);
  c.quota_key = c.applied_key;  // same slot; nothing is added to it (tokens 0)
  c.month_end = std::to_string(r.month_end);
  c.buckets = {g.bucket};
  return c;
}

}  // namespace

void reconcile(Engine& engine, const std::string& journal_id, const JournalRecord& r,
               std::function<void(bool ok)> done) {
  const std::string record_id = journal_id + ":" + std::to_string(r.seq);
  switch (r.op) {
    case JournalRecord::Op::kRelease:
      return done(true);
    case JournalRecord::Op::kResettle:
      return engine.settle(SettleRequest{r.tenant, r.request_id, r.tokens, {}, {}, {}},
                           [done = std::move(done), rid = r.request_id](SettleResult s) {
                             if (s.outcome == Outcome::kBadRequest)
                               spdlog::warn("reconcile: settle of {} dropped: {}", rid, s.error);
                             done(s.outcome != Outcome::kUnavailable);
                           });
    case JournalRecord::Op::kRerelease:
      return engine.release(r.tenant, r.request_id,
                            [done = std::move(done), rid = r.request_id](ReleaseResult s) {
                              if (s.outcome == Outcome::kBadRequest)
                                spdlog::warn("reconcile: release of {} dropped: {}", rid, s.error);
                              done(s.outcome != Outcome::kUnavailable);
                            });
    case JournalRecord::Op::kAdmit:
    case JournalRecord::Op::kSettle:
    case JournalRecord::Op::kCharge:
      break;
  }
  std::vector<ReconcileRecord> parts{tenant_record(record_id, r)};
  for (const JournalRecord::Global& g : r.globals) parts.push_back(global_record(record_id, r, g));
  // All parts answer before done: ok only when every one is in Redis.
  struct Join {
    size_t left;
    bool ok = true;
    std::function<void(bool)> done;
  };
  auto join = std::make_shared<Join>(Join{parts.size(), true, std::move(done)});
  for (const ReconcileRecord& c : parts)
    engine.reconcile(c, [join](std::string error) {
      if (!error.empty()) join->ok = false;
      if (--join->left == 0) join->done(join->ok);
    });
}

}  // namespace dripgate::control
