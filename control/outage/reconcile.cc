#include "control/outage/reconcile.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>

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
  for (const QuotaPeriodRef& q : r.quotas)
    c.quotas.push_back({keys::quota(r.tenant, q.name), std::to_string(q.expire_at)});
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
  c.buckets = {g.bucket};
  return c;
}

// A record that is not a charge: a release needs nothing (a local release freed local state
// only), a settle or release Redis missed is sent as it was asked.
void resend(Engine& engine, const JournalRecord& r,
            std::function<void(Reconciled, std::string)> done) {
  switch (r.op) {
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
    case JournalRecord::Op::kRelease:
      return done(Reconciled::kApplied, {});
    case JournalRecord::Op::kAdmit:
    case JournalRecord::Op::kSettle:
    case JournalRecord::Op::kCharge:
      break;  // charges: reconcile.lua's (reconcile() below)
  }
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
               const std::vector<JournalRecord>& batch,
               std::function<void(size_t, Reconciled, std::string)> done) {
  // Per record, its parts not answered yet and whether every answered one is in Redis.
  struct Join {
    size_t left = 0;
    bool ok = true;
  };
  auto joins = std::make_shared<std::vector<Join>>(batch.size());
  auto part_done = [joins, done](size_t i, bool ok) {
    Join& j = (*joins)[i];
    j.ok = j.ok && ok;
    if (--j.left == 0) done(i, j.ok ? Reconciled::kApplied : Reconciled::kRetry, {});
  };
  // The parts by applied set (a slot), each in the batch's order: sequence order.
  struct Group {
    std::vector<ReconcileRecord> parts;
    std::vector<size_t> of;  // the record each part is of
  };
  std::vector<Group> groups;
  std::unordered_map<std::string, size_t> group_of;
  auto add = [&](size_t i, ReconcileRecord part) {
    auto [it, fresh] = group_of.try_emplace(part.applied_key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].parts.push_back(std::move(part));
    groups[it->second].of.push_back(i);
  };
  const std::string w = std::to_string(watermark);
  for (size_t i = 0; i < batch.size(); ++i) {
    const JournalRecord& r = batch[i];
    switch (r.op) {
      case JournalRecord::Op::kAdmit:
      case JournalRecord::Op::kSettle:
      case JournalRecord::Op::kCharge:
        (*joins)[i].left = 1 + r.globals.size();
        add(i, tenant_record(journal_id, w, r));
        for (const JournalRecord::Global& g : r.globals) add(i, global_record(journal_id, w, r, g));
        break;
      case JournalRecord::Op::kRelease:
      case JournalRecord::Op::kResettle:
      case JournalRecord::Op::kRerelease:
        resend(engine, r,
               [done, i](Reconciled result, std::string why) { done(i, result, std::move(why)); });
    }
  }
  for (const Group& g : groups)
    for (size_t at = 0; at < g.parts.size(); at += kRecordsPerCall) {
      const size_t n = std::min(kRecordsPerCall, g.parts.size() - at);
      std::vector<size_t> of(g.of.begin() + static_cast<std::ptrdiff_t>(at),
                             g.of.begin() + static_cast<std::ptrdiff_t>(at + n));
      engine.reconcile(std::span(g.parts).subspan(at, n),
                       [part_done, of = std::move(of)](std::string error) {
                         for (size_t i : of) part_done(i, error.empty());
                       });
    }
}

}  // namespace dripgate::control
