#include "control/dataplane_client/dataplane_client.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/json_writer.h"
#include "control/metrics/metrics.h"

namespace dripgate::control {
namespace {

// A missing dataplane is retried at most this often, so a burst of admissions does not turn
// into a burst of failing connects.
constexpr std::chrono::milliseconds kRetryInterval{200};
constexpr size_t kMaxLine = 64 * 1024;
// Batches kept for reuse between passes: more (class, ttl) pairs than this and the idle ones go,
// so a ttl that a reload retired does not stay in the list for good.
constexpr size_t kKeptBatches = 16;
constexpr size_t kKeptDones = 16;

// A flow's address as a JSON string needs no escape when the API checked it with inet_pton as it
// read the request: hex digits, '.' and ':' only.
constexpr std::array<bool, 256> kAddressChar = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("0123456789abcdefABCDEF.:")) t[c] = true;
  return t;
}();

bool plain_address(std::string_view a) {
  return std::all_of(a.begin(), a.end(),
                     [](char c) { return kAddressChar[static_cast<unsigned char>(c)]; });
}

char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// v's decimal digits at p; returns their end.
char* put_uint(char* p, unsigned v) {
  char digits[10];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

// A flow's object, written flat: a tag line holds one per admission, and the writer's key
// escaping and comma bookkeeping cost more than the text itself. Plain addresses (always, from
// the API) are copied into room made once; anything else goes through the writer's escaping.
void append_flow(std::string& out, const Flow& f) {
  static constexpr std::string_view k0 = R"({"src":")", k1 = R"(","sport":)", k2 = R"(,"dst":")",
                                    k3 = R"(","dport":)", k4 = R"(,"proto":)";
  if (!plain_address(f.src) || !plain_address(f.dst)) {
    out += R"({"src":)";
    JsonWriter(out).string(f.src);
    out += R"(,"sport":)";
    append_integer(out, f.sport);
    out += R"(,"dst":)";
    JsonWriter(out).string(f.dst);
    out += R"(,"dport":)";
    append_integer(out, f.dport);
    out += R"(,"proto":)";
    append_integer(out, f.proto);
    out += '}';
    return;
  }
  const size_t at = out.size();
  out.resize(at + k0.size() + k1.size() + k2.size() + k3.size() + k4.size() + f.src.size() +
             f.dst.size() + 5 + 5 + 3 + 1);
  char* p = out.data() + at;
  p = put(p, k0);
  p = put(p, f.src);
  p = put(p, k1);
  p = put_uint(p, f.sport);
  p = put(p, k2);
  p = put(p, f.dst);
  p = put(p, k3);
  p = put_uint(p, f.dport);
  p = put(p, k4);
  p = put_uint(p, f.proto);
  *p++ = '}';
  out.resize(static_cast<size_t>(p - out.data()));
}

}  // namespace

DataplaneClient::DataplaneClient(event_base* base, std::string socket_path, Metrics* metrics,
                                 int timeout_ms)
    : base_(base),
      path_(std::move(socket_path)),
      metrics_(metrics),
      timeout_(timeout_ms),
      timer_(evtimer_new(base, &DataplaneClient::on_timer, this)),
      flush_ev_(event_new(base, -1, 0, &DataplaneClient::on_flush, this)) {}

DataplaneClient::~DataplaneClient() {
  if (bev_) bufferevent_free(bev_);
  bev_ = nullptr;
  if (timer_) event_free(timer_);
  if (flush_ev_) event_free(flush_ev_);
  // Callers still waiting hear "unavailable"; they must not outlive the client's loop anyway.
  for (auto& b : batches_)
    for (size_t i = 0; i < b.count; ++i)
      if (b.dones[i]) b.dones[i]("unavailable");
  while (!pending_.empty()) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    for (auto& d : p.dones)
      if (d) d("unavailable");
  }
}

std::vector<DataplaneClient::Done> DataplaneClient::take_dones() {
  if (spare_.empty()) return {};
  std::vector<Done> d = std::move(spare_.back());
  spare_.pop_back();
  return d;
}

void DataplaneClient::tag(const Flow& flow, const std::string& cls, int ttl_s,
                          std::string_view tenant, Done done) {
  if (!ensure_connected()) {
    std::vector<Done> dones = take_dones();
    dones.push_back(std::move(done));
    finish(Pending{"tag", std::move(dones), {}}, "unavailable");
    return;
  }
  auto it = std::find_if(batches_.begin(), batches_.end(), [&](const Batch& b) {
    return b.cls == cls && b.ttl_s == ttl_s && b.tenant == tenant;
  });
  if (it == batches_.end()) {
    it = batches_.emplace(batches_.end());
    it->cls = cls;
    it->ttl_s = ttl_s;
    it->tenant = tenant;
  }
  Batch& b = *it;
  // Assigned in place: a slot left from an earlier pass keeps its strings' capacity.
  if (b.count == b.flows.size()) {
    b.flows.push_back(flow);
  } else {
    b.flows[b.count] = flow;
  }
  if (b.count == 0 && b.dones.capacity() == 0) b.dones = take_dones();
  b.dones.push_back(std::move(done));
  ++b.count;
  if (b.count >= kMaxBatch) {
    send_batch(static_cast<size_t>(it - batches_.begin()));
    return;
  }
  if (!flush_armed_) {
    flush_armed_ = true;
    event_active(flush_ev_, EV_TIMEOUT, 0);
  }
}

