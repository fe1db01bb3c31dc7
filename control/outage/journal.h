// The journal of the decisions made while Redis did not answer (redis.on_failure: local): one
// JSON line per local admission, settle, stream charge and release, appended to redis.journal with
// one write() each (O_APPEND), and kept in memory until it is in Redis. A record's id, "<journal
// id>:<seq>", is unique for good (the journal id is random, made when the file is created, and kept
// when the file is compacted), so reconcile.lua charges each record once, however often it is sent.
// A daemon restarted during an outage reads its journal back: nothing decided is lost.
//
// The file: a header line {"journal":"<16 hex>","next":<seq>}, then records, and
// {"applied":<seq>} lines once a record is in Redis. Emptied back to a header when every record
// is applied and nothing local is open. A bucket is [key, capacity, refill, cost, gate] (the
// plan's limits, what the decision took or corrects, the gate's name); a line written before
// buckets had a cost, [key, capacity, refill], is read as cost 1 of an unnamed gate. Not
// thread-safe: Fallback owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/admission/admission.h"

namespace dripgate::control {

struct JournalRecord {
  enum class Op {
    kAdmit,      // a local admission: charge `tokens` (the estimate), debit the buckets
    kSettle,     // a local reservation settled: charge `tokens` (actual - reserved), and
                 // correct its token-rate buckets by their cost (the same delta)
    kRelease,    // a local lease ended: nothing for Redis (kept for a restart)
    kResettle,   // a Redis reservation settled during the outage: settle.lua, `tokens` actual
    kRerelease,  // a Redis lease released during the outage: release.lua
    kCharge,     // a local reservation's stream charge: `tokens` to the quota and to its
                 // token-rate buckets, reconciled like a settle's correction
  };
  struct Bucket : ReconcileRecord::Bucket {
    std::string gate;  // "tenant", "tenant_tokens", ...; "" in a line of the old layout
  };
  struct Global {
    std::string kind, name;  // "model"/"model_tokens"/"tool"/"total" and its id
    Bucket bucket;
  };
  uint64_t seq = 0;
  Op op = Op::kAdmit;
  std::string tenant, request_id;
  int64_t tokens = 0;
  int64_t at_ms = 0;  // unix ms of the decision
  // kAdmit: what the local limiter needs to rebuild the reservation and lease after a restart.
  std::string month;
  int64_t month_end = 0;
  int64_t reservation_ttl_ms = 0, lease_ms = 0, max_streams = -1;
  std::optional<int64_t> allowance;
  // kAdmit: every bucket the decision went through, cost = what it took; kSettle and kCharge:
  // the reservation's token-rate buckets, cost = the correction. Full limits.
  std::vector<Bucket> buckets;  // the tenant's
  std::vector<Global> globals;

  // Whether reconciling it needs Redis at all.
  bool for_redis() const { return op != Op::kRelease; }
  // A correction (kSettle, kCharge): its buckets take their cost as settle.lua would.
  bool exact() const { return op == Op::kSettle || op == Op::kCharge; }
};

class Journal {
 public:
  // Opens path (creating it), reads back its records; nullptr and *error when it cannot.
  static std::unique_ptr<Journal> open(const std::string& path, std::string* error);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& id() const { return id_; }
  std::string record_id(uint64_t seq) const { return id_ + ":" + std::to_string(seq); }

  // Assigns r.seq and writes it; false when the write failed (the decision must then not be
  // made: it could not be charged later).
  bool append(JournalRecord& r);
  // r is in Redis.
  void applied(uint64_t seq);
  // Every record since the last compaction, in order; and the ones not yet in Redis.
  const std::vector<JournalRecord>& records() const { return records_; }
  std::vector<const JournalRecord*> pending() const;
  size_t pending_count() const { return records_.size() - applied_.size(); }
  // Back to a header when nothing is pending (call only when nothing local is open either).
  void compact();
  // Records that could not be read back (a line torn by a crash mid-write), for the log.
  size_t unreadable() const { return unreadable_; }

 private:
  Journal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  bool write_line(const std::string& line);
  void write_header();

  std::string path_;
  int fd_ = -1;
  std::string id_;
  uint64_t next_ = 1;
  std::vector<JournalRecord> records_;
  std::set<uint64_t> applied_;
  size_t unreadable_ = 0;
};

}  // namespace dripgate::control
