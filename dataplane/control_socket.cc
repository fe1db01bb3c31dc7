#include "dataplane/control_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "common/id.h"
#include "dataplane/flow_table.h"
#include "dataplane/mailbox.h"
#include "dataplane/parse.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"
#include "dataplane/tenants.h"

namespace dripgate::dataplane {

using group_entry = struct group;

namespace {

[[noreturn]] void sys_fail(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

sockaddr_un make_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.sun_path))
    throw std::runtime_error(fmt::format(
        "control socket path '{}' is empty or longer than {} bytes", path, sizeof(a.sun_path) - 1));
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

// True when a process accepts connections on path.
bool socket_alive(const std::string& path) {
  sockaddr_un a = make_addr(path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool alive = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return alive;
}

// Gives the socket's file its mode (0600, or 0660 with `group`) between bind() and listen():
// until listen() a connect() to the path is refused whatever the mode, so no client ever gets
// in under the mode bind() created the file with. Not umask(): it is the whole process's, and
// DPDK's threads (interrupts, telemetry) may create files meanwhile. Not fchmod() on the socket
// before bind(): on Linux that changes the socket's own inode, not the file bind() creates.
// Neither call follows a symlink put in the file's place.
void restrict_socket_file(const std::string& path, std::optional<gid_t> group) {
  if (group &&
      ::fchownat(AT_FDCWD, path.c_str(), static_cast<uid_t>(-1), *group, AT_SYMLINK_NOFOLLOW) != 0)
    sys_fail(fmt::format("control socket '{}': chown to group {}", path, *group));
  if (::fchmodat(AT_FDCWD, path.c_str(), group ? 0660 : 0600, AT_SYMLINK_NOFOLLOW) != 0)
    sys_fail(fmt::format("control socket '{}': chmod", path));
}

}  // namespace

std::optional<gid_t> socket_group(const std::string& group) {
  if (group.empty()) return std::nullopt;
  gid_t gid = 0;
  auto [end, ec] = std::from_chars(group.data(), group.data() + group.size(), gid);
  if (ec == std::errc() && end == group.data() + group.size()) return gid;
  std::vector<char> buf(16384);
  group_entry entry{};
  group_entry* found = nullptr;
  int e = ::getgrnam_r(group.c_str(), &entry, buf.data(), buf.size(), &found);
  if (found) return found->gr_gid;
  throw std::runtime_error(fmt::format("dataplane.control_socket_group: no group '{}' here{}",
                                       group, e ? std::string(": ") + std::strerror(e) : ""));
}

ControlSocket::ControlSocket(std::string path, Handler handler, ControlSocketOptions options,
                             FastPath fast)
    : path_(std::move(path)),
      handler_(std::move(handler)),
      options_(options),
      fast_(std::move(fast)) {
  if (options_.max_clients == 0 || options_.max_clients > SOMAXCONN)
    throw std::runtime_error(
        fmt::format("control socket: max_clients must be in 1..{}", SOMAXCONN));
  sockaddr_un addr = make_addr(path_);
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      throw std::runtime_error(
          fmt::format("control socket directory '{}': {}", parent.string(), ec.message()));
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error(
          fmt::format("control socket path '{}' exists and is not a socket", path_));
    if (socket_alive(path_))
      throw std::runtime_error(
          fmt::format("control socket '{}' is served by another running process", path_));
    ::unlink(path_.c_str());
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) sys_fail("control socket");
  int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0) {
    int e = errno;
    ::close(listen_fd_);
    errno = e;
    sys_fail(fmt::format("bind control socket '{}'", path_));
  }
  try {
    restrict_socket_file(path_, options_.group);
  } catch (...) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    throw;
  }
  // The backlog holds as many connects as there are slots: a burst that fits the limit waits
  // for accept() instead of being refused by the kernel.
  if (::listen(listen_fd_, static_cast<int>(options_.max_clients)) != 0) {
    int e = errno;
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    errno = e;
    sys_fail("listen on control socket");
  }
}

