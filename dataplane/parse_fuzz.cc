// libFuzzer target over parse() + Classifier::classify() (+ the CIDR parser on the same bytes),
// and over the inline IPv4 parser and classify_ipv4(), which must agree with them.
// Run: tools/fuzz.sh parse 60 dataplane/parse_fuzz.cc dataplane/parse.cc dataplane/classify.cc
// libFuzzer hands us a heap buffer of exactly `size` bytes, so ASan flags any overread.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "dataplane/classify.h"
#include "dataplane/parse.h"

namespace {

using dripgate::dataplane::Classifier;
using dripgate::dataplane::ParsedPacket;
using dripgate::dataplane::ParseStatus;

const Classifier& classifier() {
  static const Classifier c = [] {
    std::vector<dripgate::config::Class> classes(3);
    classes[0].name = "default";
    classes[1].name = "gold";
    classes[2].name = "silver";
    std::vector<dripgate::config::Rule> rules(6);
    rules[0].src = "10.1.0.0/16";
    rules[0].cls = "gold";
    rules[1].dst = "2001:db8::/32";
    rules[1].dscp = 46;
    rules[1].cls = "silver";
    rules[2].vlan = 100;
    rules[2].cls = "gold";
    rules[3].src = "::/0";
    rules[3].dst = "fe80::/10";
    rules[3].cls = "default";
    rules[4].dscp = 10;
    rules[4].vlan = 0;
    rules[4].cls = "silver";
    rules[5].dst = "192.168.0.0/24";
    rules[5].cls = "silver";
    auto r = Classifier::compile(rules, classes);
    if (!r.classifier) abort();
    return *r.classifier;
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > UINT32_MAX) return 0;
  ParsedPacket p;
  const ParseStatus s = dripgate::dataplane::parse(data, static_cast<uint32_t>(size), &p);
  if (s != p.status || static_cast<size_t>(s) >= dripgate::dataplane::kParseStatusCount) abort();
  if (p.frame_len != size) abort();
  if (s == ParseStatus::kOk) {
    // Offsets point inside the frame; the key's padding is defined.
    if (p.l3_offset >= size || p.l4_offset >= size) abort();
    if (p.l4_offset != 0 && p.l4_offset <= p.l3_offset) abort();
    if (p.tuple.pad[0] != 0 || p.tuple.pad[1] != 0) abort();
    if (p.vlan_count > 2 || p.vlan > 4095 || p.dscp > 63) abort();
    const int c = classifier().classify(p);
    if (c < Classifier::kNoMatch || c > 2) abort();
  }
  dripgate::dataplane::Ipv4Key k;
  uint8_t dscp = 0;
  if (dripgate::dataplane::parse_ipv4_fast(data, static_cast<uint32_t>(size), &k, &dscp)) {
    // Only frames parse() takes as untagged, unfragmented IPv4 with the same key.
    if (s != ParseStatus::kOk || p.tuple.l3 != dripgate::dataplane::L3::kIpv4) abort();
    if (p.vlan_count != 0 || p.fragment || p.dscp != dscp) abort();
    const dripgate::dataplane::Ipv4Key want = dripgate::dataplane::to_ipv4_key(p.tuple);
    if (std::memcmp(&k, &want, sizeof(k)) != 0) abort();
    if (classifier().classify_ipv4(k.src, k.dst, dscp) != classifier().classify(p)) abort();
  }
  // The inline non-IP test: only frames parse() takes as not IP.
  if (dripgate::dataplane::is_non_ip_fast(data, static_cast<uint32_t>(size)) &&
      s != ParseStatus::kNotIp)
    abort();
  // The CIDR parser sees the same bytes as text.
  (void)dripgate::dataplane::parse_prefix(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
