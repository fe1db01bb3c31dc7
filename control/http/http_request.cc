#include "control/http/http_request.h"

#include <strings.h>

#include <array>
#include <climits>
#include <cstring>

namespace dripgate::control {
namespace {

// The header names the server reads are short: a longer name is none of them and is not kept.
constexpr size_t kMaxFieldName = 32;

bool equals_ci(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// RFC 9110 tchar: what a method name is made of.
bool is_tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    int hi = 0, lo = 0;
    if (s[i] == '%' && i + 2 < s.size() && (hi = hex_value(s[i + 1])) >= 0 &&
        (lo = hex_value(s[i + 2])) >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

// Splits the target into path and query. CONNECT's target is an authority, taken whole as the
// path (no route has one: a 404 or a 405 naming the path's methods).
bool split_target(HttpRequest& r) {
  std::string_view t = r.target;
  if (r.known_method && r.method == HTTP_CONNECT) {
    r.path = t;
    return true;
  }
  http_parser_url u;
  http_parser_url_init(&u);
  if (http_parser_parse_url(t.data(), t.size(), 0, &u) != 0) {
    r.path = t;  // an unknown method's target is only looked up
    return !r.known_method;
  }
  auto field = [&](int f) {
    return (u.field_set & (1 << f)) ? t.substr(u.field_data[f].off, u.field_data[f].len)
                                    : std::string_view{};
  };
  r.path = field(UF_PATH);
  r.query = field(UF_QUERY);
  return true;
}

// What feed_simple takes, a byte at a time by table: in a header name (kName: letters, digits
// and '-', a subset of RFC 9110's tchar), in a target (kTarget: RFC 3986's pchar, '/' and '?',
// every one of which http-parser takes in a path and a query alike) and in a header value
// (kValue: printable ASCII and the space).
enum : unsigned char { kName = 1, kTarget = 2, kValue = 4 };
constexpr std::array<unsigned char, 256> kClass = [] {
  std::array<unsigned char, 256> t{};
  for (int c = 0x20; c < 0x7f; ++c) t[c] = kValue;
  for (int c = '0'; c <= '9'; ++c) t[c] |= kName | kTarget;
  for (int c = 'a'; c <= 'z'; ++c) t[c] |= kName | kTarget, t[c - 'a' + 'A'] |= kName | kTarget;
  t['-'] |= kName;
  for (char c : std::string_view("-._~%!$&'()*+,;=:@/?"))
    t[static_cast<unsigned char>(c)] |= kTarget;
  return t;
}();

bool is(char c, unsigned char what) {
  return (kClass[static_cast<unsigned char>(c)] & what) != 0;
}

// A header name (letters, digits, '-') begins with `lower` (lowercase letters and '-'): ASCII
// case folding by one bit is exact for those.
bool name_starts(std::string_view name, std::string_view lower) {
  if (name.size() < lower.size()) return false;
  for (size_t i = 0; i < lower.size(); ++i)
    if ((name[i] | 0x20) != lower[i]) return false;
  return true;
}

// http-parser's own bound on a request line and headers (HTTP_MAX_HEADER_SIZE).
constexpr size_t kParserMaxHead = 80 * 1024;

}  // namespace

HttpRequestParser::HttpRequestParser(Limits limits) : limits_(limits) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

int HttpRequestParser::fail(int status, const char* message) {
  error_status_ = status;
  error_message_ = message;
  return -1;  // any other value than 0, 1 and 2 is an error from on_headers_complete
}

bool HttpRequestParser::grow_head(size_t n) {
  head_bytes_ += n;
  return head_bytes_ <= limits_.max_head;
}

int HttpRequestParser::on_message_begin(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  HttpRequest& r = self->req_;
  // Cleared here, not when answered: the strings keep their capacity for the next request.
  r.known_method = true;
  r.target.clear();
  r.path = r.query = {};
  r.has_authorization = false;
  r.authorization.clear();
  r.body.clear();
  self->field_.clear();
  self->value_ = nullptr;
  self->in_value_ = false;
  self->expect_.clear();
  self->head_bytes_ = 0;
  self->in_request_ = true;
  return 0;
}

int HttpRequestParser::on_url(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->grow_head(n)) return self->fail(431, "the request line and headers are too large");
  self->req_.target.append(at, n);
  return 0;
}

int HttpRequestParser::on_header_field(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->grow_head(n)) return self->fail(431, "the request line and headers are too large");
  if (self->in_value_) {
    self->in_value_ = false;
    self->field_.clear();
  }
  // A name longer than any the server reads is marked with a byte no name can hold.
  if (self->field_.size() + n <= kMaxFieldName)
    self->field_.append(at, n);
  else
    self->field_.assign(1, '\n');
  return 0;
}

int HttpRequestParser::on_header_value(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->grow_head(n)) return self->fail(431, "the request line and headers are too large");
  if (!self->in_value_) {
    self->in_value_ = true;
    self->value_ = nullptr;
    HttpRequest& r = self->req_;
    if (equals_ci(self->field_, "authorization") && !r.has_authorization) {
      r.has_authorization = true;
      self->value_ = &r.authorization;
    } else if (equals_ci(self->field_, "expect")) {
      self->value_ = &self->expect_;
    }
  }
  if (self->value_) self->value_->append(at, n);
  return 0;
}