void DataplaneClient::on_flush(int, short, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  self->flush_armed_ = false;
  self->send_batches();
}

void DataplaneClient::send_batches() {
  // By index: a callback that send runs may tag again, and add a batch.
  for (size_t i = 0; i < batches_.size(); ++i)
    if (batches_[i].count > 0) send_batch(i);
  if (batches_.size() > kKeptBatches)
    std::erase_if(batches_, [](const Batch& b) { return b.count == 0; });
}

void DataplaneClient::send_batch(size_t i) {
  Batch& b = batches_[i];
  line_ = R"({"op":"tag","class":)";
  JsonWriter(line_).string(b.cls);
  line_ += R"(,"ttl_s":)";
  append_integer(line_, b.ttl_s);
  if (!b.tenant.empty()) {
    line_ += R"(,"tenant":)";
    JsonWriter(line_).string(b.tenant);
  }
  if (b.count == 1) {
    line_ += R"(,"flow":)";
    append_flow(line_, b.flows[0]);
  } else {
    line_ += R"(,"flows":[)";
    for (size_t k = 0; k < b.count; ++k) {
      if (k) line_ += ',';
      append_flow(line_, b.flows[k]);
    }
    line_ += ']';
  }
  line_ += "}\n";
  // The batch is empty before send runs callbacks, which may tag into it again.
  std::vector<Done> dones = std::move(b.dones);
  b.dones = take_dones();
  b.count = 0;
  send("tag", std::move(dones));
}

void DataplaneClient::untag(const Flow& flow, Done done) {
  // The tags of this pass leave first: an untag must not overtake the tag of its flow.
  send_batches();
  line_ = R"({"op":"untag","flow":)";
  append_flow(line_, flow);
  line_ += "}\n";
  std::vector<Done> dones = take_dones();
  dones.push_back(std::move(done));
  send("untag", std::move(dones));
}

void DataplaneClient::finish(Pending p, const std::string& result, size_t ok) {
  static const std::string kOk = "ok";
  ok = std::min(ok, p.dones.size());
  // Counted once per line, not per flow: a line holds a pass's admissions.
  if (metrics_) {
    if (ok > 0) metrics_->dataplane(p.op, kOk, ok);
    if (ok < p.dones.size()) metrics_->dataplane(p.op, result, p.dones.size() - ok);
  }
  for (size_t i = 0; i < p.dones.size(); ++i)
    if (p.dones[i]) p.dones[i](i < ok ? kOk : result);
  if (spare_.size() < kKeptDones) {
    p.dones.clear();
    spare_.push_back(std::move(p.dones));
  }
}

void DataplaneClient::send(const char* op, std::vector<Done> dones) {
  Pending p{op, std::move(dones), std::chrono::steady_clock::now() + timeout_};
  if (!ensure_connected()) {
    finish(std::move(p), "unavailable");
    return;
  }
  // Straight into the socket while nothing waits before it in the bufferevent's output: adding
  // a line to an evbuffer allocates a chain per line and arms a write event. Whatever the socket
  // does not take, and every error (reported by the bufferevent as before), goes through the
  // bufferevent.
  size_t sent = 0;
  if (evbuffer_get_length(bufferevent_get_output(bev_)) == 0) {
    const ssize_t n =
        ::send(bufferevent_getfd(bev_), line_.data(), line_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent = static_cast<size_t>(n);
  }
  if (sent < line_.size() &&
      bufferevent_write(bev_, line_.data() + sent, line_.size() - sent) != 0) {
    close_connection("unavailable", "write failed");
    finish(std::move(p), "unavailable");
    return;
  }
  pending_.push_back(std::move(p));
  if (pending_.size() == 1) arm_timer();
}

bool DataplaneClient::ensure_connected() {
  if (bev_) return true;
  auto now = std::chrono::steady_clock::now();
  if (now < next_attempt_) return false;
  next_attempt_ = now + kRetryInterval;

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof(addr.sun_path)) {
    if (!outage_logged_) {
      spdlog::warn("dataplane: control socket path '{}' is unusable; flows are not tagged", path_);
      outage_logged_ = true;
    }
    return false;
  }
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // A unix stream connect completes or fails at once (EAGAIN only with a full backlog).
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    close(fd);
    if (!outage_logged_) {
      spdlog::warn("dataplane: cannot connect to {}: {}; admissions go on without flow tagging",
                   path_, std::strerror(err));
      outage_logged_ = true;
    }
    return false;
  }
  bev_ = bufferevent_socket_new(base_, fd, BEV_OPT_CLOSE_ON_FREE);
  if (!bev_) {
    close(fd);
    return false;
  }
  bufferevent_setcb(bev_, &DataplaneClient::on_read, nullptr, &DataplaneClient::on_event, this);
  bufferevent_enable(bev_, EV_READ | EV_WRITE);
  if (outage_logged_) spdlog::info("dataplane: connected to {} again", path_);
  outage_logged_ = false;
  return true;
}

