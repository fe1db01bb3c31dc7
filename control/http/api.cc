#include "control/http/api.h"

#include <arpa/inet.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "common/id.h"
#include "common/json_reader.h"
#include "common/json_writer.h"
#include "config/config.h"
#include "control/http/guidance.h"
#include "control/http/openai_headers.h"

namespace dripgate::control::api {
namespace {

using Kind = JsonReader::Kind;
using Value = JsonReader::Value;

// Far above any real request; keeps sums in Lua (doubles) exact.
constexpr int64_t kMaxTokens = int64_t{1} << 50;

// The body as an object: one reader per thread, so that reading a body allocates nothing once
// the thread's reader has grown to the API's bodies. Valid until the thread's next read.
std::optional<FieldError> read_object(std::string_view body, const JsonReader*& out) {
  thread_local JsonReader reader;
  switch (reader.read(body)) {
    case JsonReader::Status::kInvalid:
      return FieldError{"", "body is not valid JSON"};
    case JsonReader::Status::kDuplicate:
      return FieldError{reader.duplicate(), "duplicate key"};
    case JsonReader::Status::kNotObject:
      return FieldError{"", "body must be a JSON object"};
    case JsonReader::Status::kOk:
      break;
  }
  out = &reader;
  return std::nullopt;
}

std::optional<FieldError> reject_unknown(const JsonReader& j, int obj,
                                         std::initializer_list<std::string_view> known,
                                         std::string_view prefix = "") {
  for (size_t i = static_cast<size_t>(obj) + 1; i < j.size(); ++i) {
    if (j[i].parent != obj) continue;
    bool ok = false;
    for (auto k : known) ok = ok || j[i].key == k;
    if (!ok) return FieldError{std::string(prefix) + j[i].key, "unknown field"};
  }
  return std::nullopt;
}

// A member that is present and not null, or nullptr.
const Value* present(const JsonReader& j, int obj, std::string_view name) {
  const Value* v = j.find(obj, name);
  return v && v->kind != Kind::kNull ? v : nullptr;
}

// An integer value (nlohmann reads a number without a sign as unsigned, one with a minus as
// signed); nullopt for any other value and for one above INT64_MAX.
std::optional<int64_t> integer_of(const Value& v) {
  if (v.kind == Kind::kInteger) return v.integer;
  if (v.kind == Kind::kUnsigned && v.unsigned_ <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.unsigned_);
  return std::nullopt;
}

// An id field: absent or null leaves `out` empty unless required.
std::optional<FieldError> get_id(const JsonReader& j, int obj, const char* name, bool required,
                                 std::string& out,
                                 bool (*valid)(std::string_view) = common::valid_id) {
  const Value* v = present(j, obj, name);
  if (!v) {
    if (required) return FieldError{name, "required"};
    return std::nullopt;
  }
  if (v->kind != Kind::kString) return FieldError{name, "must be a string"};
  if (!valid(v->text)) return FieldError{name, "must match [A-Za-z0-9._-]{1,64}"};
  out = v->text;
  return std::nullopt;
}

// A non-negative integer value of at most max (a float written with no fraction is one), named
// `field` in an error.
std::optional<FieldError> count_of(const Value& v, std::string_view field, int64_t max,
                                   int64_t& out) {
  const char* msg = "must be a non-negative integer";
  if (v.kind == Kind::kUnsigned) {
    if (v.unsigned_ > static_cast<uint64_t>(max))
      return FieldError{std::string(field), "too large"};
    out = static_cast<int64_t>(v.unsigned_);
  } else if (v.kind == Kind::kInteger) {  // a minus sign: below zero, or -0
    if (v.integer < 0) return FieldError{std::string(field), msg};
    out = 0;
  } else if (v.kind == Kind::kFloat) {
    // 300.0 is an integer written by a careless serializer; 300.5 is not.
    double d = v.number;
    if (!std::isfinite(d) || d < 0 || std::floor(d) != d)
      return FieldError{std::string(field), msg};
    if (d > static_cast<double>(max)) return FieldError{std::string(field), "too large"};
    out = static_cast<int64_t>(d);
  } else {
    return FieldError{std::string(field), msg};
  }
  return std::nullopt;
}

// A non-negative integer field of the body, of at most max.
std::optional<FieldError> get_count(const JsonReader& j, const char* field, bool required,
                                    int64_t max, int64_t& out) {
  const Value* v = present(j, JsonReader::kBody, field);
  if (!v) {
    if (required) return FieldError{field, "required"};
    return std::nullopt;
  }
  return count_of(*v, field, max, out);
}

std::optional<FieldError> get_tokens(const JsonReader& j, bool required, int64_t& out) {
  return get_count(j, "tokens", required, kMaxTokens, out);
}

// A settle's or charge's `tokens` (required), or an admission's estimate: a plain count (`out`),
// or the count by type, an object of input, output, cached_input and reasoning, each optional
// (0) and a count (`typed`, weighed by the tenant's plan before anything is charged).
std::optional<FieldError> get_typed_tokens(const JsonReader& j, int64_t& out,
                                           std::optional<TokenCounts>& typed,
                                           bool required = true) {
  const Value* v = present(j, JsonReader::kBody, "tokens");
  if (!v || v->kind != Kind::kObject) return get_tokens(j, required, out);
  const int t = j.index_of(v);
  if (auto e = reject_unknown(j, t, {"input", "output", "cached_input", "reasoning"}, "tokens."))
    return e;
  TokenCounts n;
  for (auto [name, dst] : {std::pair<const char*, int64_t*>{"input", &n.input},
                           {"output", &n.output},
                           {"cached_input", &n.cached_input},
                           {"reasoning", &n.reasoning}}) {
    if (const Value* c = present(j, t, name))
      if (auto e = count_of(*c, std::string("tokens.") + name, kMaxTokens, *dst)) return e;
  }
  typed = n;
  return std::nullopt;
}

// An address with a ':' can only be IPv6 and one without only IPv4: one inet_pton, not two.
bool valid_ip(const std::string& s) {
  unsigned char buf[16];
  const int family = s.find(':') == std::string::npos ? AF_INET : AF_INET6;
  return inet_pton(family, s.c_str(), buf) == 1;
}

// "flow.<name>": made only for an error, not on every admission with a flow.
std::string flow_field(const char* name) {
  return std::string("flow.") + name;
}

std::optional<FieldError> get_port(const JsonReader& j, int flow, const char* name, uint16_t& out) {
  const Value* v = present(j, flow, name);
  if (!v) return FieldError{flow_field(name), "required"};
  std::optional<int64_t> port = integer_of(*v);
  if (!port || *port < 1 || *port > 65535)
    return FieldError{flow_field(name), "must be an integer 1..65535"};
  out = static_cast<uint16_t>(*port);
  return std::nullopt;
}

std::optional<FieldError> get_flow(const JsonReader& j, std::optional<Flow>& out) {
  const Value* v = present(j, JsonReader::kBody, "flow");
  if (!v) return std::nullopt;
  if (v->kind != Kind::kObject) return FieldError{"flow", "must be an object"};
  const int f = j.index_of(v);
  if (auto e = reject_unknown(j, f, {"src", "sport", "dst", "dport", "proto"}, "flow.")) return e;
  Flow flow;
  for (auto [name, dst] : {std::pair{"src", &flow.src}, std::pair{"dst", &flow.dst}}) {
    const Value* a = present(j, f, name);
    if (!a) return FieldError{flow_field(name), "required"};
    if (a->kind != Kind::kString || !valid_ip(a->text))
      return FieldError{flow_field(name), "must be an IPv4 or IPv6 address"};
    *dst = a->text;
  }
  if (auto e = get_port(j, f, "sport", flow.sport)) return e;
  if (auto e = get_port(j, f, "dport", flow.dport)) return e;
  const Value* p = present(j, f, "proto");
  const char* msg = "must be \"tcp\", \"udp\", 6 or 17";
  if (!p) return FieldError{"flow.proto", "required"};
  if (p->kind == Kind::kString) {
    if (p->text == "tcp") {
      flow.proto = 6;
    } else if (p->text == "udp") {
      flow.proto = 17;
    } else {
      return FieldError{"flow.proto", msg};
    }
  } else if (std::optional<int64_t> n = integer_of(*p); n && (*n == 6 || *n == 17)) {
    flow.proto = static_cast<uint8_t>(*n);
  } else {
    return FieldError{"flow.proto", msg};
  }
  // Both ends must be of the same family, or the 5-tuple can never match a packet.
  if ((flow.src.find(':') == std::string::npos) != (flow.dst.find(':') == std::string::npos))
    return FieldError{"flow.dst", "must be of the same address family as flow.src"};
  out = std::move(flow);
  return std::nullopt;
}

// client_ip: a string here; whether it is an address is the engine's check (prepare), which
// normalises it in the same step and answers every front alike.
std::optional<FieldError> get_client_ip(const JsonReader& j, std::string& out) {
  const Value* v = present(j, JsonReader::kBody, "client_ip");
  if (!v) return std::nullopt;
  if (v->kind != Kind::kString || v->text.empty())
    return FieldError{"client_ip", "must be an IPv4 or IPv6 address"};
  out = v->text;
  return std::nullopt;
}

bool is_whole(const std::string& gate) {
  return config::is_quota_gate(gate) || gate == "concurrency";
}

void write_remaining(JsonWriter& w, const std::vector<Remaining>& remaining) {
  w.key("remaining").begin_object();
  for (const auto& r : remaining) {
    w.key(r.gate);
    if (is_whole(r.gate)) {
      w.integer(static_cast<int64_t>(std::floor(r.value)));
    } else {
      // Four decimals: the fractional refill is meaningful, float noise is not.
      w.number(std::round(r.value * 10000.0) / 10000.0);
    }
  }
  w.end_object();
}

// The shortest text that reads back as v (a header's value).
std::string number_text(double v) {
  std::string s;
  JsonWriter(s).number(v);
  return s;
}

int64_t whole(double v) {
  if (!std::isfinite(v) || v <= 0) return 0;
  if (v > 9e15) return int64_t{9000000000000000};
  return static_cast<int64_t>(v);
}

// A response body into out (emptied first, its capacity kept): one JSON object, filled by
// fill(JsonWriter&), and a newline.
template <class Fill>
void json_into(std::string& out, Fill fill) {
  out.clear();
  JsonWriter w(out);
  w.begin_object();
  fill(w);
  w.end_object();
  out += '\n';
}

template <class Fill>
std::string json_body(Fill fill) {
  std::string out;
  out.reserve(256);
  json_into(out, fill);
  return out;
}

// Fills a Headers in order, reusing the strings an earlier answer left in it (a worker renders
// every admission into one Response), and drops the ones past the last filled at done().
class HeaderFill {
 public:
  explicit HeaderFill(Headers& h) : h_(h) {}
  std::string& add(std::string_view name) {
    if (n_ == h_.size()) h_.emplace_back();
    auto& [k, v] = h_[n_++];
    k = name;
    v.clear();
    return v;
  }
  void done() { h_.resize(n_); }

