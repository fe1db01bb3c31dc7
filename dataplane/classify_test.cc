#include "dataplane/classify.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dripgate::dataplane {
namespace {

std::vector<config::Class> classes(std::initializer_list<const char*> names) {
  std::vector<config::Class> out;
  for (const char* n : names) {
    config::Class c;
    c.name = n;
    out.push_back(c);
  }
  return out;
}

config::Rule rule(const std::string& cls_name) {
  config::Rule r;
  r.cls = cls_name;
  return r;
}

ParsedPacket packet(const char* src, const char* dst, uint8_t vlan_count = 0, uint16_t vlan = 0,
                    uint8_t dscp = 0) {
  ParsedPacket p;
  std::memset(&p, 0, sizeof(p));
  const auto t = dataplane::make_tuple(src, 1000, dst, 80, 6);
  EXPECT_TRUE(t.has_value()) << src << " " << dst;
  if (t) p.tuple = *t;
  p.vlan_count = vlan_count;
  p.vlan = vlan;
  p.dscp = dscp;
  return p;
}

Classifier compile_ok(const std::vector<config::Rule>& rules,
                      const std::vector<config::Class>& cls) {
  ClassifierCompileResult r = Classifier::compile(rules, cls);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.classifier.has_value());
  return r.classifier ? *r.classifier : Classifier();
}

std::string compile_error(const std::vector<config::Rule>& rules,
                          const std::vector<config::Class>& cls) {
  ClassifierCompileResult r = Classifier::compile(rules, cls);
  EXPECT_FALSE(r.classifier.has_value());
  return r.error;
}

TEST(ParsePrefix, Forms) {
  auto p = parse_prefix("10.1.0.0/16");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->l3, L3::kIpv4);
  EXPECT_EQ(p->len, 16);
  EXPECT_EQ(p->addr[0], 0x0A01000000000000ull);
  EXPECT_EQ(p->mask[0], 0xFFFF000000000000ull);
  EXPECT_EQ(p->mask[1], 0u);

  p = parse_prefix("10.1.2.3");  // bare address: host prefix
  ASSERT_TRUE(p);
  EXPECT_EQ(p->len, 32);

  p = parse_prefix("10.1.2.3/16");  // host bits cleared
  ASSERT_TRUE(p);
  EXPECT_EQ(p->addr[0], 0x0A01000000000000ull);

  p = parse_prefix("2001:db8::/32");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->l3, L3::kIpv6);
  EXPECT_EQ(p->mask[0], 0xFFFFFFFF00000000ull);

  p = parse_prefix("2001:db8::1:2/96");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->mask[1], 0xFFFFFFFF00000000ull);
  EXPECT_EQ(p->addr[1], 0u);

  p = parse_prefix("::/0");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->mask[0] | p->mask[1], 0u);

  for (const char* bad : {"", "/8", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/8x",
                          "10.0.0/8", "::/129", "foo", "10.0.0.0/0008", "10.0.0.0 /8"}) {
    EXPECT_FALSE(parse_prefix(bad)) << bad;
  }
}

TEST(Classify, CompileErrorsNameRuleAndField) {
  const auto cls = classes({"gold", "default"});
  config::Rule r = rule("silver");
  EXPECT_EQ(compile_error({rule("gold"), r}, cls), "classify[1].class: unknown class 'silver'");
  r = rule("gold");
  r.src = "10.0.0.0/33";
  EXPECT_EQ(compile_error({r}, cls), "classify[0].src: invalid CIDR '10.0.0.0/33'");
  r = rule("gold");
  r.dst = "nope";
  EXPECT_EQ(compile_error({r}, cls), "classify[0].dst: invalid CIDR 'nope'");
  r = rule("gold");
  r.vlan = 4096;
  EXPECT_EQ(compile_error({r}, cls), "classify[0].vlan: 4096 is not in 0..4095");
  r = rule("gold");
  r.dscp = 64;
  EXPECT_EQ(compile_error({r}, cls), "classify[0].dscp: 64 is not in 0..63");
}

TEST(Classify, EmptyRulesNeverMatch) {
  const Classifier c = compile_ok({}, classes({"default"}));
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2")), Classifier::kNoMatch);
}

