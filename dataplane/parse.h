// Packet parsing for the fast path: Ethernet, 802.1Q/QinQ, IPv4, IPv6 (extension headers), TCP/UDP.
// Free of DPDK so it can be fuzzed and tested anywhere. parse() never allocates, never makes a
// syscall and never reads at or past data + len.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace dripgate::dataplane {

enum class L3 : uint8_t { kNone = 0, kIpv4 = 4, kIpv6 = 6 };

// The flow identity, and at the same time the flow-table key: every byte, padding included, is
// defined (zeroed), so it can be hashed and compared as 40 raw bytes. IPv4 addresses sit in the
// first 4 bytes of src/dst with the other 12 zero; `l3` keeps v4 and v6 keys apart.
struct FiveTuple {
  uint8_t src[16];
  uint8_t dst[16];
  uint16_t sport;  // host byte order; 0 when the protocol has no ports or for non-first fragments
  uint16_t dport;  // host byte order
  uint8_t proto;   // upper-layer protocol (IPv6: after the extension header chain)
  L3 l3;
  uint8_t pad[2];
};
static_assert(sizeof(FiveTuple) == 40);

// The flow-table key of an IPv4 flow: the same 5-tuple in 16 bytes, so the table hashes two
// words and compares one vector register per probe instead of 40 bytes. Addresses as on the
// wire (network byte order, the bytes FiveTuple holds), ports in host byte order; pad zeroed.
struct Ipv4Key {
  uint32_t src;
  uint32_t dst;
  uint16_t sport;
  uint16_t dport;
  uint8_t proto;
  uint8_t pad[3];
};
static_assert(sizeof(Ipv4Key) == 16);
static_assert(offsetof(Ipv4Key, sport) == 8 && offsetof(Ipv4Key, dport) == 10 &&
              offsetof(Ipv4Key, proto) == 12);

// t.l3 must be kIpv4.
inline Ipv4Key to_ipv4_key(const FiveTuple& t) noexcept {
  Ipv4Key k{};
  std::memcpy(&k.src, t.src, 4);
  std::memcpy(&k.dst, t.dst, 4);
  k.sport = t.sport;
  k.dport = t.dport;
  k.proto = t.proto;
  return k;
}

// Why a frame is not a parsed IP packet. Everything except kOk and kNotIp is a malformation that
// the fast path drops and counts under to_string(status).
enum class ParseStatus : uint8_t {
  kOk = 0,
  kNotIp,            // non-IP ethertype (ARP, LLDP, ...): passes through unshaped
  kTruncatedL2,      // shorter than an Ethernet header
  kTruncatedVlan,    // a VLAN tag announced but cut off
  kTooManyVlans,     // more than 2 VLAN tags
  kTruncatedIpv4,    // shorter than the IPv4 header, its IHL, or its total length
  kBadIpVersion,     // version nibble disagrees with the ethertype
  kBadIhl,           // IHL < 5
  kBadIpv4Len,       // total length < header length
  kTruncatedIpv6,    // shorter than 40 bytes or than 40 + payload length
  kBadIpv6ExtChain,  // extension header overruns the payload, misplaced hop-by-hop, or too many
  kTruncatedL4,      // IP payload too short for the TCP/UDP header
  kBadTcpOffset,     // TCP data offset < 5
  kCount,
};
inline constexpr size_t kParseStatusCount = static_cast<size_t>(ParseStatus::kCount);

// Stable names ("truncated-ipv4", ...), used as drop-cause counter labels.
const char* to_string(ParseStatus s) noexcept;

struct ParsedPacket {
  FiveTuple tuple;  // valid when status == kOk
  ParseStatus status;
  uint8_t vlan_count;  // 0, 1 or 2
  uint16_t vlan;       // outer VLAN id (12 bits); 0 when vlan_count == 0
  uint8_t dscp;        // 0..63
  uint8_t ecn;         // 0..3, the ECN field beside the DSCP (ecn.h)
  bool fragment;       // IP fragment, first or not (non-first ones carry no ports)
  uint16_t l3_offset;  // from the start of the frame
  uint16_t l4_offset;  // 0 when there is no L4 header (non-first fragment, ESP, ...)
  uint32_t frame_len;  // len passed to parse()
};

// Parses the frame at data[0, len). Fills every field of *out (tuple fully zeroed first) and
// returns out->status.
ParseStatus parse(const uint8_t* data, uint32_t len, ParsedPacket* out) noexcept;