 private:
  Headers& h_;
  size_t n_ = 0;
};

}  // namespace

std::optional<FieldError> parse_admit(std::string_view body, AdmitRequest& out) {
  const JsonReader* jr = nullptr;
  if (auto e = read_object(body, jr)) return e;
  const JsonReader& j = *jr;
  constexpr int o = JsonReader::kBody;
  if (auto e = reject_unknown(j, o,
                              {"tenant", "user", "api_key", "model", "tool", "tokens", "request_id",
                               "flow", "client_ip", "max_wait_ms"}))
    return e;
  AdmitRequest r;
  if (auto e = get_id(j, o, "tenant", true, r.tenant)) return e;
  if (auto e = get_id(j, o, "user", false, r.user)) return e;
  if (auto e = get_id(j, o, "api_key", false, r.api_key)) return e;
  if (auto e = get_id(j, o, "model", false, r.model)) return e;
  if (auto e = get_id(j, o, "tool", false, r.tool)) return e;
  if (auto e = get_id(j, o, "request_id", false, r.request_id)) return e;
  if (auto e = get_typed_tokens(j, r.tokens, r.typed, false)) return e;
  if (auto e = get_flow(j, r.flow)) return e;
  if (auto e = get_client_ip(j, r.client_ip)) return e;
  if (present(j, o, "max_wait_ms")) {
    int64_t ms = 0;
    if (auto e = get_count(j, "max_wait_ms", true, config::kMaxWaitMs, ms)) return e;
    r.max_wait_ms = ms;
  }
  out = std::move(r);
  return std::nullopt;
}

std::optional<FieldError> parse_settle(std::string_view body, SettleRequest& out) {
  const JsonReader* jr = nullptr;
  if (auto e = read_object(body, jr)) return e;
  const JsonReader& j = *jr;
  constexpr int o = JsonReader::kBody;
  if (auto e = reject_unknown(j, o, {"tenant", "request_id", "tokens", "user", "api_key", "model"}))
    return e;
  SettleRequest r;
  if (auto e = get_id(j, o, "tenant", false, r.tenant)) return e;
  if (auto e = get_id(j, o, "request_id", true, r.request_id, valid_request_id)) return e;
  if (auto e = get_typed_tokens(j, r.tokens, r.typed)) return e;
  if (auto e = get_id(j, o, "user", false, r.user)) return e;
  if (auto e = get_id(j, o, "api_key", false, r.api_key)) return e;
  if (auto e = get_id(j, o, "model", false, r.model)) return e;
  out = std::move(r);
  return std::nullopt;
}

// The same fields as a settle's: tokens are those used since the request's last charge.
std::optional<FieldError> parse_charge(std::string_view body, ChargeRequest& out) {
  SettleRequest s;
  if (auto e = parse_settle(body, s)) return e;
  out = ChargeRequest{std::move(s.tenant),  std::move(s.request_id), s.tokens, std::move(s.user),
                      std::move(s.api_key), std::move(s.model),      s.typed};
  return std::nullopt;
}

std::optional<FieldError> parse_release(std::string_view body, ReleaseRequest& out) {
  const JsonReader* jr = nullptr;
  if (auto e = read_object(body, jr)) return e;
  const JsonReader& j = *jr;
  constexpr int o = JsonReader::kBody;
  if (auto e = reject_unknown(j, o, {"tenant", "request_id"})) return e;
  ReleaseRequest r;
  if (auto e = get_id(j, o, "tenant", false, r.tenant)) return e;
  if (auto e = get_id(j, o, "request_id", true, r.request_id, valid_request_id)) return e;
  out = std::move(r);
  return std::nullopt;
}

std::optional<FieldError> parse_brake(std::string_view body, Brake& out) {
  const JsonReader* jr = nullptr;
  if (auto e = read_object(body, jr)) return e;
  const JsonReader& j = *jr;
  constexpr int o = JsonReader::kBody;
  if (auto e = reject_unknown(j, o, {"factor", "exempt_plans", "ttl_s"})) return e;
  Brake b;
  const Value* f = present(j, o, "factor");
  if (!f) return FieldError{"factor", "required"};
  const double factor = f->kind == Kind::kFloat      ? f->number
                        : f->kind == Kind::kInteger  ? static_cast<double>(f->integer)
                        : f->kind == Kind::kUnsigned ? static_cast<double>(f->unsigned_)
                                                     : -1;
  if (!(factor >= 0 && factor <= 1))
    return FieldError{"factor", "must be a number in [0, 1] (the share of every rate left)"};
  b.factor = factor;
  if (const Value* e = present(j, o, "exempt_plans")) {
    if (e->kind != Kind::kArray)
      return FieldError{"exempt_plans", "must be an array of plan names"};
    const int arr = j.index_of(e);
    size_t n = 0;
    for (size_t i = static_cast<size_t>(arr) + 1; i < j.size(); ++i) {
      if (j[i].parent != arr) continue;
      const std::string field = "exempt_plans[" + std::to_string(n++) + "]";
      if (j[i].kind != Kind::kString || !common::valid_id(j[i].text))
        return FieldError{field, "must be a plan name ([A-Za-z0-9._-]{1,64})"};
      b.exempt_plans.push_back(j[i].text);
    }
    std::sort(b.exempt_plans.begin(), b.exempt_plans.end());
    b.exempt_plans.erase(std::unique(b.exempt_plans.begin(), b.exempt_plans.end()),
                         b.exempt_plans.end());
  }
  const Value* t = present(j, o, "ttl_s");
  const std::string ttl_rule =
      "must be an integer number of seconds, 1.." + std::to_string(kMaxBrakeTtlS);
  if (!t) return FieldError{"ttl_s", "required (" + ttl_rule + ")"};
  std::optional<int64_t> ttl = integer_of(*t);
  if (!ttl || *ttl < 1 || *ttl > kMaxBrakeTtlS) return FieldError{"ttl_s", ttl_rule};
  b.ttl_s = *ttl;
  out = std::move(b);
  return std::nullopt;
}

Response render_brake(int status, const Brake* b) {
  return Response{status, {}, json_body([&](JsonWriter& w) {
                    w.key("brake");
                    if (!b) {
                      w.null();
                      return;
                    }
                    w.begin_object().key("factor").number(b->factor);
                    w.key("exempt_plans").begin_array();
                    for (const auto& p : b->exempt_plans) w.string(p);
                    w.end_array().key("ttl_s").integer(b->ttl_s).end_object();
                  })};
}

std::optional<FieldError> parse_tenant_plan(std::string_view body, std::string& plan) {
  const JsonReader* j = nullptr;
  if (auto e = read_object(body, j)) return e;
  if (auto e = reject_unknown(*j, JsonReader::kBody, {"plan"})) return e;
  return get_id(*j, JsonReader::kBody, "plan", true, plan);
}

namespace {
bool sha256_hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos;
}
}  // namespace

