#include "ebpf/iat_filter.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>
#include <stdexcept>

#include "common/address.h"

namespace dripgate::ebpf {

Prefix Prefix::parse(std::string_view text) {
  std::string why;
  // Host bits are kept: str() echoes the address as given; to_bpf() masks it.
  const auto net = common::parse_cidr(text, &why, common::HostBits::kKeep);
  if (!net) throw std::invalid_argument("bad prefix '" + std::string(text) + "': " + why);
  Prefix p;
  p.family = net->v6 ? 6 : 4;
  p.addr = net->addr;
  p.len = net->prefix;
  return p;
}

std::string Prefix::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(len);
}

PortRange PortRange::parse(std::string_view text) {
  auto num = [&](std::string_view v) {
    unsigned n = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || n > 65535)
      throw std::invalid_argument("bad port in '" + std::string(text) + "'");
    return static_cast<uint16_t>(n);
  };
  PortRange r;
  if (auto dash = text.find('-'); dash != std::string_view::npos) {
    r.lo = num(text.substr(0, dash));
    r.hi = num(text.substr(dash + 1));
    if (r.lo > r.hi) throw std::invalid_argument("empty port range '" + std::string(text) + "'");
  } else {
    r.lo = r.hi = num(text);
  }
  return r;
}

iat_filter Filter::to_bpf() const {
  iat_filter f{};
  auto set_prefix = [](const Prefix& p, uint32_t* addr, uint32_t* mask) {
    std::array<uint8_t, 16> m{};
    for (unsigned i = 0; i < 16; ++i) {
      unsigned bits = p.len > i * 8 ? p.len - i * 8 : 0;
      m[i] = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff00u >> bits);
    }
    std::array<uint8_t, 16> a{};
    for (unsigned i = 0; i < 16; ++i) a[i] = p.addr[i] & m[i];
    // Byte arrays copied as words stay in network byte order, as the packet fields are.
    std::memcpy(addr, a.data(), 16);
    std::memcpy(mask, m.data(), 16);
    if (p.family == 4) {
      std::memset(addr + 1, 0, 12);
      std::memset(mask + 1, 0, 12);
    }
  };
  if (src) {
    set_prefix(*src, f.src_addr, f.src_mask);
    f.flags |= src->family == 4 ? IAT_F_SRC4 : IAT_F_SRC6;
  }
  if (dst) {
    set_prefix(*dst, f.dst_addr, f.dst_mask);
    f.flags |= dst->family == 4 ? IAT_F_DST4 : IAT_F_DST6;
  }
  if ((f.flags & (IAT_F_SRC4 | IAT_F_DST4)) && (f.flags & (IAT_F_SRC6 | IAT_F_DST6)))
    throw std::invalid_argument("source and destination prefixes of different IP families");
  if (src_port) {
    f.sport_lo = src_port->lo;
    f.sport_hi = src_port->hi;
    f.flags |= IAT_F_SPORT;
  }
  if (dst_port) {
    f.dport_lo = dst_port->lo;
    f.dport_hi = dst_port->hi;
    f.flags |= IAT_F_DPORT;
  }
  if (protocol) {
    f.protocol = *protocol;
    f.flags |= IAT_F_PROTO;
  }
  return f;
}

}  // namespace dripgate::ebpf
