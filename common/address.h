// Network addresses as people write them: CIDR prefixes (classification rules, probe filters)
// and host[:port] (listen addresses, Redis URLs). Parsing only; no YAML, no sockets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dripgate::common {

// The longest unix socket path (sizeof(sockaddr_un::sun_path) - 1).
constexpr size_t kSunPathMax = 107;

// An IPv4 or IPv6 network.
struct Cidr {
  bool v6 = false;
  std::array<uint8_t, 16> addr{};  // network byte order; IPv4 uses the first 4 bytes
  uint8_t prefix = 0;              // 0..32 (v4) or 0..128 (v6)

  bool operator==(const Cidr&) const = default;
};

// What parse_cidr does with address bits beyond the prefix length. The config rejects them (a
// typo in the address or the length); the dataplane classifier clears them (as iptables does);
// the probe keeps them so that its --src/--dst echo what the user wrote.
enum class HostBits { kReject, kClear, kKeep };

// Whether `addr` (a host or a network) lies inside `net`: the same family, and the prefix's bits
// of `net` equal `addr`'s.
bool cidr_contains(const Cidr& net, const Cidr& addr);

// "10.1.0.0/16", "2001:db8::/32"; an address without "/len" is a host (/32, /128). On failure
// returns nullopt and, when why is given, says what is wrong (bad address, prefix length, host
// bits set).
std::optional<Cidr> parse_cidr(std::string_view text, std::string* why = nullptr,
                               HostBits host_bits = HostBits::kReject);

// A client's address as a rate-limit key: what one client can hold. An IPv4 address as
// written by inet_ntop ("203.0.113.7"); an IPv4-mapped IPv6 address (::ffff:203.0.113.7) is
// that IPv4 address; any other IPv6 address is its /64 ("2001:db8:1:2::/64"), because a single
// host is commonly given a whole /64 (SLAAC, RFC 6177 assignments) and picks addresses in it
// at will. nullopt when text is not an IPv4 or IPv6 address (no zone, no prefix, no spaces).
std::optional<std::string> client_ip_key(std::string_view text);

// A DNS name as a host: letters, digits, '.' and '-', at most 253 bytes.
bool hostname_ok(std::string_view host);

// `host[:port]` or `[v6][:port]`; the port must be present when `need_port`. Sets host (without
// brackets) and port; returns why not.
std::optional<std::string> split_host_port(std::string_view text, bool need_port, std::string& host,
                                           std::optional<int>& port);

}  // namespace dripgate::common