std::optional<FieldError> parse_key_change(std::string_view body, KeyChangeBody& out) {
  const JsonReader* jr = nullptr;
  if (auto e = read_object(body, jr)) return e;
  const JsonReader& j = *jr;
  constexpr int o = JsonReader::kBody;
  if (auto e = reject_unknown(j, o, {"op", "key_sha256", "expires_at", "overlap_s"})) return e;
  const Value* op = present(j, o, "op");
  if (!op) return FieldError{"op", "required (add, rotate or revoke)"};
  if (op->kind != Kind::kString ||
      (op->text != "add" && op->text != "rotate" && op->text != "revoke"))
    return FieldError{"op", "must be add, rotate or revoke"};
  out.op = op->text;
  const Value* k = present(j, o, "key_sha256");
  if (!k) return FieldError{"key_sha256", "required (the key's SHA-256 digest, 64 hex digits)"};
  if (k->kind != Kind::kString || !sha256_hex(k->text))
    return FieldError{"key_sha256", "must be 64 hex digits (the key's SHA-256 digest)"};
  out.key_sha256 = k->text;
  for (char& c : out.key_sha256) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (present(j, o, "expires_at") && out.op != "add")
    return FieldError{"expires_at", "only with op add"};
  if (auto e = get_count(j, "expires_at", false, int64_t{1} << 40, out.expires_at)) return e;
  if (present(j, o, "overlap_s") && out.op != "rotate")
    return FieldError{"overlap_s", "only with op rotate"};
  return get_count(j, "overlap_s", out.op == "rotate", kMaxKeyOverlapS, out.overlap_s);
}

