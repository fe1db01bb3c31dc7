// The request parser on its own: what the server reads of a request, however the bytes are cut,
// and what it refuses.
#include "control/http/http_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dripgate::control {
namespace {

using Result = HttpRequestParser::Result;

// A request as parsed, owning its path and query (HttpRequest's views point into the parser's).
struct Got {
  http_method method;
  bool known_method, keep_alive, has_authorization;
  unsigned short minor;
  std::string path, query, authorization, body;
};

struct Parsed {
  std::vector<Got> requests;
  int error = 0;        // error_status() when parsing stopped at an error
  std::string message;  // and its error_message()
};

// Feeds `bytes` in pieces of `piece` bytes (0: all at once), collecting every request.
Parsed parse(const std::string& bytes, size_t piece = 0, HttpRequestParser::Limits limits = {}) {
  HttpRequestParser p(limits);
  Parsed out;
  size_t at = 0;
  std::string held;  // fed, not used yet (after a request)
  while (at < bytes.size() || !held.empty()) {
    if (held.empty()) {
      size_t n = piece ? std::min(piece, bytes.size() - at) : bytes.size() - at;
      held = bytes.substr(at, n);
      at += n;
    }
    size_t used = 0;
    Result r = p.feed(held.data(), held.size(), used);
    held.erase(0, used);
    if (r == Result::kError) {
      out.error = p.error_status();
      out.message = p.error_message();
      break;
    }
    if (r == Result::kRequest) {
      const HttpRequest& q = p.request();
      out.requests.push_back(Got{q.method, q.known_method, q.keep_alive, q.has_authorization,
                                 q.minor, std::string(q.path), std::string(q.query),
                                 q.authorization, q.body});
      if (!q.keep_alive) break;
      p.next();
    }
  }
  return out;
}

const std::string kPipeline =
    "POST /v1/admit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret  \r\n"
    "Content-Length: 17\r\n\r\n{\"tenant\":\"t-a\"}\n"
    "GET /v1/admin/tenants?limit=5&cursor=a%2Db HTTP/1.1\r\nHost: x\r\n\r\n"
    "POST /v1/settle HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    "4\r\n{\"re\r\nA\r\nquest_id\":\r\n0\r\n\r\n"
    "GET /healthz HTTP/1.0\r\n\r\n";

TEST(HttpRequestParser, PipelinedRequestsComeOutWholeHoweverTheBytesAreCut) {
  for (size_t piece : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
    Parsed got = parse(kPipeline, piece);
    ASSERT_EQ(got.error, 0) << piece;
    ASSERT_EQ(got.requests.size(), 4u) << piece;
    const Got& a = got.requests[0];
    EXPECT_EQ(a.method, HTTP_POST);
    EXPECT_EQ(a.path, "/v1/admit");
    EXPECT_TRUE(a.has_authorization);
    EXPECT_EQ(a.authorization, "Bearer s3cret") << "trailing blanks are not the token's";
    EXPECT_EQ(a.body, "{\"tenant\":\"t-a\"}\n");
    EXPECT_TRUE(a.keep_alive);
    const Got& b = got.requests[1];
    EXPECT_EQ(b.path, "/v1/admin/tenants") << piece;
    EXPECT_EQ(b.query, "limit=5&cursor=a%2Db");
    EXPECT_FALSE(b.has_authorization) << "one request's headers do not leak into the next";
    EXPECT_EQ(b.body, "");
    EXPECT_EQ(got.requests[2].body, "{\"request_id\":") << "chunked, decoded";
    const Got& d = got.requests[3];
    EXPECT_EQ(d.minor, 0);
    EXPECT_FALSE(d.keep_alive) << "HTTP/1.0 without keep-alive";
  }
}

bool operator==(const Got& a, const Got& b) {
  return a.method == b.method && a.known_method == b.known_method && a.keep_alive == b.keep_alive &&
         a.has_authorization == b.has_authorization && a.minor == b.minor && a.path == b.path &&
         a.query == b.query && a.authorization == b.authorization && a.body == b.body;
}

// The common requests and their near misses (a header name that only begins like one that
// frames the request, a repeated one, leading zeros, a tab, a fragment): the same requests, or
// the same error, whether fed whole or a byte at a time.
TEST(HttpRequestParser, TheCommonRequestAndItsNearMissesReadTheSameHoweverCut) {
  const std::string cases[] = {
      "POST /v1/admit HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 33\r\n"
      "Content-Type: application/json\r\n\r\n{\"tenant\":\"ws-bench\",\"tokens\":1}",
      "GET /v1/admin/tenants?cursor=a&limit=3?x HTTP/1.1\r\nauthorization: Bearer a\r\n"
      "AUTHORIZATION: Bearer b\r\n\r\nHEAD /healthz HTTP/1.1\r\n\r\n",
      "DELETE /v1/admin/tenants/t-1 HTTP/1.1\r\nContent-Length: 0007\r\n\r\nabcdefgPUT / "
      "HTTP/1.1\r\nContent-Length: 1\r\n\r\nz",
      "POST /v1/admit HTTP/1.1\r\nTransfer-Encodingx: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
      "POST /v1/admit HTTP/1.1\r\nContent-Lengthx: 2\r\nContent-Length: 2\r\n\r\n{}",
      "GET /x HTTP/1.1\r\nConnection: close\r\n\r\nGET /y HTTP/1.1\r\n\r\n",
      "GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
      "GET /x HTTP/1.1\r\nX:\tv\r\nY: v \r\n\r\n",
      "GET /a#b HTTP/1.1\r\n\r\n",
  };
  for (const std::string& c : cases) {
    Parsed whole = parse(c), bytes = parse(c, 1);
    EXPECT_EQ(whole.error, bytes.error) << c;
    EXPECT_TRUE(whole.requests == bytes.requests) << c;
  }
}

TEST(HttpRequestParser, KeepAliveFollowsTheVersionAndTheConnectionHeader) {
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").requests.at(0).keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").requests.at(0).keep_alive);
  Parsed c = parse("CONNECT /v1/admit HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(c.requests.size(), 1u);
  EXPECT_EQ(c.requests[0].method, HTTP_CONNECT);
  EXPECT_EQ(c.requests[0].path, "/v1/admit") << "CONNECT's target is taken whole";
  EXPECT_FALSE(c.requests[0].keep_alive);
}

TEST(HttpRequestParser, AnUnknownMethodStillYieldsItsTargetAndClosesTheConnection) {
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}}) {
    for (const char* line : {"FOO /v1/admit HTTP/1.1\r\n\r\n", "PUX /v1/admit HTTP/1.1\r\n",
                             "GETX /v1/admit?a=1 HTTP/1.1\r\n"}) {
      Parsed got = parse(line, piece);
      ASSERT_EQ(got.error, 0) << line;
      ASSERT_EQ(got.requests.size(), 1u) << line;
      EXPECT_FALSE(got.requests[0].known_method);
      EXPECT_EQ(got.requests[0].path, "/v1/admit") << line;
      EXPECT_FALSE(got.requests[0].keep_alive);
    }
  }
  EXPECT_EQ(parse("F(O /x HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("\x01\x02\r\n\r\n").error, 400);
}

TEST(HttpRequestParser, SizeLimitsAndMalformedRequests) {
  HttpRequestParser::Limits small{.max_head = 256, .max_body = 100};
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 0, small).error,
            431);
  EXPECT_EQ(parse("GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n", 5, small).error, 431);
  EXPECT_EQ(parse("FOO /" + std::string(300, 'a'), 0, small).error, 431);
  // Refused on the header, before any of the body is sent.
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 0, small).error, 413);
  Parsed at_limit =
      parse("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'b'), 0, small);
  EXPECT_EQ(at_limit.error, 0);
  ASSERT_EQ(at_limit.requests.size(), 1u);
  EXPECT_EQ(at_limit.requests[0].body.size(), 100u);
  // A chunked body is counted as it comes.
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" +
                      std::string(100, 'c') + "\r\n1\r\nd\r\n0\r\n\r\n",
                  0, small)
                .error,
            413);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").error, 400);
  EXPECT_EQ(
      parse("GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").error, 400)
      << "both framings: a smuggling attempt";
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nbad header\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET /a b HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET / HTTP/2.0\r\n\r\n").error, 505);
}

