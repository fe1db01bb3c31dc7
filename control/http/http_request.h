// One HTTP/1.x connection's request parser: nodejs http-parser (libhttp-parser) underneath, the
// request's target, the headers the server reads, its body (Content-Length or chunked) and the
// limits on their sizes. http-parser alone frames a request (but for a method it does not know,
// whose request line is read only to route it, the connection then closed): a second path
// beside it could disagree on where a request ends, and a request could hide in another's
// body. No socket here: the server feeds it what it read (connection.cc), the fuzz target
// feeds it anything (http_request_fuzz.cc).
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dripgate::control {

struct HttpRequest {
  // The method; known_method false for one http-parser does not know (its name is not kept:
  // no route has it, so the answer is a 405 or a 404 all the same).
  http_method method = HTTP_GET;
  bool known_method = true;
  unsigned short minor = 1;  // HTTP/1.<minor>
  // The client wants the connection kept after the answer (HTTP/1.1 unless Connection: close,
  // HTTP/1.0 with Connection: keep-alive; never after CONNECT or an Upgrade).
  bool keep_alive = true;
  std::string target;            // as sent: path and query, an authority for CONNECT
  std::string_view path, query;  // in target (query without its '?')
  bool has_authorization = false;
  std::string authorization;  // the first Authorization header's value
  std::string body;           // decoded when chunked
};

class HttpRequestParser {
 public:
  struct Limits {
    size_t max_head = 16 * 1024;  // the request line and the headers, bytes
    size_t max_body = 64 * 1024;
  };
  enum class Result {
    kNeedMore,  // every byte used, the request is not complete yet
    kRequest,   // request() is complete: answer it, then next()
    kError,     // error_status() says why; the connection cannot be read any further
  };

  explicit HttpRequestParser(Limits limits);
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Parses from data[0, n); `used` is how many bytes it took. After kRequest the bytes left
  // belong to the next request (pipelined): feed them again after next().
  Result feed(const char* data, size_t n, size_t& used);
  const HttpRequest& request() const { return req_; }
  // Forgets the request answered; the next one starts.
  void next();
  // Whether the client asked for "100 Continue" before sending its body (true once per request).
  bool take_continue() { return std::exchange(want_continue_, false); }
  // 400 (malformed), 413 (body too large), 431 (head too large), 501 (a transfer coding other
  // than chunked), 505 (not HTTP/1.x); with a message for the answer's body that names the
  // field at fault.
  int error_status() const { return error_status_; }
  const char* error_message() const { return error_message_.c_str(); }
  // Whether a request's first byte was seen and it is not complete.
  bool in_request() const { return in_request_; }

 private:
  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, size_t n);
  static int on_header_field(http_parser* p, const char* at, size_t n);
  static int on_header_value(http_parser* p, const char* at, size_t n);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, size_t n);
  static int on_message_complete(http_parser* p);
  // A method http-parser refuses: reads the rest of the request line (its target) alone.
  Result feed_unknown_method(const char* data, size_t n, size_t& used);
  bool grow_head(size_t n);
  int fail(int status, std::string message);
  // The error http-parser stopped at, said in the request's terms.
  void fail_parse(http_errno e);

  Limits limits_;
  http_parser parser_{};
  HttpRequest req_;
  std::string field_;  // the header name being read (kept short: only a few names matter)
  std::string* value_ = nullptr;  // where the current header's value goes (null: ignored)
  bool in_value_ = false;
  std::string expect_;
  std::string transfer_encoding_;  // every Transfer-Encoding header's value, joined by ','
  bool has_transfer_encoding_ = false;
  bool headers_done_ = false;  // on_headers_complete passed: what follows is the body
  bool want_continue_ = false;
  bool in_request_ = false;
  bool unknown_method_ = false;  // reading an unknown method's request line
  bool in_target_ = false;       // past its method's name
  size_t head_bytes_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

// A query string's parameters, percent-decoded ('+' is a space) in order; false when one has no
// '=' or an empty name.
bool parse_query(std::string_view query, std::vector<std::pair<std::string, std::string>>& out);

}  // namespace dripgate::control