std::string flow_json(const Flow& flow) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.key("src").string(flow.src).key("sport").integer(flow.sport);
  w.key("dst").string(flow.dst).key("dport").integer(flow.dport);
  w.key("proto").integer(flow.proto);
  w.end_object();
  return out;
}

int status_of(Outcome o) {
  switch (o) {
    case Outcome::kAllowed:
      return 200;
    case Outcome::kRefused:
      return 429;
    case Outcome::kBadRequest:
      return 400;
    case Outcome::kConflict:
      return 409;
    case Outcome::kNotFound:
      return 404;
    case Outcome::kUnavailable:
      return 503;
  }
  return 500;
}

int64_t retry_after_seconds(int64_t retry_after_ms) {
  if (retry_after_ms <= 0) return 0;
  return (retry_after_ms + 999) / 1000;
}

namespace {

// Item i of a header's list, up to its first parameter: `, "gate";` (no comma before the first).
void open_gate_item(std::string& out, size_t i, std::string_view gate) {
  using namespace std::string_view_literals;
  if (i > 0) out += ", "sv;
  out += '"';
  out += gate;
  out += "\";"sv;
}

// Policy items are named after the gate: `"tenant";q=5;w=5, "quota";q=1000;qu="tokens";w=2678400`.
// Numbers by to_chars.
void format_ratelimit_policy(std::string& out, const std::vector<Remaining>& remaining) {
  // Literals by their length (string_view): appending a C string measures it first.
  using namespace std::string_view_literals;
  for (size_t i = 0; i < remaining.size(); ++i) {
    const Remaining& r = remaining[i];
    open_gate_item(out, i, r.gate);
    out += "q="sv;
    append_integer(out, whole(r.limit));
    if (config::is_quota_gate(r.gate)) out += ";qu=\"tokens\""sv;
    if (r.gate == "concurrency"sv) {
      out += ";qu=\"concurrent-requests\""sv;
    } else {
      out += ";w="sv;
      append_integer(out, std::max<int64_t>(1, whole(std::ceil(r.window_s))));
    }
  }
}

// The policy is the plan's (gates, limits, windows): the same for every answer on a plan until
// a reload, a brake or the month's length changes it. So each thread keeps the last one it
// wrote with what it was written from, and writes it again only when any of that differs.
struct PolicyCache {
  struct Item {
    std::string gate;
    double limit = 0, window_s = 0;
  };
  std::vector<Item> from;
  std::string text;

