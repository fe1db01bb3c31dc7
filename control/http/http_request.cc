#include "control/http/http_request.h"

#include <strings.h>

#include <algorithm>
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

constexpr char kHeadTooLarge[] = "the request line and headers are too large";
constexpr char kChunkedNotFinal[] =
    "Transfer-Encoding: chunked must be the final coding (the body's length cannot be known "
    "otherwise)";

bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

// RFC 9112 5.1: no whitespace between a field name and its colon, answered with a 400. A proxy
// in front that reads "Transfer-Encoding : chunked" otherwise than we do would frame the
// request otherwise, and a request could hide in another's body. http-parser takes the space
// as part of the name; `name` is the name up to it.
std::string space_before_colon(std::string_view name) {
  const bool known = !name.empty() && name.find('\n') == std::string_view::npos;
  return "header " + (known ? "\"" + std::string(name) + "\"" : std::string("name")) +
         ": whitespace between a header name and its colon is not allowed";
}

// Transfer-Encoding, the codings of every such header in order (RFC 9112 6.1). The server
// implements one coding, chunked, once: anything else is refused before the body, since the
// body could not be framed or read as the client meant. Returns 0, or the status with why:
// 400 where chunked is not the final coding, is repeated, or the list is malformed (RFC 9112
// 6.3: the body's length cannot be known); 501 where chunked comes last after codings the
// server does not implement (gzip, deflate, ...), as RFC 9112 6.1 asks of a server that does
// not understand a transfer coding.
int judge_transfer_encoding(std::string_view list, std::string& why) {
  constexpr char kField[] = "Transfer-Encoding: ";
  const size_t last_comma = list.rfind(',');
  const std::string_view last =
      trim_ows(last_comma == std::string_view::npos ? list : list.substr(last_comma + 1));
  if (!equals_ci(last, "chunked")) {
    why = kChunkedNotFinal;
    return 400;
  }
  if (last_comma == std::string_view::npos) return 0;
  std::string_view unknown;  // the first coding before chunked
  std::string_view rest = list.substr(0, last_comma);
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view coding = trim_ows(rest.substr(0, comma));
    if (equals_ci(coding, "chunked")) {
      why = std::string(kField) + "chunked is applied more than once";
      return 400;
    }
    if (coding.empty() || !std::all_of(coding.begin(), coding.end(), is_tchar)) {
      why = std::string(kField) + "a malformed list of codings; only chunked is accepted";
      return 400;
    }
    if (unknown.empty()) unknown = coding;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  why = std::string(kField) + "only chunked is implemented, not \"" +
        std::string(unknown.substr(0, 32)) + "\"";
  return 501;
}

// http-parser's own words for some errors mislead (a chunk size beyond 64 bits is "invalid
// character in content-length header") or name no field: these say what is wrong in the
// request's terms. in_chunk_size: the parser was reading a chunked body's framing.
const char* parse_error_message(http_errno e, bool in_chunk_size) {
  switch (e) {
    case HPE_INVALID_CONTENT_LENGTH:
      return in_chunk_size ? "chunk size: larger than 64 bits"
                           : "Content-Length: not a decimal number, or larger than 64 bits";
    case HPE_UNEXPECTED_CONTENT_LENGTH:
      return "Content-Length: given more than once, or together with Transfer-Encoding";
    case HPE_INVALID_CHUNK_SIZE:
      return "chunk size: not a hexadecimal number";
    case HPE_INVALID_TRANSFER_ENCODING:
      return kChunkedNotFinal;
    case HPE_INVALID_CONSTANT:
    case HPE_INVALID_VERSION:
      return "the request line: expected HTTP/<major>.<minor> after the target";
    case HPE_INVALID_URL:
      return "the request target is malformed";
    case HPE_INVALID_HEADER_TOKEN:
      return "a header holds a character it may not (a name is a token, a value has no control "
             "characters)";
    default:
      return http_errno_description(e);
  }
}

}  // namespace

HttpRequestParser::HttpRequestParser(Limits limits) : limits_(limits) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

int HttpRequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
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
  self->transfer_encoding_.clear();
  self->has_transfer_encoding_ = false;
  self->headers_done_ = false;
  self->head_bytes_ = 0;
  self->in_request_ = true;
  return 0;
}

int HttpRequestParser::on_url(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->grow_head(n)) return self->fail(431, kHeadTooLarge);
  self->req_.target.append(at, n);
  return 0;
}

int HttpRequestParser::on_header_field(http_parser* p, const char* at, size_t n) {
  auto* self = static_cast<HttpRequestParser*>(p->data);
  if (!self->grow_head(n)) return self->fail(431, kHeadTooLarge);
  if (self->in_value_) {
    self->in_value_ = false;
    self->field_.clear();
  }
  if (const void* space = std::memchr(at, ' ', n)) {
    std::string name = self->field_;
    name.append(at, static_cast<const char*>(space) - at);
    return self->fail(400, space_before_colon(name));
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
  if (!self->grow_head(n)) return self->fail(431, kHeadTooLarge);
  if (!self->in_value_) {
    self->in_value_ = true;
    self->value_ = nullptr;
    HttpRequest& r = self->req_;
    if (equals_ci(self->field_, "authorization") && !r.has_authorization) {
      r.has_authorization = true;
      self->value_ = &r.authorization;
    } else if (equals_ci(self->field_, "expect")) {
      self->value_ = &self->expect_;
    } else if (equals_ci(self->field_, "transfer-encoding") && !self->headers_done_) {
      // Several headers make one list (RFC 9110 5.3).
      if (self->has_transfer_encoding_) self->transfer_encoding_ += ',';
      self->has_transfer_encoding_ = true;
      self->value_ = &self->transfer_encoding_;
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
  self->headers_done_ = true;
  if (self->has_transfer_encoding_) {
    std::string why;
    if (int status = judge_transfer_encoding(self->transfer_encoding_, why))
      return self->fail(status, std::move(why));
    // http-parser frames the body: it must have read the same chunked coding (it does not, for
    // one, after a tab behind "chunked"), or the body would be taken for the next request.
    if ((p->flags & F_CHUNKED) == 0)
      return self->fail(400, "Transfer-Encoding: malformed; only the coding chunked is accepted");
  }
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
  fail_parse(e);
  return Result::kError;
}

void HttpRequestParser::fail_parse(http_errno e) {
  if (e == HPE_HEADER_OVERFLOW) {
    fail(431, kHeadTooLarge);
    return;
  }
  // A chunked body's framing, not its trailers (whose headers come after the last chunk).
  const bool in_chunk_size =
      headers_done_ && (parser_.flags & F_CHUNKED) != 0 && (parser_.flags & F_TRAILING) == 0;
  fail(400, parse_error_message(e, in_chunk_size));
}

HttpRequestParser::Result HttpRequestParser::feed_unknown_method(const char* data, size_t n,
                                                                 size_t& used) {
  used = 0;
  while (used < n) {
    const char c = data[used++];
    if (!grow_head(1)) {
      fail(431, kHeadTooLarge);
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