// The common frame, parsed inline on the fast path: untagged Ethernet, IPv4 without options
// and unfragmented (DF may be set), UDP or TCP. True with *key and *dscp exactly as parse()
// would set the tuple and dscp (the frame parses kOk, no VLAN, not a fragment); false for
// every other frame, valid or not, which parse() then takes. Reads nothing at or past
// data + len.
inline bool parse_ipv4_fast(const uint8_t* data, uint32_t len, Ipv4Key* key,
                            uint8_t* dscp) noexcept {
  constexpr uint32_t kEth = 14, kIp = 20, kUdp = 8, kTcp = 20;
  if (len < kEth + kIp + kUdp) return false;
  const uint8_t* ip = data + kEth;
  const uint8_t* l4 = ip + kIp;
  uint32_t total;
  uint8_t proto, tos;
  if constexpr (std::endian::native == std::endian::little) {
    // The header as two words, tested with masks: the ethertype and version/IHL in one compare,
    // the fragment bits in another, instead of a load and a branch per byte.
    uint64_t a, f;
    std::memcpy(&a, data + 12, 8);  // ethertype, version/IHL, TOS, total length, ID
    std::memcpy(&f, ip + 6, 8);     // flags/fragment offset, TTL, protocol, checksum, ...
    // IPv4 (08 00), version 4 and IHL 5; more-fragments and the fragment offset clear.
    if ((a & 0xFFFFFF) != 0x450008 || (f & 0xFF3F) != 0) return false;
    total = __builtin_bswap16(static_cast<uint16_t>(a >> 32));
    proto = static_cast<uint8_t>(f >> 24);
    tos = static_cast<uint8_t>(a >> 24);
  } else {
    if (data[12] != 0x08 || data[13] != 0x00) return false;
    // Version 4 and IHL 5; more-fragments and the fragment offset clear.
    if (ip[0] != 0x45 || (ip[6] & 0x3F) != 0 || ip[7] != 0) return false;
    total = (uint32_t{ip[2]} << 8) | ip[3];
    proto = ip[9];
    tos = ip[1];
  }
  if (total > len - kEth) return false;  // nothing cut off
  if (proto == 17) {
    if (total < kIp + kUdp) return false;
  } else if (proto == 6) {
    if (total < kIp + kTcp) return false;
    const uint32_t data_offset = (l4[12] >> 4) * 4u;
    if (data_offset < kTcp || data_offset > total - kIp) return false;
  } else {
    return false;
  }
  if constexpr (std::endian::native == std::endian::little) {
    // Two 8-byte stores, as the key is read (the CRC, ClassCache, rte_hash's compare): a word
    // loaded across several smaller stores still in flight waits for them to retire. The ports
    // in host order from one load: byte-swapping the 4 bytes swaps each port's bytes and the
    // two ports, which the rotation puts back.
    uint64_t w[2];
    uint32_t ports;
    std::memcpy(&w[0], ip + 12, 8);  // source and destination, adjacent on the wire
    std::memcpy(&ports, l4, 4);
    w[1] = std::rotl(__builtin_bswap32(ports), 16) | uint64_t{proto} << 32;
    std::memcpy(key, w, sizeof(w));
  } else {
    std::memcpy(&key->src, ip + 12, 4);
    std::memcpy(&key->dst, ip + 16, 4);
    key->sport = static_cast<uint16_t>((l4[0] << 8) | l4[1]);
    key->dport = static_cast<uint16_t>((l4[2] << 8) | l4[3]);
    key->proto = proto;
    std::memset(key->pad, 0, sizeof(key->pad));
  }
  *dscp = tos >> 2;
  return true;
}

// The non-IP frame, recognised inline on the fast path: untagged Ethernet whose ethertype is
// none of IPv4, IPv6, 802.1Q and 802.1ad. True exactly when parse() would answer kNotIp without
// reading past the Ethernet header; false for every other frame (VLAN-tagged non-IP frames
// included), which parse() then takes. Spares a frame that passes or is shaped as non-IP the
// general parser's work. Reads nothing at or past data + len.
inline bool is_non_ip_fast(const uint8_t* data, uint32_t len) noexcept {
  if (len < 14) return false;
  // The four ethertypes' first bytes, 0x08, 0x86, 0x81 and 0x88, are bits 8, 6 and 1 of a
  // mask indexed by a byte's low six bits: a frame whose first byte has none of them (0x00,
  // say) is non-IP after one test instead of four compares.
  constexpr uint64_t kFirstBytes = (uint64_t{1} << (0x08 & 63)) | (uint64_t{1} << (0x86 & 63)) |
                                   (uint64_t{1} << (0x81 & 63)) | (uint64_t{1} << (0x88 & 63));
  if (((kFirstBytes >> (data[12] & 63)) & 1) == 0) return true;
  const uint16_t ether_type = static_cast<uint16_t>((data[12] << 8) | data[13]);
  return ether_type != 0x0800 && ether_type != 0x86DD && ether_type != 0x8100 &&
         ether_type != 0x88A8;
}

// Text address ("10.1.2.3", "2001:db8::1") to the tuple's 16-byte form. Not for the fast path.
bool parse_address(std::string_view text, L3* l3, uint8_t addr[16]);

// Builds a key from the control socket's flow description; nullopt when an address is invalid
// or the two addresses are of different families. Call it qualified (dataplane::make_tuple):
// with std::string arguments an unqualified call also finds std::make_tuple by ADL.
std::optional<FiveTuple> make_tuple(std::string_view src, uint16_t sport, std::string_view dst,
                                    uint16_t dport, uint8_t proto);

// "10.1.2.3:1234 -> 10.9.9.9:80 proto 6" for logs and test messages. Not for the fast path.
std::string format_tuple(const FiveTuple& t);

}  // namespace dripgate::dataplane