  const std::string& of(const std::vector<Remaining>& remaining) {
    if (!same(remaining)) {
      text.clear();
      format_ratelimit_policy(text, remaining);
      from.resize(remaining.size());
      for (size_t i = 0; i < remaining.size(); ++i)
        from[i] = {remaining[i].gate, remaining[i].limit, remaining[i].window_s};
    }
    return text;
  }
  // Bitwise equal inputs, so the same text (a NaN never matches: written every time).
  bool same(const std::vector<Remaining>& remaining) const {
    if (remaining.size() != from.size()) return false;
    for (size_t i = 0; i < remaining.size(); ++i) {
      const Remaining& r = remaining[i];
      if (r.limit != from[i].limit || r.window_s != from[i].window_s || r.gate != from[i].gate)
        return false;
    }
    return true;
  }
};

}  // namespace

// Both headers are written on every answer: appended into one string.
void append_ratelimit_policy(std::string& out, const std::vector<Remaining>& remaining) {
  thread_local PolicyCache cache;
  out += cache.of(remaining);
}

void append_ratelimit(std::string& out, const std::vector<Remaining>& remaining) {
  using namespace std::string_view_literals;
  for (size_t i = 0; i < remaining.size(); ++i) {
    const Remaining& r = remaining[i];
    open_gate_item(out, i, r.gate);
    out += "r="sv;
    append_integer(out, whole(std::floor(r.value)));
    out += ";t="sv;
    append_integer(out, std::max<int64_t>(0, r.reset_s));
  }
}