int HttpRequestParser::on_headers_complete(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  HttpRequest& r = self->req_;
  std::string& auth = r.authorization;
  while (!auth.empty() && (auth.back() == ' ' || auth.back() == '\t')) auth.pop_back();
  r.method = static_cast<http_method>(p->method);
  r.minor = p->http_minor;
  if (p->http_major != 1) return self->fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  const bool chunked = (p->flags & F_CHUNKED) != 0;
  const bool has_length = p->content_length != ULLONG_MAX && p->content_length > 0;
  // Refused before its first byte is read.
  if (!chunked && has_length && p->content_length > self->limits_.max_body)
    return self->fail(413, "the request body is too large");
  self->want_continue_ = (chunked || has_length) && p->http_major == 1 && p->http_minor >= 1 &&
                         equals_ci(self->expect_, "100-continue");
  return 0;
}

int HttpRequestParser::on_body(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  // Only a chunked body can get here larger than the limit.
  if (self->req_.body.size() + n > self->limits_.max_body)
    return self->fail(413, "the request body is too large");
  self->req_.body.append(at, n);
  return 0;
}

int HttpRequestParser::on_message_complete(http_parser* p) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  HttpRequest& r = self->req_;
  r.keep_alive = http_should_keep_alive(p) != 0 && !p->upgrade;
  if (!split_target(r)) return self->fail(400, "the request target is malformed");
  self->in_request_ = false;
  // One request at a time: the parser stops here until it is answered (next()).
  http_parser_pause(p, 1);
  return 0;
}

void HttpRequestParser::next() {
  http_parser_pause(&parser_, 0);
}

HttpRequestParser::Result HttpRequestParser::feed(const char* data, size_t n, size_t& used) {
  used = 0;
  if (error_status_) return Result::kError;
  if (unknown_method_) return feed_unknown_method(data, n, used);
  // Between requests (http-parser neither inside one nor paused after one): a whole common
  // request is read here, at a fraction of http-parser's cost a byte.
  if (!in_request_ && HTTP_PARSER_ERRNO(&parser_) == HPE_OK && feed_simple(data, n, used))
    return Result::kRequest;
  static const http_parser_settings settings = [] {
    http_parser_settings s{};
    s.on_message_begin = &on_message_begin;
    s.on_url = &on_url;
    s.on_header_field = &on_header_field;
    s.on_header_value = &on_header_value;
    s.on_headers_complete = &on_headers_complete;
    s.on_body = &on_body;
    s.on_message_complete = &on_message_complete;
    return s;
  }();
  used = http_parser_execute(&parser_, &settings, data, n);
  const http_errno e = HTTP_PARSER_ERRNO(&parser_);
  if (e == HPE_OK) return Result::kNeedMore;
  if (e == HPE_PAUSED) return Result::kRequest;
  if (error_status_) return Result::kError;
  if (e == HPE_INVALID_METHOD) {
    // Nothing of the request but (part of) its method was taken: the rest of the line follows.
    unknown_method_ = true;
    in_request_ = true;
    req_ = HttpRequest{};
    req_.known_method = false;
    req_.keep_alive = false;  // what follows the request line cannot be framed
    head_bytes_ = used;
    size_t more = 0;
    Result r = feed_unknown_method(data + used, n - used, more);
    used += more;
    return r;
  }
  if (e == HPE_HEADER_OVERFLOW) {
    fail(431, "the request line and headers are too large");
  } else {
    fail(400, http_errno_description(e));
  }
  return Result::kError;
}

