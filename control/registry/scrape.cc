#include "control/registry/scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

namespace dripgate::control::scrape {

namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset(int next = -1) {
    if (fd >= 0) ::close(fd);
    fd = next;
  }
};

Result fail(Failure f, std::string error) {
  Result r;
  r.failure = f;
  r.error = std::move(error);
  return r;
}

// Waits until fd is ready for `events`; false at the deadline or on a cancel (*why says which).
bool wait_ready(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* cancel,
                const char*& why) {
  for (;;) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return why = "cancelled", false;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return why = "timed out", false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return why = "poll failed", false;
  }
}

// A connected non-blocking socket to url, or a failure.
std::optional<Result> connect_to(const common::HttpUrl& url, Clock::time_point deadline,
                                 const std::atomic<bool>* cancel, Fd& sock) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(Failure::kConnect, "cannot resolve " + url.host + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  std::string error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    sock.reset(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (sock.fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    if (::connect(sock.fd, a->ai_addr, a->ai_addrlen) == 0) return std::nullopt;
    if (errno != EINPROGRESS) {
      error = std::string("connect: ") + std::strerror(errno);
      continue;
    }
    const char* why = nullptr;
    if (!wait_ready(sock.fd, POLLOUT, deadline, cancel, why))
      return fail(Failure::kTimeout, std::string("connect: ") + why);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return std::nullopt;
    error = std::string("connect: ") + std::strerror(err);
  }
  return fail(Failure::kConnect, error);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The answer's head: its status and framing.
struct Head {
  int status = 0;
  std::optional<size_t> length;
  bool chunked = false;
  size_t size = 0;  // bytes of the head, blank line included
};

// The head of `in` once complete (nullopt: not yet); a malformed one sets *why.
std::optional<Head> parse_head(std::string_view in, std::string& why) {
  size_t end = in.find("\r\n\r\n");
  if (end == std::string_view::npos) return std::nullopt;
  Head h;
  h.size = end + 4;
  std::string_view head = in.substr(0, end);
  size_t eol = head.find("\r\n");
  std::string_view status = head.substr(0, eol);
  if (!status.starts_with("HTTP/1.") || status.size() < 12 || status[8] != ' ' ||
      std::from_chars(status.data() + 9, status.data() + 12, h.status).ptr != status.data() + 12) {
    why = "not an HTTP answer";
    return std::nullopt;
  }
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
    if (iequals(name, "content-length")) {
      size_t n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || value.empty()) {
        why = "bad Content-Length";
        return std::nullopt;
      }
      h.length = n;
    } else if (iequals(name, "transfer-encoding")) {
      h.chunked = iequals(value, "chunked");
    }
  }
  return h;
}

// Reads the answer into `in` until the body is complete or the peer closes.
std::optional<Result> read_answer(int fd, Clock::time_point deadline, size_t max_body,
                                  const std::atomic<bool>* cancel, std::string& in, Head& head) {
  std::string why;
  std::optional<Head> h;
  char buf[65536];
  for (;;) {
    if (!h && !(h = parse_head(in, why))) {
      if (!why.empty()) return fail(Failure::kHttp, why);
      if (in.size() > kMaxHeadBytes) return fail(Failure::kHttp, "head over 16 KiB");
    }
    if (h && h->length && *h->length > max_body)
      return fail(Failure::kTooLarge, "Content-Length " + std::to_string(*h->length));
    if (h && h->length && !h->chunked && in.size() >= h->size + *h->length) break;
    // Room for a chunked body's framing beside the body itself.
    if (h && in.size() - h->size > max_body + max_body / 8 + 4096)
      return fail(Failure::kTooLarge, "body over " + std::to_string(max_body) + " bytes");
    const char* w = nullptr;
    if (!wait_ready(fd, POLLIN, deadline, cancel, w))
      return fail(Failure::kTimeout, std::string("answer: ") + w);
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return fail(Failure::kConnect, std::string("recv: ") + std::strerror(errno));
    }
    in.append(buf, static_cast<size_t>(n));
  }
  if (!h) return fail(Failure::kHttp, "closed before the head was complete");
  head = *h;
  return std::nullopt;
}

}  // namespace

std::string_view failure_name(Failure f) {
  switch (f) {
    case Failure::kNone:
      return "";
    case Failure::kConnect:
      return "connect";
    case Failure::kTimeout:
      return "timeout";
    case Failure::kHttp:
      return "http";
    case Failure::kTooLarge:
      return "too_large";
  }
  return "";
}

bool dechunk(std::string_view in, size_t max_body, std::string& out) {
  out.clear();
  for (;;) {
    size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    std::string_view size_line = in.substr(0, eol);
    size_line = size_line.substr(0, size_line.find(';'));  // chunk extensions
    size_t n = 0;
    auto [p, ec] = std::from_chars(size_line.data(), size_line.data() + size_line.size(), n, 16);
    if (ec != std::errc() || p != size_line.data() + size_line.size() || size_line.empty())
      return false;
    in.remove_prefix(eol + 2);
    if (n == 0) return true;  // trailers, if any, are not needed
    if (n > max_body - std::min(max_body, out.size()) || in.size() < n + 2 ||
        in.substr(n, 2) != "\r\n")
      return false;
    out.append(in.substr(0, n));
    in.remove_prefix(n + 2);
  }
}

Result http_get(const common::HttpUrl& url, std::chrono::milliseconds timeout, size_t max_body,
                const std::atomic<bool>* cancel) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Fd sock;
  if (auto failed = connect_to(url, deadline, cancel, sock)) return std::move(*failed);
  const std::string request = "GET " + url.target +
                              " HTTP/1.0\r\nHost: " + common::http_host_header(url) +
                              "\r\nAccept: text/plain;version=0.0.4\r\nUser-Agent: "
                              "dripgate-control\r\nConnection: close\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    const char* why = nullptr;
    if (!wait_ready(sock.fd, POLLOUT, deadline, cancel, why))
      return fail(Failure::kTimeout, std::string("request: ") + why);
    ssize_t n = ::send(sock.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return fail(Failure::kConnect, std::string("send: ") + std::strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string in;
  Head head;
  if (auto failed = read_answer(sock.fd, deadline, max_body, cancel, in, head))
    return std::move(*failed);
  if (head.status != 200) return fail(Failure::kHttp, "status " + std::to_string(head.status));
  Result r;
  std::string_view body = std::string_view(in).substr(head.size);
  if (head.chunked) {
    if (!dechunk(body, max_body, r.body)) return fail(Failure::kHttp, "bad chunked body");
    return r;
  }
  if (head.length && body.size() < *head.length)
    return fail(Failure::kHttp, "closed before Content-Length was read");
  if (body.size() > max_body)
    return fail(Failure::kTooLarge, "body over " + std::to_string(max_body) + " bytes");
  r.body = std::string(head.length ? body.substr(0, *head.length) : body);
  return r;
}

}  // namespace dripgate::control::scrape