ControlSocket::~ControlSocket() {
  for (auto& c : clients_) ::close(c.fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

void ControlSocket::append_json(const nlohmann::json& j, std::string& out) {
  // Replace invalid UTF-8 (echoed from a client's bytes) rather than throw.
  out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ControlSocket::answer_line(std::string_view line, const Handler& handler, const FastPath& fast,
                                JsonReader& reader, std::string& out) {
  if (fast) {
    const size_t mark = out.size();
    try {
      if (fast(line, out)) {
        out += '\n';
        return;
      }
    } catch (const std::exception& e) {
      out.resize(mark);
      append_json({{"ok", false}, {"error", e.what()}}, out);
      out += '\n';
      return;
    }
    out.resize(mark);
  }
  switch (reader.read(line)) {
    case JsonReader::Status::kInvalid:
      out += R"({"error":"malformed JSON","ok":false})";
      break;
    case JsonReader::Status::kNotObject:
      out += R"({"error":"request must be a JSON object","ok":false})";
      break;
    case JsonReader::Status::kDuplicate:
      // Refused rather than resolved: which of two values a field has would otherwise depend on
      // the reader, and a request is either meant one way or is wrong.
      append_json({{"ok", false}, {"error", reader.duplicate() + ": duplicate key"}}, out);
      break;
    case JsonReader::Status::kOk: {
      const size_t mark = out.size();
      try {
        handler(reader, out);
      } catch (const std::exception& e) {
        out.resize(mark);
        append_json({{"ok", false}, {"error", e.what()}}, out);
      }
      break;
    }
  }
  out += '\n';
}

std::string ControlSocket::answer_line(std::string_view line, const Handler& handler,
                                       JsonReader& reader) {
  std::string out;
  answer_line(line, handler, {}, reader, out);
  return out;
}

std::string ControlSocket::answer_line(std::string_view line, const Handler& handler) {
  JsonReader reader;
  return answer_line(line, handler, reader);
}

void ControlSocket::accept_clients() {
  // A bounded number per pass: a client accepted now is read on the next pass, before a flood of
  // later connects could make it the longest idle and push it out.
  for (size_t i = 0; i < std::max<size_t>(1, options_.max_clients / 4); ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a client that went away before we accepted
    if (clients_.size() >= options_.max_clients) evict_longest_idle();
    clients_.push_back(Client{fd, options_.now(), {}, {}});
  }
}

// Full: the newcomer replaces the client that has been silent longest, rather than being
// refused. Clients that hold slots without speaking can then never keep dripgate-control out
// (it reconnects on its next call and gets in), and a client that is using its connection is
// the last to go.
void ControlSocket::evict_longest_idle() {
  auto oldest =
      std::min_element(clients_.begin(), clients_.end(),
                       [](const auto& a, const auto& b) { return a.last_active < b.last_active; });
  ::close(oldest->fd);
  clients_.erase(oldest);
}

void ControlSocket::close_idle_clients() {
  const auto now = options_.now();
  std::erase_if(clients_, [&](const Client& c) {
    if (now - c.last_active < options_.idle_timeout) return false;
    // Bytes that arrived after poll() returned make it active again: served on the next poll,
    // not lost with the connection.
    char b;
    if (::recv(c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0) return false;
    ::close(c.fd);
    return true;
  });
}

void ControlSocket::answer_lines(Client& c) {
  size_t start = 0;
  for (size_t nl;
       c.out.size() < kMaxPendingOut && (nl = c.in.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    // A view into c.in, which is not touched until the loop ends: no copy per line.
    std::string_view line(c.in.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    answer_line(line, handler_, fast_, reader_, c.out);
  }
  c.in.erase(0, start);
}

bool ControlSocket::read_client(Client& c) {
  char buf[16384];
  // Backpressure: past kMaxPendingOut bytes of unread answers the client's lines stay in the
  // socket (its writes block) until it reads; it is not disconnected.
  while (c.out.size() < kMaxPendingOut) {
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) {
      c.closing = true;  // answer what is complete, then close
      break;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    c.last_active = options_.now();
    c.in.append(buf, static_cast<size_t>(n));
    answer_lines(c);
    if (c.out.size() < kMaxPendingOut && c.in.size() > kMaxLine) {  // no newline in reach
      c.out += "{\"ok\":false,\"error\":\"line longer than 65536 bytes\"}\n";
      c.in.clear();
      c.closing = true;
      break;
    }
    // Less than asked for: the socket was empty when it answered. What arrives next makes
    // poll() report the client again, so a second recv() that would only say EAGAIN is spared.
    if (static_cast<size_t>(n) < sizeof(buf)) break;
  }
  return true;
}

bool ControlSocket::flush_client(Client& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    c.last_active = options_.now();
    c.out.erase(0, static_cast<size_t>(n));
  }
  // A client that closed its side is closed once every line it sent is answered.
  return !c.closing || c.in.find('\n') != std::string::npos;
}

uint32_t ControlSocket::poll_once(int timeout_ms, std::initializer_list<int> wake_fds) {
  std::vector<pollfd>& fds = fds_;  // kept with its capacity: no allocation per wakeup
  fds.clear();
  fds.push_back({listen_fd_, POLLIN, 0});
  const size_t n_wake = std::min<size_t>(wake_fds.size(), 32);
  for (size_t i = 0; i < n_wake; ++i)
    fds.push_back({wake_fds.begin()[i], POLLIN, 0});  // poll ignores a negative fd
  for (const auto& c : clients_) {
    short want = c.out.size() < kMaxPendingOut ? POLLIN : 0;  // backpressure
    if (!c.out.empty()) want |= POLLOUT;
    fds.push_back({c.fd, want, 0});
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) {
    close_idle_clients();
    return 0;
  }
  uint32_t woken = 0;
  for (size_t i = 0; i < n_wake; ++i)
    if (fds[1 + i].fd >= 0 && (fds[1 + i].revents & POLLIN)) woken |= uint32_t{1} << i;
  size_t kept = 0;  // clients_[0, kept) stay, in their order
  for (size_t i = 0; i < clients_.size(); ++i) {
    Client& c = clients_[i];
    short ev = fds[i + 1 + n_wake].revents;
    bool ok = true;
    if (ev & (POLLIN | POLLHUP | POLLERR)) ok = read_client(c);
    if (ok) ok = flush_client(c);
    // Lines held back while answers piled up, now that the client has read some.
    if (ok && !c.in.empty() && c.out.size() < kMaxPendingOut) {
      answer_lines(c);
      ok = flush_client(c);
    }
    if (!ok) {
      ::close(c.fd);
      continue;
    }
    if (kept != i) clients_[kept] = std::move(c);
    ++kept;
  }
  clients_.erase(clients_.begin() + static_cast<ptrdiff_t>(kept), clients_.end());
  // Idle ones first, so a newcomer evicts a client only when the slots are full of live ones.
  close_idle_clients();
  if (fds[0].revents & POLLIN) accept_clients();
  return woken;
}

namespace {

using nlohmann::json;
using Kind = JsonReader::Kind;
using Value = JsonReader::Value;

[[noreturn]] void bad(const std::string& msg) {
  throw std::invalid_argument(msg);
}

// Where a field sits, for its errors: the request itself, "flow" or "flows[3]". The names are
// formatted only when an error is thrown, so that a good line builds no string.
struct Where {
  const char* object = nullptr;  // nullptr: the request itself
  long index = -1;               // flows[index]; -1: no index

  std::string name() const {
    if (!object) return "";
    return index < 0 ? std::string(object) : fmt::format("{}[{}]", object, index);
  }
  std::string prefix() const { return object ? name() + "." : ""; }  // before a member's name
};

// Calls f(value) for each member of the object or array at index `parent`. Its members come
// after it, before the first value whose parent precedes it (document order): a flow in a batch
// of 100 is read without scanning the other 99.
template <class F>
void for_each_member(const JsonReader& r, int parent, F f) {
  for (size_t i = static_cast<size_t>(parent) + 1; i < r.size() && r[i].parent >= parent; ++i)
    if (r[i].parent == parent) f(r[i]);
}

const Value& field(const Value* v, const char* name, const Where& where) {
  if (!v) bad(fmt::format("{}{}: missing", where.prefix(), name));
  return *v;
}

// A view into the reader's value, valid while the line is being answered.
std::string_view get_string(const Value* v, const char* name, const Where& where) {
  if (field(v, name, where).kind != Kind::kString)
    bad(fmt::format("{}{}: must be a string", where.prefix(), name));
  return v->text;
}

// The kinds are nlohmann's: an integer written without a sign is kUnsigned, a negative one
// kInteger, and anything with a fraction or an exponent kFloat (so 1e3 is not an integer).
int64_t get_int(const Value& v, const char* name, const Where& where, int64_t lo, int64_t hi) {
  int64_t x;
  if (v.kind == Kind::kUnsigned) {
    if (v.unsigned_ > static_cast<uint64_t>(hi))
      bad(fmt::format("{}{}: must be in [{}, {}]", where.prefix(), name, lo, hi));
    x = static_cast<int64_t>(v.unsigned_);
  } else if (v.kind == Kind::kInteger) {
    x = v.integer;
  } else {
    bad(fmt::format("{}{}: must be an integer", where.prefix(), name));
  }
  if (x < lo || x > hi) bad(fmt::format("{}{}: must be in [{}, {}]", where.prefix(), name, lo, hi));
  return x;
}

uint8_t get_proto(const Value& v, const Where& where) {
  if (v.kind == Kind::kString) {
    const std::string_view s = v.text;
    if (s == "tcp") return 6;
    if (s == "udp") return 17;
    if (s == "icmp") return 1;
    if (s == "icmpv6") return 58;
    if (s == "sctp") return 132;
    bad(fmt::format("{}proto: expected a number 0..255 or tcp, udp, icmp, icmpv6, sctp; got '{}'",
                    where.prefix(), s));
  }
  return static_cast<uint8_t>(get_int(v, "proto", where, 0, 255));
}

// The flow object v, named `where` in errors ("flow", "flows[3]").
FiveTuple get_flow(const JsonReader& r, const Value& v, const Where& where) {
  if (v.kind != Kind::kObject)
    bad(where.name() + ": must be an object {src, sport, dst, dport, proto}");
  const Value *src = nullptr, *sport = nullptr, *dst = nullptr, *dport = nullptr, *proto = nullptr;
  // The unknown member named first is the smallest name, not the first written: the order in
  // which a std::map (an nlohmann object) holds them, in which this error has always named it.
  const Value* unknown = nullptr;
  for_each_member(r, r.index_of(&v), [&](const Value& m) {
    if (m.key == "src")
      src = &m;
    else if (m.key == "sport")
      sport = &m;
    else if (m.key == "dst")
      dst = &m;
    else if (m.key == "dport")
      dport = &m;
    else if (m.key == "proto")
      proto = &m;
    else if (!unknown || m.key < unknown->key)
      unknown = &m;
  });
  if (unknown)
    bad(fmt::format("{}{}: unknown field (expected src, sport, dst, dport, proto)", where.prefix(),
                    unknown->key));
  const std::string_view src_text = get_string(src, "src", where);
  const std::string_view dst_text = get_string(dst, "dst", where);
  auto port = [&](const Value* p, const char* name) -> uint16_t {
    return p ? static_cast<uint16_t>(get_int(*p, name, where, 0, 65535)) : 0;
  };
  const uint16_t sport_n = port(sport, "sport"), dport_n = port(dport, "dport");
  const uint8_t proto_n = get_proto(field(proto, "proto", where), where);
  std::optional<FiveTuple> t = dataplane::make_tuple(src_text, sport_n, dst_text, dport_n, proto_n);
  if (!t) {
    L3 l3;
    uint8_t addr[16];
    if (!parse_address(src_text, &l3, addr))
      bad(fmt::format("{}src: not an IPv4 or IPv6 address: '{}'", where.prefix(), src_text));
    if (!parse_address(dst_text, &l3, addr))
      bad(fmt::format("{}dst: not an IPv4 or IPv6 address: '{}'", where.prefix(), dst_text));
    bad(where.name() + ": src and dst are of different address families");
  }
  return *t;
}

// The flows of a tag request into `out` (cleared first): "flow" (one) or "flows" (a list, all
// checked before any is tagged, so a bad one tags nothing). True when they came as "flows".
bool get_flows(const JsonReader& r, std::vector<FiveTuple>& out) {
  out.clear();
  const Value* many = r.find(JsonReader::kBody, "flows");
  const Value* one = r.find(JsonReader::kBody, "flow");
  if (!many) {
    out.push_back(get_flow(r, field(one, "flow", {}), {"flow"}));
    return false;
  }
  if (one) bad("flow, flows: give one of them, not both");
  if (many->kind != Kind::kArray) bad("flows: must be a non-empty list of flow objects");
  long i = 0;
  for_each_member(r, r.index_of(many), [&](const Value& f) {
    out.push_back(get_flow(r, f, {"flows", i++}));
  });
  if (out.empty()) bad("flows: must be a non-empty list of flow objects");
  return true;
}

std::optional<double> get_rate(const JsonReader& r, const char* name) {
  const Value* v = r.find(JsonReader::kBody, name);
  if (!v || v->kind == Kind::kNull) return std::nullopt;
  double x;
  switch (v->kind) {
    case Kind::kInteger:
      x = static_cast<double>(v->integer);
      break;
    case Kind::kUnsigned:
      x = static_cast<double>(v->unsigned_);
      break;
    case Kind::kFloat:
      x = v->number;
      break;
    default:
      bad(fmt::format("{}: must be a number >= 0", name));
  }
  if (!(x >= 0) || !std::isfinite(x)) bad(fmt::format("{}: must be a finite number >= 0", name));
  return x;
}

int class_of(const ControlTargets& t, std::string_view cls_name, const char* field_name) {
  const int cls = t.sched->find_class(cls_name);
  if (cls < 0) {
    std::string known;
    for (unsigned i = 0; i < t.sched->num_classes(); ++i)
      known += (i ? ", " : "") + t.sched->class_name(i);
    bad(fmt::format("{}: no class named '{}' (classes: {})", field_name, cls_name, known));
  }
  return cls;
}

// A JSON string of s: a class name (an id) or a formatted flow need no escape in practice, but
// anything else is escaped as a tree would.
void append_string(std::string_view s, std::string& out) {
  if (std::all_of(s.begin(), s.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != '"' && c != '\\' &&
               static_cast<unsigned char>(c) < 0x80;
      })) {
    out += '"';
    out += s;
    out += '"';
    return;
  }
  ControlSocket::append_json(std::string(s), out);
}

void append_number(std::string_view key, uint64_t n, std::string& out) {
  char buf[24];
  out += key;
  out.append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof(buf), n).ptr - buf));
}

constexpr int64_t kMaxTtlS = 10 * 365 * 86400;

// A tag's tenant, its name checked by the one id rule (empty: none), and its id in the tenant
// table: 0 without a name, without a table, or past the table's bound (counted there).
struct TagTenant {
  std::string_view name;
  uint32_t id = TenantTable::kNone;
};
TagTenant intern_tenant(const ControlTargets& t, std::string_view name) {
  return TagTenant{
      name, t.tenants != nullptr && !name.empty() ? t.tenants->intern(name) : TenantTable::kNone};
}

// Tags keys (read and checked) into class cls for a tenant and writes the answer: the
// handler's and the fast path's common end.
void tag_keys(const ControlTargets& t, const std::vector<FiveTuple>& keys, int cls, uint32_t ttl,
              TagTenant tenant, bool batch, std::string& out) {
  int rc = 0;
  const size_t i = t.flows->add_many(keys.data(), keys.size(), static_cast<uint16_t>(cls), ttl,
                                     t.now(), &rc, tenant.id);
  if (t.stats != nullptr) (rc != 0 ? t.stats->tags.full : t.stats->tags.ok).add();
  if (rc != 0) {
    if (keys.size() == 1) bad(t.flows->add_error(rc));
    // The ones before stay tagged: say how many.
    return ControlSocket::append_json(
        {{"ok", false},
         {"error", fmt::format("flows[{}]: {}", i, t.flows->add_error(rc))},
         {"tagged", i}},
        out);
  }
  // Written flat, in the order a tree would (its keys sorted): the answer at admission rate.
  out += R"({"class":)";
  append_string(t.sched->class_name(cls), out);
  if (!batch) {
    out += R"(,"flow":)";
    append_string(format_tuple(keys[0]), out);
  }
  out += R"(,"ok":true)";
  if (batch) append_number(",\"tagged\":", keys.size(), out);
  if (!tenant.name.empty()) {
    out += R"(,"tenant":)";
    append_string(tenant.name, out);
  }
  append_number(",\"ttl_s\":", ttl, out);
  out += '}';
}

// A cursor over a line in the exact form dripgate-control writes. Every step says whether the
// text matched; the first mismatch sends the line to the general reader, so what this accepts
// must read there as the same values (the differential test holds the two together).
class TagLineScan {
 public:
  explicit TagLineScan(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}
  bool done() const { return p_ == end_; }
  bool lit(std::string_view s) {
    if (static_cast<size_t>(end_ - p_) < s.size() || std::memcmp(p_, s.data(), s.size()) != 0)
      return false;
    p_ += s.size();
    return true;
  }
  // A string of printable ASCII without escapes: the same text for any JSON reader.
  bool str(std::string_view* out) {
    if (p_ == end_ || *p_ != '"') return false;
    const char* b = ++p_;
    for (; p_ != end_ && *p_ != '"'; ++p_)
      if (*p_ < 0x20 || *p_ > 0x7e || *p_ == '\\') return false;
    if (p_ == end_) return false;
    *out = std::string_view(b, static_cast<size_t>(p_++ - b));
    return true;
  }
  // An integer in [0, max] written as JSON writes one (no sign, fraction, exponent or leading
  // zero): anything else, valid or not, is the reader's to judge.
  bool uint(uint64_t max, uint64_t* out) {
    const char* b = p_;
    uint64_t v = 0;
    for (; p_ != end_ && *p_ >= '0' && *p_ <= '9' && p_ - b < 10; ++p_) v = v * 10 + (*p_ - '0');
    const size_t n = static_cast<size_t>(p_ - b);
    if (n == 0 || (n > 1 && *b == '0') || v > max) return false;
    if (p_ != end_ && ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E'))
      return false;
    *out = v;
    return true;
  }
  // {"src":…,"sport":…,"dst":…,"dport":…,"proto":…} naming a flow make_tuple takes.
  bool flow(FiveTuple* out) {
    std::string_view src, dst;
    uint64_t sport, dport, proto;
    if (!(lit(R"({"src":)") && str(&src) && lit(R"(,"sport":)") && uint(65535, &sport) &&
          lit(R"(,"dst":)") && str(&dst) && lit(R"(,"dport":)") && uint(65535, &dport) &&
          lit(R"(,"proto":)") && uint(255, &proto) && lit("}")))
      return false;
    // Two dotted quads, the daemon's common case, are read here, in one pass without
    // inet_pton's generality. Anything else goes through make_tuple, which reads it the same.
    FiveTuple t;
    std::memset(&t, 0, sizeof(t));
    if (ipv4(src, t.src) && ipv4(dst, t.dst)) {
      t.l3 = L3::kIpv4;
      t.sport = static_cast<uint16_t>(sport);
      t.dport = static_cast<uint16_t>(dport);
      t.proto = static_cast<uint8_t>(proto);
      *out = t;
      return true;
    }
    std::optional<FiveTuple> m =
        dataplane::make_tuple(src, static_cast<uint16_t>(sport), dst, static_cast<uint16_t>(dport),
                              static_cast<uint8_t>(proto));
    if (!m) return false;
    *out = *m;
    return true;
  }

  // Four decimal octets as inet_pton(AF_INET) takes them: 0..255 each, no leading zero, three
  // dots, nothing else.
  static bool ipv4(std::string_view a, uint8_t out[4]) {
    size_t i = 0;
    for (int part = 0; part < 4; ++part) {
      if (part > 0 && (i == a.size() || a[i++] != '.')) return false;
      const size_t b = i;
      unsigned v = 0;
      for (; i < a.size() && i - b < 3 && a[i] >= '0' && a[i] <= '9'; ++i)
        v = v * 10 + static_cast<unsigned>(a[i] - '0');
      if (i == b || v > 255 || (i - b > 1 && a[b] == '0')) return false;
      out[part] = static_cast<uint8_t>(v);
    }
    return i == a.size();
  }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace

ControlSocket::Handler make_protocol(ControlTargets t) {
  // keys: the flows of a tag request, kept from one request to the next with their capacity (the
  // handler runs on the main lcore only).
  return [t, keys = std::vector<FiveTuple>()](const JsonReader& req, std::string& out) mutable {
    constexpr int kBody = JsonReader::kBody;
    const std::string_view op = get_string(req.find(kBody, "op"), "op", {});
    if (op == "tag") {
      bool batch = false;
      int cls = 0;
      uint32_t ttl = 0;
      std::string_view tenant;
      try {
        batch = get_flows(req, keys);
        cls = class_of(t, get_string(req.find(kBody, "class"), "class", {}), "class");
        if (const Value* v = req.find(kBody, "ttl_s"))
          ttl = static_cast<uint32_t>(get_int(*v, "ttl_s", {}, 0, kMaxTtlS));
        if (const Value* v = req.find(kBody, "tenant")) {
          tenant = get_string(v, "tenant", {});
          if (!common::valid_id(tenant))
            bad(fmt::format("tenant: must be an id ([A-Za-z0-9._-], 1 to 64 characters), got '{}'",
                            tenant));
        }
      } catch (const std::exception&) {
        if (t.stats != nullptr) t.stats->tags.invalid.add();
        throw;
      }
      return tag_keys(t, keys, cls, ttl, intern_tenant(t, tenant), batch, out);
    }
    if (op == "untag") {
      FiveTuple key = get_flow(req, field(req.find(kBody, "flow"), "flow", {}), {"flow"});
      bool removed = t.flows->del(key);
      return ControlSocket::append_json(
          {{"ok", true}, {"flow", format_tuple(key)}, {"removed", removed}}, out);
    }
    if (op == "set_rate") {
      const std::string_view cls_name = get_string(req.find(kBody, "class"), "class", {});
      std::optional<double> pps = get_rate(req, "rate_pps"), bps = get_rate(req, "rate_bps");
      if (!pps && !bps) bad("set_rate needs rate_pps and/or rate_bps (0 = unlimited)");
      DripChange r;
      // What is not given stays as the scheduler has it.
      config::DripRate in_force;
      if (cls_name == "port") {
        r.cls = DripChange::kPort;
        in_force = t.sched->port_rate();
      } else {
        r.cls = class_of(t, cls_name, "class");
        in_force = t.sched->class_rate(static_cast<unsigned>(r.cls));
      }
      r.pps = pps.value_or(in_force.rate_pps);
      r.bps = bps.value_or(in_force.rate_bps);
      MailboxResult res;
      t.mailbox->post_and_wait(r, &res, std::chrono::milliseconds(2000));
      if (!res.ok) bad("set_rate: " + res.error);
      return ControlSocket::append_json({{"ok", true},
                                         {"class", std::string(cls_name)},
                                         {"rate_pps", r.pps},
                                         {"rate_bps", r.bps}},
                                        out);
    }
    if (op == "stats") {
      json s = t.stats->to_json();
      s["flows"] = t.flows->size();
      if (t.tenants != nullptr)
        s["tenants"] = {{"known", t.tenants->size()},
                        {"max", t.tenants->capacity()},
                        {"untracked_tags", t.tenants->untracked()}};
      return ControlSocket::append_json({{"ok", true}, {"stats", std::move(s)}}, out);
    }
    bad(fmt::format("op: unknown '{}' (expected tag, untag, set_rate, stats)", op));
  };
}

ControlSocket::FastPath make_tag_fast_path(ControlTargets t) {
  // keys: as the handler's, kept with their capacity from line to line.
  return [t, keys = std::vector<FiveTuple>()](std::string_view line, std::string& out) mutable {
    TagLineScan scan(line);
    std::string_view cls_name;
    uint64_t ttl = 0;
    if (!(scan.lit(R"({"op":"tag","class":)") && scan.str(&cls_name) && scan.lit(R"(,"ttl_s":)") &&
          scan.uint(kMaxTtlS, &ttl)))
      return false;
    std::string_view tenant;
    if (scan.lit(R"(,"tenant":)") && !(scan.str(&tenant) && common::valid_id(tenant))) return false;
    const int cls = t.sched->find_class(cls_name);
    if (cls < 0) return false;
    keys.clear();
    const bool batch = scan.lit(R"(,"flows":[)");
    if (!batch && !scan.lit(R"(,"flow":)")) return false;
    do {
      keys.emplace_back();
      if (!scan.flow(&keys.back())) return false;
    } while (batch && scan.lit(","));
    if ((batch && !scan.lit("]")) || !scan.lit("}") || !scan.done()) return false;
    tag_keys(t, keys, cls, static_cast<uint32_t>(ttl), intern_tenant(t, tenant), batch, out);
    return true;
  };
}

}  // namespace dripgate::dataplane