std::string ratelimit_policy_header(const std::vector<Remaining>& remaining) {
  std::string out;
  out.reserve(48 * remaining.size());
  append_ratelimit_policy(out, remaining);
  return out;
}

std::string ratelimit_header(const std::vector<Remaining>& remaining) {
  std::string out;
  out.reserve(40 * remaining.size());
  append_ratelimit(out, remaining);
  return out;
}

bool token_matches(const std::string& expected, const char* header) {
  if (!header) return false;
  static constexpr char kPrefix[] = "Bearer ";
  if (strncasecmp(header, kPrefix, sizeof kPrefix - 1) != 0) return false;
  return secret_equals(expected, std::string_view(header + sizeof kPrefix - 1));
}

bool secret_equals(const std::string& expected, std::string_view got) {
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  return diff == 0;
}

namespace {

void ratelimit_headers(bool refused, int64_t retry_after_ms,
                       const std::vector<Remaining>& remaining, HeaderFill& h) {
  if (refused) append_integer(h.add("Retry-After"), retry_after_seconds(retry_after_ms));
  if (!remaining.empty()) {
    append_ratelimit_policy(h.add("RateLimit-Policy"), remaining);
    append_ratelimit(h.add("RateLimit"), remaining);
  }
}

Headers ratelimit_headers(bool refused, int64_t retry_after_ms,
                          const std::vector<Remaining>& remaining) {
  Headers h;
  HeaderFill fill(h);
  ratelimit_headers(refused, retry_after_ms, remaining, fill);
  fill.done();
  return h;
}

// One gate's three OpenAI headers (openai_headers.h), when the answer has such a gate.
void openai_gate_headers(const Remaining* r, std::string_view limit, std::string_view left,
                         std::string_view reset, HeaderFill& h) {
  if (!r) return;
  append_integer(h.add(limit), whole(r->limit));
  append_integer(h.add(left), whole(std::floor(r->value)));
  append_go_duration(h.add(reset), reset_ms_of(*r));
}

void ratelimit_headers(const AdmitResult& r, bool openai, HeaderFill& h) {
  ratelimit_headers(r.outcome == Outcome::kRefused, r.retry_after_ms, r.remaining, h);
  if (openai) {
    const OpenAiLimits l = openai_limits(r.remaining);
    openai_gate_headers(l.requests, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                        "x-ratelimit-reset-requests", h);
    openai_gate_headers(l.tokens, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
                        "x-ratelimit-reset-tokens", h);
  }
  if (!r.degraded.empty()) h.add(kDegradedHeader) = r.degraded;
  if (!r.shadow_refused.empty()) h.add(kShadowRefusedHeader) = r.shadow_refused;
  if (r.brake < 1) h.add(kBrakeHeader) = number_text(r.brake);
}

}  // namespace