// Takes only what http-parser reads the same way with no special case: GET, POST, PUT, DELETE
// or HEAD of an origin-form target, HTTP/1.1, header names of letters, digits and '-', values
// of printable ASCII without leading or trailing spaces, at most one Content-Length (digits)
// and no Transfer-Encoding, Connection, Proxy-Connection, Upgrade or Expect (each changes how
// the request is framed or answered); the body, if any, complete in data. The request is then
// what on_message_begin .. on_message_complete would have made of it.
bool HttpRequestParser::feed_simple(const char* data, size_t n, size_t& used) {
  const char* p = data;
  const char* const end = data + n;
  auto starts = [&](std::string_view s) {
    return static_cast<size_t>(end - p) >= s.size() && std::memcmp(p, s.data(), s.size()) == 0;
  };
  http_method method;
  if (starts("POST /")) {
    method = HTTP_POST, p += 5;
  } else if (starts("GET /")) {
    method = HTTP_GET, p += 4;
  } else if (starts("PUT /")) {
    method = HTTP_PUT, p += 4;
  } else if (starts("DELETE /")) {
    method = HTTP_DELETE, p += 7;
  } else if (starts("HEAD /")) {
    method = HTTP_HEAD, p += 5;
  } else {
    return false;
  }
  const char* const target = p;
  const char* query = nullptr;  // its '?'
  for (; p < end && *p != ' '; ++p) {
    if (!is(*p, kTarget)) return false;
    if (*p == '?' && !query) query = p;
  }
  const char* const target_end = p;
  if (p == end) return false;
  ++p;
  if (!starts("HTTP/1.1\r\n")) return false;
  p += 10;
  size_t head = static_cast<size_t>(target_end - target);  // as grow_head counts
  std::string_view authorization;
  bool has_authorization = false;
  bool has_length = false;
  uint64_t length = 0;
  for (;;) {
    if (end - p < 2) return false;
    if (p[0] == '\r') {
      if (p[1] != '\n') return false;
      p += 2;
      break;
    }
    const char* const name = p;
    while (p < end && is(*p, kName)) ++p;
    if (p == end || *p != ':' || p == name) return false;
    const std::string_view field(name, static_cast<size_t>(p - name));
    ++p;
    while (p < end && *p == ' ') ++p;
    const char* const value = p;
    while (p < end && is(*p, kValue)) ++p;
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n' || p == value || p[-1] == ' ') return false;
    const std::string_view v(value, static_cast<size_t>(p - value));
    p += 2;
    head += field.size() + v.size();
    // http-parser takes a name that only begins with one of its special ones for that one
    // ("Transfer-Encodingx"): any such name is left to it, but an exact Content-Length.
    const char first = static_cast<char>(field[0] | 0x20);
    if (first == 'a') {
      if (!has_authorization && field.size() == 13 && name_starts(field, "authorization")) {
        has_authorization = true;
        authorization = v;
      }
    } else if (first == 'c' || first == 'p' || first == 't' || first == 'u' || first == 'e') {
      if (name_starts(field, "content-length")) {
        if (field.size() != 14 || has_length || v.size() > 15) return false;
        for (char c : v) {
          if (c < '0' || c > '9') return false;
          length = length * 10 + static_cast<uint64_t>(c - '0');
        }
        has_length = true;
      } else if (name_starts(field, "connection") || name_starts(field, "proxy-connection") ||
                 name_starts(field, "transfer-encoding") || name_starts(field, "upgrade") ||
                 name_starts(field, "expect")) {
        return false;
      }
    }
  }
  const auto head_len = static_cast<size_t>(p - data);
  if (head_len > limits_.max_head || head_len > kParserMaxHead || head > limits_.max_head)
    return false;
  if (length > limits_.max_body || length > static_cast<uint64_t>(end - p)) return false;

  HttpRequest& r = req_;
  r.method = method;
  r.known_method = true;
  r.minor = 1;
  r.keep_alive = true;
  r.target.assign(target, target_end);
  const std::string_view t = r.target;
  if (query) {
    const auto at = static_cast<size_t>(query - target);
    r.path = t.substr(0, at);
    r.query = t.substr(at + 1);
  } else {
    r.path = t;
    r.query = {};
  }
  r.has_authorization = has_authorization;
  r.authorization.assign(authorization);
  r.body.assign(p, static_cast<size_t>(length));
  field_.clear();
  value_ = nullptr;
  in_value_ = false;
  expect_.clear();
  want_continue_ = false;
  head_bytes_ = head;
  used = head_len + static_cast<size_t>(length);
  // As after on_message_complete: the next request waits for next().
  http_parser_pause(&parser_, 1);
  return true;
}

HttpRequestParser::Result HttpRequestParser::feed_unknown_method(const char* data, size_t n,
                                                                 size_t& used) {
  used = 0;
  while (used < n) {
    const char c = data[used++];
    if (!grow_head(1)) {
      fail(431, "the request line and headers are too large");
      return Result::kError;
    }
    if (!in_target_) {
      if (c == ' ') {
        in_target_ = true;
      } else if (!is_tchar(c)) {
        fail(400, "the request line is malformed");
        return Result::kError;
      }
      continue;
    }
    if (c != ' ' && c != '\r' && c != '\n') {
      req_.target += c;
      continue;
    }
    if (req_.target.empty()) {
      fail(400, "the request line is malformed");
      return Result::kError;
    }
    split_target(req_);
    in_request_ = false;
    // The rest of the line and the headers are not read: the connection closes after the
    // answer, which needs the target only.
    used = n;
    return Result::kRequest;
  }
  return Result::kNeedMore;
}

bool parse_query(std::string_view query, std::vector<std::pair<std::string, std::string>>& out) {
  out.clear();
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view arg = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    size_t eq = arg.find('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    out.emplace_back(percent_decode(arg.substr(0, eq)), percent_decode(arg.substr(eq + 1)));
  }
  return true;
}

}  // namespace dripgate::control
