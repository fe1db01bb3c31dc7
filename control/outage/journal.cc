#include "control/outage/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
// bucket.
JournalRecord::Bucket bucket_of(const json& j) {
  JournalRecord::Bucket b;
  b.key = j.at(0).get<std::string>();
  b.capacity = j.at(1).get<std::string>();
  b.refill = j.at(2).get<std::string>();
  if (j.size() >= 5) {
    b.cost = j.at(3).get<std::string>();
    b.gate = j.at(4).get<std::string>();
  }
  return b;
}

std::string to_line(const JournalRecord& r) {
  json j = {{"seq", r.seq},       {"op", kOps[static_cast<int>(r.op)]},
            {"tenant", r.tenant}, {"request_id", r.request_id},
            {"tokens", r.tokens}, {"at_ms", r.at_ms}};
  if (r.op == JournalRecord::Op::kAdmit || r.exact()) {
    j["month"] = r.month;
    j["month_end"] = r.month_end;
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

JournalRecord from_json(const json& j) {
  JournalRecord r;
  r.seq = j.at("seq").get<uint64_t>();
  std::string op = j.at("op").get<std::string>();
  bool known = false;
  for (int i = 0; i < static_cast<int>(std::size(kOps)); ++i)
    if (op == kOps[i]) {
      r.op = static_cast<JournalRecord::Op>(i);
      known = true;
    }
  if (!known) throw std::runtime_error("unknown op");
  r.tenant = j.at("tenant").get<std::string>();
  r.request_id = j.at("request_id").get<std::string>();
  r.tokens = j.at("tokens").get<int64_t>();
  r.at_ms = j.at("at_ms").get<int64_t>();
  if (j.contains("month")) {
    r.month = j.at("month").get<std::string>();
    r.month_end = j.at("month_end").get<int64_t>();
  }
  if (r.op == JournalRecord::Op::kAdmit) {
    r.reservation_ttl_ms = j.at("reservation_ttl_ms").get<int64_t>();
    r.lease_ms = j.at("lease_ms").get<int64_t>();
    r.max_streams = j.at("max_streams").get<int64_t>();
    if (j.contains("allowance")) r.allowance = j.at("allowance").get<int64_t>();
  }
  // A settle written before settles corrected token-rate buckets has none.
  if (r.op == JournalRecord::Op::kAdmit || (r.exact() && j.contains("buckets"))) {
    for (const auto& b : j.at("buckets")) r.buckets.push_back(bucket_of(b));
    for (const auto& g : j.at("globals"))
      r.globals.push_back(
          {g.at(0).get<std::string>(), g.at(1).get<std::string>(), bucket_of(g.at(2))});
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

std::unique_ptr<Journal> Journal::open(const std::string& path, std::string* error) {
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
  std::unique_ptr<Journal> j(new Journal(path, fd));
  std::ifstream in(path);
  std::string line;
  bool ends_line = true;
  while (std::getline(in, line)) {
    ends_line = !in.eof();
    if (line.empty()) continue;
    try {
      json v = json::parse(line);
      if (v.contains("journal")) {
        j->id_ = v.at("journal").get<std::string>();
        j->next_ = std::max(j->next_, v.at("next").get<uint64_t>());
      } else if (v.contains("applied")) {
        j->applied_.insert(v.at("applied").get<uint64_t>());
      } else {
        JournalRecord r = from_json(v);
        j->next_ = std::max(j->next_, r.seq + 1);
        if (!r.for_redis()) j->applied_.insert(r.seq);
        j->records_.push_back(std::move(r));
      }
    } catch (const std::exception&) {
      // Only the last line can be torn (one write() per line, O_APPEND); its decision was never
      // answered, so it is skipped.
      ++j->unreadable_;
    }
  }
  // applied ids of records compacted away are not kept.
  std::set<uint64_t> seqs;
  for (const auto& r : j->records_) seqs.insert(r.seq);
  std::erase_if(j->applied_, [&](uint64_t s) { return !seqs.count(s); });
  if (j->id_.empty()) {
    j->id_ = random_id();
    if (!j->records_.empty()) {
      *error = "the journal " + path + " has records but no header line";
      return nullptr;
    }
    j->write_header();
  } else if (!ends_line) {
    // Ends the torn line, so the next record starts on a line of its own.
    j->write_line("\n");
  }
  return j;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

bool Journal::write_line(const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void Journal::write_header() {
  write_line(json({{"journal", id_}, {"next", next_}}).dump() + "\n");
}

bool Journal::append(JournalRecord& r) {
  r.seq = next_;
  if (!write_line(to_line(r))) return false;
  ++next_;
  if (!r.for_redis()) applied_.insert(r.seq);
  records_.push_back(r);
  return true;
}

void Journal::applied(uint64_t seq) {
  if (!applied_.insert(seq).second) return;
  write_line(json({{"applied", seq}}).dump() + "\n");
}

std::vector<const JournalRecord*> Journal::pending() const {
  std::vector<const JournalRecord*> out;
  for (const auto& r : records_)
    if (!applied_.count(r.seq)) out.push_back(&r);
  return out;
}

void Journal::compact() {
  if (pending_count() > 0 || records_.empty()) return;
  if (::ftruncate(fd_, 0) != 0) return;
  records_.clear();
  applied_.clear();
  write_header();
}

}  // namespace dripgate::control
