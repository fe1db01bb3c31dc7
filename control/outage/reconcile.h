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

#include <functional>
#include <string>

#include "control/admission/admission.h"
#include "control/outage/journal.h"

namespace dripgate::control {

// Sends r through engine; done(true) once all of it is in Redis (or can never be: a tenant no
// longer configured, logged), done(false) to try again later. Runs on the engine's loop.
void reconcile(Engine& engine, const std::string& journal_id, const JournalRecord& r,
               std::function<void(bool ok)> done);

}  // namespace dripgate::control