// RFC 9112 5.1: a proxy in front may read "Transfer-Encoding : chunked" as no header at all and
// frame the request by its Content-Length, while http-parser honours it: a 400 naming the header.
TEST(HttpRequestParser, WhitespaceBeforeAHeadersColonIs400NamingTheHeader) {
  const std::string cases[] = {
      "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length : 17\r\n\r\n{\"tenant\":\"t-a\"}\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding  :chunked\r\n\r\n0\r\n\r\n",
  };
  for (const std::string& c : cases) {
    for (size_t piece : {size_t{0}, size_t{1}, size_t{5}}) {
      Parsed got = parse(c, piece);
      EXPECT_EQ(got.error, 400) << c << piece;
      EXPECT_TRUE(got.requests.empty()) << c;
      const std::string name = c.substr(17, c.find(' ', 17) - 17);
      EXPECT_EQ(got.message, "header \"" + name +
                                 "\": whitespace between a header name and its colon is not "
                                 "allowed")
          << c << piece;
    }
  }
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX-Long-Header-Name-Beyond-Thirty-Two-Bytes : 1\r\n\r\n").error,
            400);
}

// The one transfer coding the server implements is chunked, once (RFC 9112 6): chunked not last
// or repeated is a 400 (the body cannot be framed), a coding before it that the server does not
// implement a 501 (RFC 9112 6.1); every error names Transfer-Encoding.
TEST(HttpRequestParser, OnlyTheOneCodingChunkedIsAccepted) {
  const std::string body = "\r\n\r\n1\r\na\r\n0\r\n\r\n";
  auto with = [&](const std::string& headers) {
    return parse("POST / HTTP/1.1\r\n" + headers + body);
  };
  struct Case {
    std::string headers;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"Transfer-Encoding: gzip, chunked", 501, "only chunked is implemented, not \"gzip\""},
      {"Transfer-Encoding: x-y ,deflate, chunked", 501, "not \"x-y\""},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked", 501, "not \"gzip\""},
      {"Transfer-Encoding: chunked, chunked", 400, "chunked is applied more than once"},
      {"Transfer-Encoding: chunked\r\ntransfer-encoding: chunked", 400, "more than once"},
      {"Transfer-Encoding: chunked, gzip", 400, "chunked must be the final coding"},
      {"Transfer-Encoding: gzip", 400, "chunked must be the final coding"},
      {"Transfer-Encoding: ", 400, "chunked must be the final coding"},
      {"Transfer-Encoding: chunked;ext=1", 400, "chunked must be the final coding"},
      {"Transfer-Encoding: , chunked", 400, "malformed"},
      {"Transfer-Encoding: gz;q=1, chunked", 400, "malformed"},
      {"Transfer-Encoding: chunked\t", 400, "Transfer-Encoding: "},
  };
  for (const Case& c : cases) {
    for (size_t piece : {size_t{0}, size_t{1}}) {
      Parsed got = piece ? parse("POST / HTTP/1.1\r\n" + c.headers + body, piece) : with(c.headers);
      EXPECT_EQ(got.error, c.status) << c.headers;
      EXPECT_TRUE(got.requests.empty()) << c.headers;
      EXPECT_EQ(got.message.rfind("Transfer-Encoding: ", 0), 0u)
          << c.headers << ": " << got.message;
      EXPECT_NE(got.message.find(c.says), std::string::npos) << c.headers << ": " << got.message;
    }
  }
  for (const char* ok : {"Transfer-Encoding: chunked", "transfer-encoding:   ChUnKeD  "}) {
    Parsed got = with(ok);
    EXPECT_EQ(got.error, 0) << ok << ": " << got.message;
    ASSERT_EQ(got.requests.size(), 1u) << ok;
    EXPECT_EQ(got.requests[0].body, "a");
  }
}