Headers ratelimit_headers(const AdmitResult& r, bool openai) {
  Headers h;
  HeaderFill fill(h);
  ratelimit_headers(r, openai, fill);
  fill.done();
  return h;
}

Response render_error(int status, const std::string& message) {
  return Response{status, {}, json_body([&](JsonWriter& w) { w.key("error").string(message); })};
}

Response render_tenant(int status, std::string_view tenant, std::string_view plan,
                       std::string_view source) {
  return Response{status, {}, json_body([&](JsonWriter& w) {
                    w.key("tenant").string(tenant).key("plan").string(plan);
                    w.key("source").string(source);
                  })};
}

Response render_tenant_keys(std::string_view tenant, const std::vector<TenantKey>& keys) {
  return Response{
      200, {}, json_body([&](JsonWriter& w) {
        w.key("tenant").string(tenant).key("keys").begin_array();
        for (const TenantKey& k : keys) {
          w.begin_object().key("sha256_prefix").string(digest_hex(k.sha256).substr(0, 8));
          w.key("expires_at");
          if (k.expires_at)
            w.integer(k.expires_at);
          else
            w.null();
          w.end_object();
        }
        w.end_array();
      })};
}

Response render_tenant_page(const std::vector<std::pair<std::string_view, std::string_view>>& page,
                            bool more, uint64_t version) {
  return Response{200, {}, json_body([&](JsonWriter& w) {
                    w.key("tenants").begin_array();
                    for (const auto& [tenant, plan] : page) {
                      w.begin_object().key("tenant").string(tenant);
                      w.key("plan").string(plan).end_object();
                    }
                    w.end_array().key("next_cursor");
                    if (more && !page.empty())
                      w.string(page.back().first);
                    else
                      w.null();
                    w.key("version").integer(static_cast<int64_t>(version));
                  })};
}

namespace {

// A time as the usage answer gives it: "<key>" in RFC 3339 (UTC) and "<key>_unix"; both null
// when there is none.
void write_time(JsonWriter& w, std::string_view key, std::optional<int64_t> unix_s) {
  w.key(key);
  if (unix_s)
    w.string(guidance::utc_iso8601(*unix_s));
  else
    w.null();
  w.key(std::string(key) + "_unix");
  if (unix_s)
    w.integer(*unix_s);
  else
    w.null();
}

void write_quota_usage(JsonWriter& w, const usage::QuotaUsage& u) {
  w.begin_object().key("quota").string(u.spec.name).key("unit").string(u.spec.unit);
  w.key("period").string(common::period_name(u.spec.period));
  w.key("period_label").string(u.span.label);
  w.key("mode").string(u.spec.shadow ? "shadow" : "enforce");
  w.key("used").integer(u.used).key("limit").integer(u.spec.limit);
  w.key("remaining").integer(u.remaining());
  write_time(w, "period_start", u.span.start);
  write_time(w, "resets_at", u.span.end);
  w.key("rate_per_s").number(u.rate_per_s);
  write_time(w, "projected_exhaustion", u.exhausts_at);
  w.end_object();
}

}  // namespace

Response render_usage(std::string_view tenant, std::string_view plan, int64_t now_s,
                      const std::vector<usage::QuotaUsage>& quotas) {
  return Response{200, {}, json_body([&](JsonWriter& w) {
                    w.key("tenant").string(tenant).key("plan").string(plan);
                    write_time(w, "now", now_s);
                    w.key("quotas").begin_array();
                    for (const usage::QuotaUsage& u : quotas) write_quota_usage(w, u);
                    w.end_array();
                  })};
}