void DataplaneClient::close_connection(const std::string& result_for_pending, const char* why) {
  if (bev_) {
    bufferevent_free(bev_);
    bev_ = nullptr;
  }
  if (!outage_logged_) {
    spdlog::warn("dataplane: connection to {} closed ({}); admissions go on without flow tagging",
                 path_, why);
    outage_logged_ = true;
  }
  // Answers can no longer be matched to requests: everything in flight fails.
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& p : pending) finish(std::move(p), result_for_pending);
}

void DataplaneClient::arm_timer() {
  if (pending_.empty()) {
    evtimer_del(timer_);
    return;
  }
  auto left = pending_.front().deadline - std::chrono::steady_clock::now();
  auto us =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(left).count());
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  evtimer_add(timer_, &tv);
}

void DataplaneClient::on_read(bufferevent* bev, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  evbuffer* in = bufferevent_get_input(bev);
  for (;;) {
    size_t eol_len = 0;
    evbuffer_ptr eol = evbuffer_search_eol(in, nullptr, &eol_len, EVBUFFER_EOL_LF);
    if (eol.pos < 0) break;
    const size_t len = static_cast<size_t>(eol.pos);
    // Read in place (the line made contiguous), not copied out: an answer costs no allocation.
    std::string_view text(reinterpret_cast<const char*>(evbuffer_pullup(in, eol.pos + 1)), len);
    if (self->pending_.empty()) {
      spdlog::warn("dataplane: unexpected answer '{}'", text);
      evbuffer_drain(in, len + 1);
      continue;
    }
    Pending p = std::move(self->pending_.front());
    self->pending_.pop_front();
    JsonReader& j = self->reader_;
    const bool object = j.read(text) == JsonReader::Status::kOk;
    const JsonReader::Value* okv = object ? j.find(JsonReader::kBody, "ok") : nullptr;
    const bool ok = okv && okv->kind == JsonReader::Kind::kBool && okv->boolean;
    size_t tagged = 0;  // a batch the dataplane refused part way: the first ones are tagged
    if (!ok) {
      const JsonReader::Value* err = object ? j.find(JsonReader::kBody, "error") : nullptr;
      if (err && err->kind == JsonReader::Kind::kString) {
        std::string quoted;  // as the dataplane wrote it (a refusal is rare: it may allocate)
        JsonWriter(quoted).string(err->text);
        spdlog::warn("dataplane: {} refused: {}", p.op, quoted);
      } else {
        spdlog::warn("dataplane: {} refused: {}", p.op, text);
      }
      const JsonReader::Value* n = object ? j.find(JsonReader::kBody, "tagged") : nullptr;
      if (n && n->kind == JsonReader::Kind::kUnsigned) tagged = n->unsigned_;
      if (n && n->kind == JsonReader::Kind::kInteger) tagged = static_cast<size_t>(n->integer);
      if (n && n->kind == JsonReader::Kind::kFloat && n->number >= 0 && n->number < 0x1p64)
        tagged = static_cast<size_t>(n->number);
    }
    // Gone before the callbacks run: they may close the connection, and the buffer with it.
    evbuffer_drain(in, len + 1);
    self->finish(std::move(p), ok ? "ok" : "error", tagged);
    if (!self->bev_) return;  // a callback may not close us, but stay safe
  }
  if (evbuffer_get_length(in) > kMaxLine) {
    self->close_connection("error", "answer line too long");
    return;
  }
  self->arm_timer();
}

void DataplaneClient::on_event(bufferevent*, short what, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
  // The dataplane closes clients that stay quiet; with nothing in flight that is no outage: the
  // next call reconnects.
  if ((what & BEV_EVENT_EOF) && self->pending_.empty()) {
    spdlog::debug("dataplane: idle connection to {} closed by the dataplane", self->path_);
    bufferevent_free(self->bev_);
    self->bev_ = nullptr;
    return;
  }
  self->close_connection("unavailable", (what & BEV_EVENT_EOF) ? "EOF" : "socket error");
}