// http-parser reports a chunk size beyond 64 bits as "invalid character in content-length
// header"; the answer names what is wrong.
TEST(HttpRequestParser, FramingErrorsNameTheChunkSizeOrTheContentLength) {
  const std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  struct Case {
    std::string bytes, says;
  };
  const Case cases[] = {
      {chunked + "1ffffffffffffffff\r\n", "chunk size: larger than 64 bits"},
      {chunked + "1\r\na\r\n10000000000000000\r\n", "chunk size: larger than 64 bits"},
      {chunked + "zz\r\n", "chunk size: not a hexadecimal number"},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
       "Content-Length: not a decimal number, or larger than 64 bits"},
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", "Content-Length: not a decimal"},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       "Content-Length: given more than once"},
      {"GET / XTTP/1.1\r\n\r\n", "the request line: expected HTTP/"},
  };
  for (const Case& c : cases) {
    for (size_t piece : {size_t{0}, size_t{1}, size_t{3}}) {
      Parsed got = parse(c.bytes, piece);
      EXPECT_EQ(got.error, 400) << c.bytes;
      EXPECT_EQ(got.message.rfind(c.says, 0), 0u) << c.bytes << piece << ": " << got.message;
    }
  }
}

TEST(HttpRequestParser, ExpectContinueIsReportedOnceBeforeTheBody) {
  HttpRequestParser p({});
  std::string head = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  size_t used = 0;
  EXPECT_EQ(p.feed(head.data(), head.size(), used), Result::kNeedMore);
  EXPECT_TRUE(p.take_continue());
  EXPECT_FALSE(p.take_continue());
  EXPECT_EQ(p.feed("{}", 2, used), Result::kRequest);
  EXPECT_EQ(p.request().body, "{}");
}

TEST(HttpRequestParser, QueryParametersArePercentDecoded) {
  std::vector<std::pair<std::string, std::string>> q;
  ASSERT_TRUE(parse_query("cursor=a%20b&limit=5&x=&p=1+2%2", q));
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0], (std::pair<std::string, std::string>{"cursor", "a b"}));
  EXPECT_EQ(q[1].second, "5");
  EXPECT_EQ(q[2].second, "");
  EXPECT_EQ(q[3].second, "1 2%2");
  EXPECT_TRUE(parse_query("", q));
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(parse_query("limit", q));
  EXPECT_FALSE(parse_query("=5", q));
  EXPECT_FALSE(parse_query("a=1&&b=2", q));
}

}  // namespace
}  // namespace dripgate::control