TEST(Classify, SourcePrefixV4AndV6) {
  config::Rule v4 = rule("gold");
  v4.src = "10.1.0.0/16";
  config::Rule v6 = rule("silver");
  v6.src = "2001:db8:aa::/48";
  const Classifier c = compile_ok({v4, v6}, classes({"default", "gold", "silver"}));
  EXPECT_EQ(c.classify(packet("10.1.255.255", "192.0.2.1")), 1);
  EXPECT_EQ(c.classify(packet("10.1.0.0", "192.0.2.1")), 1);
  EXPECT_EQ(c.classify(packet("10.2.0.1", "192.0.2.1")), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("10.0.255.255", "192.0.2.1")), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("2001:db8:aa:ffff::1", "2001:db8::1")), 2);
  EXPECT_EQ(c.classify(packet("2001:db8:ab::1", "2001:db8::1")), Classifier::kNoMatch);
  // A v4 rule never matches a v6 packet whose first bytes look alike, and vice versa.
  EXPECT_EQ(c.classify(packet("a01:1::", "::1")), Classifier::kNoMatch);
}

TEST(Classify, V6PrefixBoundariesAcrossTheHalves) {
  for (int len : {1, 63, 64, 65, 127, 128}) {
    SCOPED_TRACE(len);
    config::Rule r = rule("gold");
    r.dst = "2001:db8:1:2:3:4:5:6/" + std::to_string(len);
    const Classifier c = compile_ok({r}, classes({"gold"}));
    EXPECT_EQ(c.classify(packet("::1", "2001:db8:1:2:3:4:5:6")), 0);
    // Flip the last bit inside the prefix: no match. Flip the first bit after it: match.
    uint8_t inside[16], outside[16];
    L3 l3;
    ASSERT_TRUE(parse_address("2001:db8:1:2:3:4:5:6", &l3, inside));
    std::memcpy(outside, inside, 16);
    inside[(len - 1) / 8] ^= static_cast<uint8_t>(0x80 >> ((len - 1) % 8));
    ParsedPacket p = packet("::1", "::2");
    std::memcpy(p.tuple.dst, inside, 16);
    EXPECT_EQ(c.classify(p), Classifier::kNoMatch);
    if (len < 128) {
      outside[len / 8] ^= static_cast<uint8_t>(0x80 >> (len % 8));
      std::memcpy(p.tuple.dst, outside, 16);
      EXPECT_EQ(c.classify(p), 0);
    }
  }
}

TEST(Classify, ZeroLengthPrefixMatchesItsFamilyOnly) {
  config::Rule r = rule("gold");
  r.src = "0.0.0.0/0";
  const Classifier c = compile_ok({r}, classes({"gold"}));
  EXPECT_EQ(c.classify(packet("203.0.113.9", "10.0.0.1")), 0);
  EXPECT_EQ(c.classify(packet("2001:db8::1", "2001:db8::2")), Classifier::kNoMatch);
}

TEST(Classify, VlanAndDscp) {
  config::Rule by_vlan = rule("gold");
  by_vlan.vlan = 100;
  config::Rule by_dscp = rule("silver");
  by_dscp.dscp = 46;
  config::Rule vlan0 = rule("bronze");
  vlan0.vlan = 0;
  const Classifier c = compile_ok({by_vlan, by_dscp, vlan0}, classes({"gold", "silver", "bronze"}));
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 1, 100)), 0);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 2, 100)), 0);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 1, 101)), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 0, 0, 46)), 1);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 0, 0, 45)), Classifier::kNoMatch);
  // VLAN 0 (priority tag) matches only tagged frames.
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 1, 0)), 2);
  EXPECT_EQ(c.classify(packet("10.0.0.1", "10.0.0.2", 0, 0)), Classifier::kNoMatch);
}

TEST(Classify, AllMatchersOfARuleMustMatch) {
  config::Rule r = rule("gold");
  r.src = "10.0.0.0/8";
  r.dst = "192.168.0.0/16";
  r.vlan = 7;
  r.dscp = 10;
  const Classifier c = compile_ok({r}, classes({"gold"}));
  EXPECT_EQ(c.classify(packet("10.1.1.1", "192.168.1.1", 1, 7, 10)), 0);
  EXPECT_EQ(c.classify(packet("11.1.1.1", "192.168.1.1", 1, 7, 10)), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("10.1.1.1", "192.169.1.1", 1, 7, 10)), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("10.1.1.1", "192.168.1.1", 1, 8, 10)), Classifier::kNoMatch);
  EXPECT_EQ(c.classify(packet("10.1.1.1", "192.168.1.1", 1, 7, 11)), Classifier::kNoMatch);
}

