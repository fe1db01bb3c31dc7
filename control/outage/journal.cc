#include "control/outage/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <simdjson.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

namespace dripgate::control {

namespace {

using json = nlohmann::json;

constexpr const char* kOps[] = {"admit", "settle", "release", "resettle", "rerelease", "charge"};

json bucket_json(const JournalRecord::Bucket& b) {
  return json::array({b.key, b.capacity, b.refill, b.cost, b.gate});
}

// [key, capacity, refill, cost, gate]; the old layout [key, capacity, refill] took 1 from every
// bucket. (A line is read with simdjson: a drain reads every record back, and nlohmann's tree
// was most of its cost. A wrong type or a missing field throws simdjson_error.)
JournalRecord::Bucket bucket_of(simdjson::dom::array a) {
  JournalRecord::Bucket b;
  b.key = std::string_view(a.at(0));
  b.capacity = std::string_view(a.at(1));
  b.refill = std::string_view(a.at(2));
  if (a.size() >= 5) {
    b.cost = std::string_view(a.at(3));
    b.gate = std::string_view(a.at(4));
  }
  return b;
}

std::string optional_string(simdjson::dom::object j, std::string_view key) {
  simdjson::simdjson_result<simdjson::dom::element> v = j[key];
  return v.error() == simdjson::NO_SUCH_FIELD ? std::string() : std::string(std::string_view(v));
}

std::string to_line(const JournalRecord& r) {
  json j = {{"seq", r.seq},       {"op", kOps[static_cast<int>(r.op)]},
            {"tenant", r.tenant}, {"request_id", r.request_id},
            {"tokens", r.tokens}, {"at_ms", r.at_ms}};
  if (r.op == JournalRecord::Op::kResettle) {
    if (!r.user.empty()) j["user"] = r.user;
    if (!r.api_key.empty()) j["api_key"] = r.api_key;
    if (!r.model.empty()) j["model"] = r.model;
  }
  if (r.op == JournalRecord::Op::kAdmit || r.exact()) {
    j["month"] = r.month;
    j["month_end"] = r.month_end;
    json q = json::array();
    for (const QuotaPeriodRef& x : r.quotas) q.push_back({x.name, x.expire_at});
    j["quotas"] = std::move(q);
  }
  if (r.op == JournalRecord::Op::kAdmit) {
    j["reservation_ttl_ms"] = r.reservation_ttl_ms;
    j["lease_ms"] = r.lease_ms;
    j["max_streams"] = r.max_streams;
    if (r.allowance) j["allowance"] = *r.allowance;
  }
  if (r.op == JournalRecord::Op::kAdmit || r.exact()) {
    json b = json::array();
    for (const auto& x : r.buckets) b.push_back(bucket_json(x));
    j["buckets"] = std::move(b);
    json g = json::array();
    for (const auto& x : r.globals) g.push_back({x.kind, x.name, bucket_json(x.bucket)});
    j["globals"] = std::move(g);
  }
  return j.dump() + "\n";
}

JournalRecord from_json(simdjson::dom::object j) {
  JournalRecord r;
  r.seq = uint64_t(j["seq"]);
  const std::string_view op = j["op"];
  bool known = false;
  for (int i = 0; i < static_cast<int>(std::size(kOps)); ++i)
    if (op == kOps[i]) {
      r.op = static_cast<JournalRecord::Op>(i);
      known = true;
    }
  if (!known) throw std::runtime_error("unknown op");
  r.tenant = std::string_view(j["tenant"]);
  r.request_id = std::string_view(j["request_id"]);
  r.tokens = int64_t(j["tokens"]);
  r.at_ms = int64_t(j["at_ms"]);
  r.user = optional_string(j, "user");
  r.api_key = optional_string(j, "api_key");
  r.model = optional_string(j, "model");
  if (j["month"].error() != simdjson::NO_SUCH_FIELD) {
    r.month = std::string_view(j["month"]);
    r.month_end = int64_t(j["month_end"]);
    if (j["quotas"].error() != simdjson::NO_SUCH_FIELD) {
      for (simdjson::dom::array q : simdjson::dom::array(j["quotas"]))
        r.quotas.push_back({std::string(std::string_view(q.at(0))), int64_t(q.at(1))});
    } else {
      r.quotas.push_back({r.month, r.month_end + 32 * 86400});
    }
  }
  if (r.op == JournalRecord::Op::kAdmit) {
    r.reservation_ttl_ms = int64_t(j["reservation_ttl_ms"]);
    r.lease_ms = int64_t(j["lease_ms"]);
    r.max_streams = int64_t(j["max_streams"]);
    if (j["allowance"].error() != simdjson::NO_SUCH_FIELD) r.allowance = int64_t(j["allowance"]);
  }
  // A settle written before settles corrected token-rate buckets has none.
  if (r.op == JournalRecord::Op::kAdmit ||
      (r.exact() && j["buckets"].error() != simdjson::NO_SUCH_FIELD)) {
    for (simdjson::dom::array b : simdjson::dom::array(j["buckets"]))
      r.buckets.push_back(bucket_of(b));
    for (simdjson::dom::array g : simdjson::dom::array(j["globals"]))
      r.globals.push_back({std::string(std::string_view(g.at(0))),
                           std::string(std::string_view(g.at(1))),
                           bucket_of(simdjson::dom::array(g.at(2)))});
  }
  return r;
}

std::string random_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string Journal::segment_file(size_t n) const {
  return n == 0 ? path_ : path_ + "." + std::to_string(n);
}

void Journal::read_segment(Segment& seg, std::vector<JournalRecord>& records,
                           std::vector<Loc>& locs, std::vector<uint64_t>& applied,
                           bool* ends_line) {
  std::ifstream in(segment_file(seg.n));
  std::string line;
  *ends_line = true;
  while (std::getline(in, line)) {
    *ends_line = !in.eof();
    const uint64_t offset = seg.bytes;
    seg.bytes += line.size() + 1;
    if (line.empty()) continue;
    try {
      simdjson::dom::object v = parser_->parse(line);
      if (v["journal"].error() != simdjson::NO_SUCH_FIELD) {
        id_ = std::string_view(v["journal"]);
        next_ = std::max(next_, uint64_t(v["next"]));
      } else if (v["applied"].error() != simdjson::NO_SUCH_FIELD) {
        applied.push_back(uint64_t(v["applied"]));
      } else {
        JournalRecord r = from_json(v);
        next_ = std::max(next_, r.seq + 1);
        if (seg.last < seg.first) seg.first = r.seq;
        seg.last = r.seq;
        records.push_back(std::move(r));
        locs.push_back(
            Loc{static_cast<uint32_t>(seg.n), static_cast<uint32_t>(line.size()), offset});
      }
    } catch (const std::exception&) {
      // Only a segment's last line can be torn (one write() per line, O_APPEND); its decision
      // was never answered, so it is skipped.
      ++unreadable_;
    }
  }
}

std::unique_ptr<Journal> Journal::open(const std::string& path, const JournalOptions& options,
                                       std::string* error, std::vector<JournalRecord>* read_back) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot open the journal " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  // Two daemons on one journal would interleave their records and reuse their ids.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    *error = "the journal " + path + " is in use by another process: give each daemon its own";
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<Journal> j(new Journal(path, fd, options));
  // The segments there are: the first, then <path>.<n> in order of n.
  std::vector<size_t> ns{0};
  std::error_code ec;
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".";
  for (const auto& e : std::filesystem::directory_iterator(
           p.has_parent_path() ? p.parent_path() : std::filesystem::path("."), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix) || name.size() == prefix.size() ||
        name.size() > prefix.size() + 9 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
      continue;
    ns.push_back(std::stoul(name.substr(prefix.size())));
  }
  std::sort(ns.begin(), ns.end());
  std::vector<JournalRecord> records;
  std::vector<Loc> locs;
  std::vector<uint64_t> applied;
  bool ends_line = true;
  for (size_t n : ns) {
    Segment seg;
    seg.n = n;
    seg.first = 1;
    seg.last = 0;
    seg.rfd = ::open(j->segment_file(n).c_str(), O_RDONLY | O_CLOEXEC);
    j->read_segment(seg, records, locs, applied, &ends_line);
    j->segments_.push_back(seg);
  }
  if (j->id_.empty() && !records.empty()) {
    *error = "the journal " + path + " has records but no header line";
    return nullptr;
  }
  if (j->id_.empty()) j->id_ = random_id();
  // The index: every record for Redis that no applied line names.
  std::sort(applied.begin(), applied.end());
  for (size_t i = 0; i < records.size(); ++i) {
    const JournalRecord& r = records[i];
    if (!r.for_redis() || std::binary_search(applied.begin(), applied.end(), r.seq)) continue;
    j->pending_.emplace(r.seq, locs[i]);
  }
  for (Segment& seg : j->segments_)
    if (seg.last >= seg.first)
      for (auto it = j->pending_.lower_bound(seg.first);
           it != j->pending_.end() && it->first <= seg.last; ++it)
        ++seg.pending;
  // The last segment is written to; an empty one gets its header.
  Segment& last = j->segments_.back();
  j->fd_ = last.n == 0 ? fd
                       : ::open(j->segment_file(last.n).c_str(),
                                O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (j->fd_ < 0) {
    *error = "cannot open the journal " + j->segment_file(last.n) + ": " + std::strerror(errno);
    return nullptr;
  }
  if (last.bytes == 0) {
    j->write_line(json({{"journal", j->id_}, {"next", j->next_}}).dump() + "\n");
  } else if (!ends_line) {
    // Ends the torn line, so the next record starts on a line of its own.
    j->write_line("\n");
  }
  if (read_back) *read_back = std::move(records);
  return j;
}

Journal::Journal(std::string path, int lock_fd, const JournalOptions& options)
    : path_(std::move(path)),
      lock_fd_(lock_fd),
      options_(options),
      parser_(std::make_unique<simdjson::dom::parser>()) {}

Journal::~Journal() {
  if (fd_ >= 0 && options_.sync != JournalOptions::Sync::kNever) flush();
  if (fd_ >= 0 && fd_ != lock_fd_) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  for (Segment& s : segments_) close_segment(s);
}

void Journal::close_segment(Segment& seg) {
  if (seg.rfd >= 0) ::close(seg.rfd);
  seg.rfd = -1;
  if (ahead_.segment == seg.n) ahead_.segment = SIZE_MAX;
}

std::optional<JournalRecord> Journal::read(const Loc& loc) {
  const Segment* seg = nullptr;
  for (const Segment& s : segments_)
    if (s.n == loc.segment) seg = &s;
  if (!seg || seg->rfd < 0) return std::nullopt;
  const bool held = ahead_.segment == loc.segment && loc.offset >= ahead_.offset &&
                    loc.offset + loc.length <= ahead_.offset + ahead_.bytes.size();
  if (!held) {
    // One pread for this record and those after it in the file, which a claim reads next.
    ahead_.segment = SIZE_MAX;
    ahead_.bytes.resize(std::max<size_t>(kReadAhead, loc.length));
    size_t got = 0;
    while (got < loc.length) {
      ssize_t n = ::pread(seg->rfd, ahead_.bytes.data() + got, ahead_.bytes.size() - got,
                          static_cast<off_t>(loc.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      got += static_cast<size_t>(n);
    }
    ahead_.bytes.resize(got);
    ahead_.segment = loc.segment;
    ahead_.offset = loc.offset;
  }
  try {
    return from_json(
        parser_->parse(ahead_.bytes.data() + (loc.offset - ahead_.offset), loc.length));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool Journal::write_line(const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  segments_.back().bytes += line.size();
  dirty_ = true;
  return true;
}

void Journal::flush() {
  if (!dirty_) return;
  ::fdatasync(fd_);
  dirty_ = false;
}

bool Journal::sync_due(int64_t now_ms) {
  if (options_.sync != JournalOptions::Sync::kInterval || !dirty_ ||
      now_ms - synced_ms_ < options_.interval_ms)
    return false;
  flush();
  synced_ms_ = now_ms;
  return true;
}

bool Journal::start_segment(size_t n, std::string* error) {
  const std::string file = segment_file(n);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = file + ": " + std::strerror(errno);
    return false;
  }
  // What the segment left holds is on the disk before records go elsewhere.
  if (options_.sync != JournalOptions::Sync::kNever) flush();
  if (fd_ != lock_fd_) ::close(fd_);
  fd_ = fd;
  Segment seg;
  seg.n = n;
  seg.rfd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  seg.first = next_;
  seg.last = next_ - 1;
  segments_.push_back(seg);
  write_line(json({{"journal", id_}, {"next", next_}}).dump() + "\n");
  return true;
}

bool Journal::append(JournalRecord& r) {
  if (segments_.back().bytes >= options_.segment_bytes) {
    std::string why;
    // Writing on in the full segment is safe: only its deletion waits longer.
    if (!start_segment(segments_.back().n + 1, &why))
      spdlog::warn("journal: cannot start a new segment ({}); writing on in {}", why,
                   segment_file(segments_.back().n));
  }
  r.seq = next_;
  const std::string line = to_line(r);
  Segment& into = segments_.back();
  const Loc loc{static_cast<uint32_t>(into.n), static_cast<uint32_t>(line.size() - 1), into.bytes};
  if (!write_line(line)) return false;
  if (options_.sync == JournalOptions::Sync::kAlways) flush();
  ++next_;
  Segment& seg = segments_.back();
  if (seg.last < seg.first) seg.first = r.seq;
  seg.last = r.seq;
  if (r.for_redis()) {
    ++seg.pending;
    pending_.emplace(r.seq, loc);
  }
  return true;
}

Journal::Segment* Journal::segment_of(uint64_t seq) {
  for (Segment& s : segments_)
    if (s.first <= seq && seq <= s.last) return &s;
  return nullptr;
}

void Journal::applied(std::span<const uint64_t> seqs) {
  std::string lines;
  for (uint64_t seq : seqs) {
    auto it = pending_.find(seq);
    if (it == pending_.end()) continue;
    pending_.erase(it);
    if (Segment* s = segment_of(seq)) --s->pending;
    lines.append("{\"applied\":").append(std::to_string(seq)).append("}\n");
  }
  if (!lines.empty()) write_line(lines);
}

void Journal::trim(uint64_t keep_from) {
  while (segments_.size() > 1 && segments_.front().pending == 0 &&
         segments_.front().last < keep_from) {
    Segment& s = segments_.front();
    close_segment(s);
    // The first segment's file holds the lock: emptied, not deleted.
    if (s.n == 0) {
      if (::ftruncate(lock_fd_, 0) != 0) return;
    } else if (::unlink(segment_file(s.n).c_str()) != 0 && errno != ENOENT) {
      return;
    }
    segments_.pop_front();
  }
  Segment& last = segments_.back();
  if (segments_.size() > 1 || last.pending > 0 || last.last < last.first || last.last >= keep_from)
    return;
  // Everything written is in Redis and no longer needed: back to a header.
  if (ahead_.segment == last.n) ahead_.segment = SIZE_MAX;  // its offsets are written again
  if (::ftruncate(fd_, 0) != 0) return;
  last.bytes = 0;
  last.first = next_;
  last.last = next_ - 1;
  write_line(json({{"journal", id_}, {"next", next_}}).dump() + "\n");
}

uint64_t Journal::disk_bytes() const {
  uint64_t n = 0;
  for (const Segment& s : segments_) n += s.bytes;
  return n;
}

}  // namespace dripgate::control
