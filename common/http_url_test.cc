#include "common/http_url.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::common {
namespace {

TEST(HttpUrl, ParsesHostPortAndTarget) {
  EXPECT_EQ(parse_http_url("http://10.0.0.5:8000/metrics"),
            (HttpUrl{"10.0.0.5", 8000, "/metrics"}));
  EXPECT_EQ(parse_http_url("http://vllm-0.svc"), (HttpUrl{"vllm-0.svc", 80, "/"}));
  EXPECT_EQ(parse_http_url("http://[::1]:9/m?x=1"), (HttpUrl{"::1", 9, "/m?x=1"}));
  EXPECT_EQ(parse_http_url("http://h?x=1"), (HttpUrl{"h", 80, "/?x=1"}));
  EXPECT_EQ(http_host_header(*parse_http_url("http://[::1]:9/")), "[::1]:9");
  EXPECT_EQ(http_host_header(*parse_http_url("http://h/")), "h:80");
}

TEST(HttpUrl, SaysWhatIsWrong) {
  auto why = [](std::string_view u) {
    std::string w;
    EXPECT_FALSE(parse_http_url(u, &w)) << u;
    return w;
  };
  EXPECT_EQ(why("https://h/m"),
            "https is not supported: the endpoint is scraped over plain http://");
  EXPECT_EQ(why("ftp://h/m"), "expected http://host[:port][/path]");
  EXPECT_EQ(why("http://"), "missing host");
  EXPECT_EQ(why("http:///metrics"), "missing host");
  EXPECT_EQ(why("http://h:0/"), "port 0 is not a port to connect to");
  EXPECT_EQ(why("http://h:99999/"), "bad port '99999' (0 to 65535)");
  EXPECT_EQ(why("http://u:p@h/"), "user info ('user@host') is not supported");
  EXPECT_EQ(why("http://h/a b"),
            "expected printable ASCII without spaces (percent-encode the rest)");
  EXPECT_EQ(why("http://h/#x"), "a fragment ('#') is not sent");
  EXPECT_EQ(why("http://::1/"), "an IPv6 address must be in brackets, e.g. [::1]:6379");
  EXPECT_EQ(why("http://h/" + std::string(3000, 'a')), "longer than 2048 bytes");
}

}  // namespace
}  // namespace dripgate::common