TEST(Classify, FirstMatchWins) {
  config::Rule narrow = rule("gold");
  narrow.src = "10.1.2.0/24";
  config::Rule wide = rule("default");
  wide.src = "10.0.0.0/8";
  config::Rule catch_all = rule("silver");  // no matcher: matches everything
  const auto cls = classes({"default", "gold", "silver"});
  const Classifier c = compile_ok({narrow, wide, catch_all}, cls);
  EXPECT_EQ(c.classify(packet("10.1.2.3", "1.1.1.1")), 1);
  EXPECT_EQ(c.classify(packet("10.1.3.3", "1.1.1.1")), 0);
  EXPECT_EQ(c.classify(packet("2001:db8::1", "2001:db8::2")), 2);
  const Classifier reversed = compile_ok({wide, narrow}, cls);
  EXPECT_EQ(reversed.classify(packet("10.1.2.3", "1.1.1.1")), 0);
}

// classify_ipv4 (untagged IPv4 on the inline path) answers as classify() for every such packet:
// rules with IPv6 prefixes or a VLAN are skipped, the others keep their order.
TEST(Classify, Ipv4PathMatchesClassify) {
  std::vector<config::Rule> rules;
  auto add = [&](const char* cls_name, const char* src, const char* dst, int dscp, int vlan) {
    config::Rule r = rule(cls_name);
    if (src) r.src = src;
    if (dst) r.dst = dst;
    if (dscp >= 0) r.dscp = static_cast<uint8_t>(dscp);
    if (vlan >= 0) r.vlan = static_cast<uint16_t>(vlan);
    rules.push_back(r);
  };
  add("a", "2001:db8::/32", nullptr, -1, -1);
  add("b", nullptr, nullptr, -1, 0);  // VLAN 0 never matches an untagged packet
  add("a", "10.1.0.0/16", nullptr, -1, -1);
  add("b", nullptr, "192.168.7.0/24", 46, -1);
  add("c", "10.2.3.4", "10.9.0.0/16", -1, -1);
  add("a", "0.0.0.0/0", "::/0", -1, -1);
  add("b", "10.128.0.0/9", nullptr, 10, -1);
  add("c", "0.0.0.0/1", nullptr, -1, -1);
  const Classifier c = compile_ok(rules, classes({"a", "b", "c"}));
  const char* srcs[] = {"10.1.2.3",  "10.2.3.4",    "10.200.0.1",
                        "127.0.0.1", "192.168.7.9", "200.1.1.1"};
  const char* dsts[] = {"192.168.7.1", "10.9.1.1", "8.8.8.8", "10.1.0.0"};
  std::mt19937 rng(3);
  for (const char* src : srcs) {
    for (const char* dst : dsts) {
      const uint8_t random_dscp = static_cast<uint8_t>(rng() % 64);
      for (const uint8_t dscp : {uint8_t{0}, uint8_t{10}, uint8_t{46}, random_dscp}) {
        const ParsedPacket p = packet(src, dst, 0, 0, dscp);
        uint32_t s4, d4;
        std::memcpy(&s4, p.tuple.src, 4);
        std::memcpy(&d4, p.tuple.dst, 4);
        EXPECT_EQ(c.classify_ipv4(s4, d4, dscp), c.classify(p))
            << src << " " << dst << " " << int{dscp};
      }
    }
  }
  const ParsedPacket p = packet("10.1.2.3", "8.8.8.8");
  uint32_t s4, d4;
  std::memcpy(&s4, p.tuple.src, 4);
  std::memcpy(&d4, p.tuple.dst, 4);
  EXPECT_EQ(c.classify_ipv4(s4, d4, 0), 0);
  EXPECT_EQ(Classifier().classify_ipv4(s4, d4, 0), Classifier::kNoMatch);
}

}  // namespace
}  // namespace dripgate::dataplane