void DataplaneClient::on_timer(int, short, void* arg) {
  auto* self = static_cast<DataplaneClient*>(arg);
  if (self->pending_.empty()) return;
  if (std::chrono::steady_clock::now() >= self->pending_.front().deadline) {
    self->close_connection("timeout", "no answer in time");
    return;
  }
  self->arm_timer();
}

AdmittedFlows::AdmittedFlows(size_t capacity) : capacity_(capacity) {}

uint32_t AdmittedFlows::hash_of(std::string_view id) {
  return static_cast<uint32_t>(std::hash<std::string_view>{}(id));
}

size_t AdmittedFlows::slot_of(std::string_view id, uint32_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const Slot& slot = index_[s];
    if (slot.entry == kNone) return s;
    if (slot.hash == hash && entries_[slot.entry].id == id) return s;
  }
}

void AdmittedFlows::erase_slot(size_t s) {
  const size_t mask = index_.size() - 1;
  // An entry further along the run moves into the hole when the hole lies between its home
  // slot and where it sits, so every entry stays reachable from its home without tombstones.
  for (size_t j = (s + 1) & mask; index_[j].entry != kNone; j = (j + 1) & mask) {
    const size_t home = index_[j].hash & mask;
    if (((j - home) & mask) >= ((j - s) & mask)) {
      index_[s] = index_[j];
      s = j;
    }
  }
  index_[s].entry = kNone;
}

void AdmittedFlows::unlink(uint32_t e) {
  Entry& x = entries_[e];
  (x.prev == kNone ? oldest_ : entries_[x.prev].next) = x.next;
  (x.next == kNone ? newest_ : entries_[x.next].prev) = x.prev;
  x.prev = kNone;
  x.next = free_;
  free_ = e;
  --size_;
}

void AdmittedFlows::grow_index() {
  std::vector<Slot> old = std::move(index_);
  index_.assign(std::max<size_t>(16, 2 * old.size()), Slot{});
  const size_t mask = index_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.entry == kNone) continue;
    size_t s = slot.hash & mask;
    while (index_[s].entry != kNone) s = (s + 1) & mask;
    index_[s] = slot;
  }
}

void AdmittedFlows::put(const std::string& request_id, const Flow& flow, std::string_view cls,
                        std::string_view tenant) {
  if (capacity_ == 0) return;
  const uint32_t hash = hash_of(request_id);
  std::lock_guard lock(mu_);
  if (index_.empty()) grow_index();
  size_t s = slot_of(request_id, hash);
  if (index_[s].entry != kNone) {
    AdmittedFlow& a = entries_[index_[s].entry].admitted;
    a.flow = flow;
    a.cls = cls;
    a.tenant = tenant;
    return;
  }
  if (size_ >= capacity_) {
    const uint32_t e = oldest_;
    erase_slot(slot_of(entries_[e].id, entries_[e].hash));
    unlink(e);
    s = slot_of(request_id, hash);  // the shift may have moved the hole
  } else if (2 * (size_ + 1) > index_.size()) {
    grow_index();
    s = slot_of(request_id, hash);
  }
  uint32_t e = free_;
  if (e != kNone) {
    free_ = entries_[e].next;
  } else {
    e = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  // Assigned in place: a reused entry's strings keep their capacity.
  Entry& x = entries_[e];
  x.id = request_id;
  x.admitted.flow = flow;
  x.admitted.cls = cls;
  x.admitted.tenant = tenant;
  x.hash = hash;
  x.prev = newest_;
  x.next = kNone;
  (newest_ == kNone ? oldest_ : entries_[newest_].next) = e;
  newest_ = e;
  index_[s] = Slot{e, hash};
  ++size_;
}

bool AdmittedFlows::find(const std::string& request_id, AdmittedFlow* out) const {
  const uint32_t hash = hash_of(request_id);
  std::lock_guard lock(mu_);
  if (size_ == 0) return false;
  const uint32_t e = index_[slot_of(request_id, hash)].entry;
  if (e == kNone) return false;
  const AdmittedFlow& a = entries_[e].admitted;
  out->flow = a.flow;
  out->cls = a.cls;
  out->tenant = a.tenant;
  return true;
}

std::optional<Flow> AdmittedFlows::take(const std::string& request_id) {
  const uint32_t hash = hash_of(request_id);
  std::lock_guard lock(mu_);
  if (size_ == 0) return std::nullopt;
  const size_t s = slot_of(request_id, hash);
  const uint32_t e = index_[s].entry;
  if (e == kNone) return std::nullopt;
  // Copied, not moved: the entry keeps its strings' capacity for the next put.
  std::optional<Flow> f = entries_[e].admitted.flow;
  erase_slot(s);
  unlink(e);
  return f;
}

size_t AdmittedFlows::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

}  // namespace dripgate::control
