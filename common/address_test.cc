#include "common/address.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::common {
namespace {

TEST(Cidr, ParsesV4AndV6NetworksAndHosts) {
  auto n = parse_cidr("10.1.0.0/16");
  ASSERT_TRUE(n);
  EXPECT_FALSE(n->v6);
  EXPECT_EQ(n->prefix, 16);
  EXPECT_EQ(n->addr[0], 10);
  EXPECT_EQ(n->addr[1], 1);
  n = parse_cidr("2001:db8::/32");
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->v6);
  EXPECT_EQ(n->prefix, 32);
  EXPECT_EQ(parse_cidr("192.0.2.7")->prefix, 32);
  EXPECT_EQ(parse_cidr("::1")->prefix, 128);
}

TEST(Cidr, SaysWhatIsWrong) {
  std::string why;
  EXPECT_FALSE(parse_cidr("10.0.0.0/33", &why));
  EXPECT_EQ(why, "bad prefix length 33 (at most 32 for IPv4)");
  EXPECT_FALSE(parse_cidr("10.0.0.1/24", &why));
  EXPECT_EQ(why, "host bits set in '10.0.0.1/24' (the network is 10.0.0.0/24)");
  EXPECT_FALSE(parse_cidr("10.0.0/8", &why));
  EXPECT_EQ(why, "bad IPv4 address '10.0.0'");
  EXPECT_FALSE(parse_cidr("10.0.0.0/", &why));
  EXPECT_EQ(why, "bad prefix length ''");
  EXPECT_FALSE(parse_cidr(std::string_view("10.0.0.1\0x", 10), &why));
  EXPECT_EQ(why, "NUL byte in address");
}

TEST(Cidr, HostBitsAreRejectedClearedOrKeptAsAsked) {
  EXPECT_FALSE(parse_cidr("10.0.0.1/24", nullptr, HostBits::kReject));
  EXPECT_EQ(parse_cidr("10.0.0.1/24", nullptr, HostBits::kClear)->addr[3], 0);
  EXPECT_EQ(parse_cidr("10.0.0.1/24", nullptr, HostBits::kKeep)->addr[3], 1);
}

TEST(HostPort, SplitsNamesV4AndBracketedV6) {
  std::string host;
  std::optional<int> port;
  EXPECT_FALSE(split_host_port("cache.example:6380", true, host, port));
  EXPECT_EQ(host, "cache.example");
  EXPECT_EQ(port, 6380);
  port.reset();
  EXPECT_FALSE(split_host_port("[::1]", false, host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(port);
  EXPECT_EQ(split_host_port("h", true, host, port), "missing ':port'");
  EXPECT_EQ(split_host_port("::1:80", true, host, port),
            "an IPv6 address must be in brackets, e.g. [::1]:6379");
  EXPECT_EQ(split_host_port("300.1.1.1:80", true, host, port), "bad IPv4 address '300.1.1.1'");
  EXPECT_EQ(split_host_port("h:70000", true, host, port), "bad port '70000' (0 to 65535)");
  EXPECT_EQ(split_host_port("h:x", true, host, port), "bad port 'x' (0 to 65535)");
  EXPECT_EQ(split_host_port("h_x:1", true, host, port), "bad host 'h_x'");
  EXPECT_EQ(split_host_port("[::g]:1", true, host, port), "bad IPv6 address '::g'");
  EXPECT_EQ(split_host_port(":1", true, host, port), "missing host");
}

TEST(ClientIpKey, V4AsWrittenMappedV6AsV4OtherV6PerSlash64) {
  EXPECT_EQ(client_ip_key("203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(client_ip_key("::ffff:203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(client_ip_key("::FFFF:cb00:7107"), "203.0.113.7");
  EXPECT_EQ(client_ip_key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(client_ip_key("2001:0DB8:0001:0002:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  EXPECT_EQ(client_ip_key("2001:db8:1:3::1"), "2001:db8:1:3::/64");
  EXPECT_EQ(client_ip_key("::1"), "::/64");
  // IPv4-compatible (deprecated) and NAT64 addresses are IPv6 addresses like any other.
  EXPECT_EQ(client_ip_key("64:ff9b::203.0.113.7"), "64:ff9b::/64");
}

TEST(ClientIpKey, RejectsWhatIsNotOneAddress) {
  for (std::string_view bad :
       {"", " 10.0.0.1", "10.0.0.1 ", "10.0.0.256", "10.0.0", "010.0.0.1", "10.0.0.1/32",
        "fe80::1%eth0", "2001:db8::/64", "[::1]", "::g", "host.example", "1.2.3.4:80"})
    EXPECT_FALSE(client_ip_key(bad)) << bad;
  EXPECT_FALSE(client_ip_key(std::string_view("10.0.0.1\0junk", 13)));
  EXPECT_FALSE(client_ip_key(std::string(100, '1')));
}

}  // namespace
}  // namespace dripgate::common