Response render_admit(const AdmitResult& r, const std::string& flow_tag, int64_t now_s,
                      bool openai) {
  Response resp;
  render_admit(r, flow_tag, now_s, openai, resp);
  return resp;
}

void render_admit(const AdmitResult& r, const std::string& flow_tag, int64_t now_s, bool openai,
                  Response& resp) {
  if (now_s == 0 && r.outcome == Outcome::kRefused)
    now_s = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  int status = status_of(r.outcome);
  if (status != 200 && status != 429) {
    resp = render_error(status, r.error.empty() ? "admission failed" : r.error);
    return;
  }
  resp.status = status;
  json_into(resp.body, [&](JsonWriter& w) {
    if (status == 200) {
      w.key("allowed").boolean(true).key("request_id").string(r.request_id);
      w.key("class").string(r.cls);
      if (!r.shadow_refused.empty()) {
        w.key("shadow_refused").string(r.shadow_refused);
        w.key("shadow_retry_after_ms").integer(r.shadow_retry_ms);
      }
    } else {
      w.key("allowed").boolean(false).key("gate").string(r.gate).key("reason").string(r.reason);
      w.key("retry_after_ms").integer(r.retry_after_ms);
    }
    if (r.waited_ms >= 0) w.key("waited_ms").integer(r.waited_ms);
    write_remaining(w, r.remaining);
    if (!r.degraded.empty()) w.key("degraded").string(r.degraded);
    if (status == 429) guidance::write(w, r, now_s);
  });
  HeaderFill headers(resp.headers);
  ratelimit_headers(r, openai, headers);
  if (!flow_tag.empty()) headers.add("Dripgate-Flow-Tag") = flow_tag;
  headers.done();
}

Response render_settle(const SettleResult& r) {
  int status = status_of(r.outcome);
  if (status != 200) return render_error(status, r.error.empty() ? "settle failed" : r.error);
  Headers h;
  if (!r.degraded.empty()) h.emplace_back(kDegradedHeader, r.degraded);
  return Response{200, std::move(h), json_body([&](JsonWriter& w) {
                    w.key("settled").boolean(r.settled).key("charged").integer(r.charged);
                    w.key("remaining");
                    if (r.remaining < 0) {
                      w.null();
                    } else {
                      w.integer(r.remaining);
                    }
                    w.key("detail").string(r.detail);
                  })};
}

// 200 or, for the charge that took the month's quota past its budget (recorded all the same),
// 429 with gate and reason "quota": the proxy cuts the stream.
Response render_charge(const ChargeResult& r, const std::string& flow_tag) {
  int status = status_of(r.outcome);
  if (status != 200 && status != 429)
    return render_error(status, r.error.empty() ? "charge failed" : r.error);
  Response resp;
  resp.status = status;
  resp.body = json_body([&](JsonWriter& w) {
    w.key("charged").integer(r.charged);
    if (status == 429) {
      w.key("gate").string(r.gate).key("reason").string(r.reason);
      w.key("retry_after_ms").integer(r.retry_after_ms);
    }
    w.key("lease_s").integer(r.lease_s);
    write_remaining(w, r.remaining);
  });
  resp.headers = ratelimit_headers(status == 429, r.retry_after_ms, r.remaining);
  if (!flow_tag.empty()) resp.headers.emplace_back("Dripgate-Flow-Tag", flow_tag);
  if (!r.degraded.empty()) resp.headers.emplace_back(kDegradedHeader, r.degraded);
  return resp;
}

Response render_release(const ReleaseResult& r, const std::string& flow_tag) {
  int status = status_of(r.outcome);
  if (status != 200) return render_error(status, r.error.empty() ? "release failed" : r.error);
  Response resp{200, {}, json_body([&](JsonWriter& w) { w.key("released").boolean(r.released); })};
  if (!flow_tag.empty()) resp.headers.emplace_back("Dripgate-Flow-Tag", flow_tag);
  if (!r.degraded.empty()) resp.headers.emplace_back(kDegradedHeader, r.degraded);
  return resp;
}

}  // namespace dripgate::control::api
