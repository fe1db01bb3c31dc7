// The journal of the decisions made while Redis did not answer (redis.on_failure: local): one
// JSON line per local admission, settle, stream charge and release, appended with one write()
// each (O_APPEND), and kept in memory, indexed by sequence, until it is in Redis. A record's id,
// "<journal id>:<seq>", is unique for good (the journal id is random, made with the first
// segment and carried by every later one), so reconcile.lua charges each record once, however
// often it is sent.
//
// Files: segments. The first is redis.journal itself (its path also holds the lock that keeps a
// second daemon out); once the segment written to passes JournalOptions::segment_bytes, the
// next record starts "<path>.<n>" (n = 1, 2, ...). Each segment begins with a header line
// {"journal":"<16 hex>","next":<seq>}, then records, and {"applied":<seq>} lines once a record
// is in Redis (for a record of the same or an earlier segment). The oldest segment goes (the
// first is emptied, later ones deleted) once its records are in Redis and the caller no longer
// needs them to rebuild its local state after a restart (trim); the last one is cut back to a
// header then. A daemon restarted during an outage reads every segment back: nothing decided is
// lost, to the durability of journal_fsync (JournalOptions::Sync).
//
// A bucket is [key, capacity, refill, cost, gate] (the plan's limits, what the decision took or
// corrects, the gate's name); a line written before buckets had a cost, [key, capacity,
// refill], is read as cost 1 of an unnamed gate. Not thread-safe: Fallback owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "control/admission/admission.h"

namespace simdjson::dom {
class parser;
}

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
  // kResettle: the rest of the settle as it was asked (its token-rate gates by user, api_key
  // and model are corrected when it is sent).
  std::string user, api_key, model;
  int64_t tokens = 0;
  int64_t at_ms = 0;  // unix ms of the decision
  // kAdmit: what the local limiter needs to rebuild the reservation and lease after a restart.
  std::string month;
  int64_t month_end = 0;
  // kAdmit, kSettle, kCharge: each quota's counter of the decision's period (a line written
  // before plans had several quotas has none: its month's, which expired 32 days after the
  // month, stands for them).
  std::vector<QuotaPeriodRef> quotas;
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

// How the journal is written (redis.journal_fsync and the segment size).
struct JournalOptions {
  enum class Sync {
    kAlways,    // fdatasync before a decision is answered: survives a power loss, costs a disk
                // flush per local decision
    kInterval,  // fdatasync every interval_ms (sync_due): a power loss can lose that long
    kNever,     // the kernel writes when it likes: survives a crash of the daemon only
  };
  Sync sync = Sync::kInterval;
  int64_t interval_ms = 100;
  size_t segment_bytes = 64u << 20;
};

class Journal {
 public:
  // Opens path's segments (creating the first), reads back their records: every record still
  // in a segment, in order, goes to *read_back (applied or not: the caller rebuilds its local
  // state from them), the pending ones stay in the index. nullptr and *error when it cannot.
  static std::unique_ptr<Journal> open(const std::string& path, const JournalOptions& options,
                                       std::string* error,
                                       std::vector<JournalRecord>* read_back = nullptr);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& id() const { return id_; }
  std::string record_id(uint64_t seq) const { return id_ + ":" + std::to_string(seq); }
  // The sequence the next append takes.
  uint64_t next_seq() const { return next_; }

  // Assigns r.seq and writes it (and, under Sync::kAlways, flushes it to the disk); false when
  // the write failed (the decision must then not be made: it could not be charged later).
  bool append(JournalRecord& r);
  // These records are in Redis: one write for all their lines.
  void applied(std::span<const uint64_t> seqs);
  void applied(uint64_t seq) { applied({&seq, 1}); }
  // Where a record not yet in Redis is: its segment and its line's place in that file. The
  // index holds only this (kIndexBytes a record), the records themselves are read back from
  // their segment when they are sent, so memory does not grow with a record's size.
  struct Loc {
    uint32_t segment = 0;  // Segment::n
    uint32_t length = 0;
    uint64_t offset = 0;
  };
  // The memory one pending record takes: a std::map node (three pointers and a colour, the key
  // and the Loc) and the allocator's header.
  static constexpr size_t kIndexBytes = 4 * sizeof(void*) + sizeof(uint64_t) + sizeof(Loc) + 16;
  // The records not yet in Redis, by sequence.
  const std::map<uint64_t, Loc>& pending() const { return pending_; }
  size_t pending_count() const { return pending_.size(); }
  size_t pending_bytes() const { return pending_.size() * kIndexBytes; }
  // A pending record read back from its segment; nullopt when it cannot be (its file changed
  // under the daemon: logged by the caller).
  std::optional<JournalRecord> read(const Loc& loc);
  // Every record up to this sequence is in Redis (or never was for Redis).
  uint64_t watermark() const { return pending_.empty() ? next_ - 1 : pending_.begin()->first - 1; }
  // Drops the oldest segments whose records are all in Redis and below keep_from (the oldest
  // record the caller still needs after a restart); the last segment, once all of it is, goes
  // back to a header.
  void trim(uint64_t keep_from);
  // Under Sync::kInterval: flushes to the disk when something was written and interval_ms passed
  // since the last flush. Returns whether it flushed.
  bool sync_due(int64_t now_ms);
  size_t segments() const { return segments_.size(); }
  uint64_t disk_bytes() const;
  // Records that could not be read back (a line torn by a crash mid-write), for the log.
  size_t unreadable() const { return unreadable_; }

 private:
  struct Segment {
    size_t n = 0;                  // its file: segment_file(n)
    int rfd = -1;                  // the file, open for reading records back
    uint64_t first = 0, last = 0;  // sequences of its records (last < first: none yet)
    size_t pending = 0;            // its records not yet in Redis
    uint64_t bytes = 0;
  };
  Journal(std::string path, int lock_fd, const JournalOptions& options);
  std::string segment_file(size_t n) const;
  void read_segment(Segment& seg, std::vector<JournalRecord>& records, std::vector<Loc>& locs,
                    std::vector<uint64_t>& applied, bool* ends_line);
  void close_segment(Segment& seg);
  bool start_segment(size_t n, std::string* error);
  bool write_line(const std::string& line);
  Segment* segment_of(uint64_t seq);
  void flush();

  std::string path_;
  int lock_fd_ = -1;  // the first segment's file, locked for the process's lifetime
  int fd_ = -1;       // the segment written to (the last)
  JournalOptions options_;
  std::string id_;
  uint64_t next_ = 1;
  std::deque<Segment> segments_;
  std::map<uint64_t, Loc> pending_;
  bool dirty_ = false;
  int64_t synced_ms_ = 0;
  size_t unreadable_ = 0;
  // read()'s read-ahead: a claim reads the pending records in file order, so one pread serves
  // those of kReadAhead bytes. Dropped when its segment is closed or truncated (its offsets
  // are then written again); lines once written do not change.
  static constexpr size_t kReadAhead = 256 << 10;
  struct Ahead {
    size_t segment = SIZE_MAX;  // Segment::n of bytes; SIZE_MAX: none
    uint64_t offset = 0;
    std::string bytes;
  } ahead_;
  std::unique_ptr<simdjson::dom::parser> parser_;  // reused: no allocation once warm
};

}  // namespace dripgate::control
