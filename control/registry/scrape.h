// One HTTP GET of a backend's metrics endpoint (a model gate's saturation, saturation_sync.h),
// bounded in time and memory: the whole exchange (connect, request, answer) within `timeout`,
// the body at most `max_body` bytes (a huge or endless body is cut, not read on), and a stop
// asked for by `cancel` honoured within 50 ms. HTTP/1.0 with `Connection: close`: the body
// ends at Content-Length or at the close; a chunked one (which an HTTP/1.0 request should not
// get) is decoded too. Name resolution is getaddrinfo's, blocking, on the caller's thread (the
// scraper's own: nobody else waits on it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/http_url.h"

namespace dripgate::control::scrape {

// The largest body read: a vLLM page is tens of KiB.
inline constexpr size_t kMaxBodyBytes = 4 << 20;
// The largest status line and headers.
inline constexpr size_t kMaxHeadBytes = 16 << 10;

enum class Failure {
  kNone,
  kConnect,   // not resolved, refused, unreachable, reset
  kTimeout,   // not answered in full within the timeout
  kHttp,      // not a 200, or not an HTTP answer
  kTooLarge,  // a body over max_body
};
// "connect", "timeout", "http", "too_large" (the metrics' `cause`); "" for kNone.
std::string_view failure_name(Failure f);

struct Result {
  Failure failure = Failure::kNone;
  std::string body;   // the decoded body (kNone)
  std::string error;  // what went wrong, for a log line
};

Result http_get(const common::HttpUrl& url, std::chrono::milliseconds timeout,
                size_t max_body = kMaxBodyBytes, const std::atomic<bool>* cancel = nullptr);

// A chunked body decoded into out; false when malformed or over max_body.
bool dechunk(std::string_view in, size_t max_body, std::string& out);

}  // namespace dripgate::control::scrape
