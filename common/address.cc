#include "common/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace dripgate::common {

bool cidr_contains(const Cidr& net, const Cidr& addr) {
  if (net.v6 != addr.v6 || addr.prefix < net.prefix) return false;
  const size_t whole = net.prefix / 8, rest = net.prefix % 8;
  if (!std::equal(net.addr.begin(), net.addr.begin() + whole, addr.addr.begin())) return false;
  const auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return rest == 0 || (net.addr[whole] & mask) == (addr.addr[whole] & mask);
}

std::optional<Cidr> parse_cidr(std::string_view text, std::string* why, HostBits host_bits) {
  auto fail = [&](std::string msg) -> std::optional<Cidr> {
    if (why) *why = std::move(msg);
    return std::nullopt;
  };
  std::string_view addr = text;
  std::optional<unsigned> prefix;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    std::string_view len = text.substr(slash + 1);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), v);
    if (len.empty() || ec != std::errc() || end != len.data() + len.size() || len.size() > 3)
      return fail("bad prefix length '" + std::string(len) + "'");
    prefix = v;
  }
  Cidr net;
  std::string a(addr);
  // inet_pton stops at a NUL, so "10.0.0.1\0junk" would pass as 10.0.0.1.
  if (a.find('\0') != std::string::npos) return fail("NUL byte in address");
  if (a.find(':') != std::string::npos) {
    net.v6 = true;
    if (inet_pton(AF_INET6, a.c_str(), net.addr.data()) != 1)
      return fail("bad IPv6 address '" + a + "'");
  } else if (inet_pton(AF_INET, a.c_str(), net.addr.data()) != 1) {
    return fail("bad IPv4 address '" + a + "'");
  }
  unsigned max = net.v6 ? 128 : 32;
  unsigned len = prefix.value_or(max);
  if (len > max)
    return fail("bad prefix length " + std::to_string(len) + " (at most " + std::to_string(max) +
                " for " + (net.v6 ? "IPv6" : "IPv4") + ")");
  net.prefix = static_cast<uint8_t>(len);
  if (host_bits == HostBits::kKeep) return net;
  Cidr masked = net;
  for (unsigned bit = len; bit < max; ++bit) masked.addr[bit / 8] &= ~(0x80u >> (bit % 8));
  if (host_bits == HostBits::kClear) return masked;
  // Host bits set usually means a typo in the address or the length; say so rather than guess.
  if (masked.addr != net.addr) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(net.v6 ? AF_INET6 : AF_INET, masked.addr.data(), buf, sizeof buf);
    return fail("host bits set in '" + std::string(text) + "' (the network is " + buf + "/" +
                std::to_string(len) + ")");
  }
  return net;
}

std::optional<std::string> client_ip_key(std::string_view text) {
  // INET6_ADDRSTRLEN - 1 is the longest literal; inet_pton needs a NUL-terminated copy, and a
  // NUL inside text must not cut it short.
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN || text.find('\0') != std::string_view::npos)
    return std::nullopt;
  const std::string s(text);
  unsigned char a[16];
  char out[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, s.c_str(), a) == 1)
    return std::string(inet_ntop(AF_INET, a, out, sizeof out));
  if (inet_pton(AF_INET6, s.c_str(), a) != 1) return std::nullopt;
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(std::begin(kMapped), std::end(kMapped), a))
    return std::string(inet_ntop(AF_INET, a + 12, out, sizeof out));
  std::fill(a + 8, a + 16, 0);
  return std::string(inet_ntop(AF_INET6, a, out, sizeof out)) + "/64";
}

bool hostname_ok(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-'))
      return false;
  return true;
}

std::optional<std::string> split_host_port(std::string_view s, bool need_port, std::string& host,
                                           std::optional<int>& port) {
  std::string_view rest;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos) return "missing ']' after the IPv6 address";
    host = std::string(s.substr(1, close - 1));
    if (host.find('/') != std::string::npos || host.find(':') == std::string::npos ||
        !parse_cidr(host))
      return "bad IPv6 address " + quote(host);
    rest = s.substr(close + 1);
  } else {
    auto colon = s.find(':');
    host = std::string(s.substr(0, colon));
    if (colon != std::string_view::npos && s.find(':', colon + 1) != std::string_view::npos)
      return "an IPv6 address must be in brackets, e.g. [::1]:6379";
    if (host.empty()) return "missing host";
    if (!hostname_ok(host)) return "bad host " + quote(host);
    // All digits and dots is meant as an IPv4 address, so it has to be one.
    if (host.find_first_not_of("0123456789.") == std::string::npos && !parse_cidr(host))
      return "bad IPv4 address " + quote(host);
    rest = colon == std::string_view::npos ? std::string_view() : s.substr(colon);
  }
  if (rest.empty()) {
    if (need_port) return "missing ':port'";
    return std::nullopt;
  }
  if (rest.front() != ':') return "unexpected " + quote(rest) + " after the host";
  rest.remove_prefix(1);
  int p = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), p);
  if (rest.empty() || ec != std::errc() || end != rest.data() + rest.size() || p < 0 || p > 65535)
    return "bad port " + quote(rest) + " (0 to 65535)";
  port = p;
  return std::nullopt;
}

}  // namespace dripgate::common
