#include "common/prom_writer.h"

#include <gtest/gtest.h>

#include <limits>

namespace dripgate::common {
namespace {

TEST(PromWriter, FamiliesSamplesAndEscapes) {
  PromWriter w;
  w.family("x_total", "counter", "Things\\counted\nhere.");
  w.sample("x_total", {{"a", "1"}, {"b", "q\"u\\o\nte"}}, uint64_t{18446744073709551615u});
  w.sample("x_total", {{"a", ""}}, 0.5);  // an empty label is no label
  EXPECT_EQ(w.text(),
            "# HELP x_total Things\\\\counted\\nhere.\n# TYPE x_total counter\n"
            "x_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 18446744073709551615\n"
            "x_total 0.5\n");
}

TEST(PromWriter, Numbers) {
  EXPECT_EQ(PromWriter::number(0), "0");
  EXPECT_EQ(PromWriter::number(1e-6), "1e-06");
  EXPECT_EQ(PromWriter::number(0.1), "0.1");
  // %g style, as Prometheus's client libraries write: fixed down to 1e-4, then exponent.
  EXPECT_EQ(PromWriter::number(0.0001), "0.0001");
  EXPECT_EQ(PromWriter::number(0.0025), "0.0025");
  EXPECT_EQ(PromWriter::number(1e-5), "1e-05");
  EXPECT_EQ(PromWriter::number(0.123456789012), "0.123456789012");
  EXPECT_EQ(PromWriter::number(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PromWriter::number(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(PromWriter::number(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(PromWriter, Histogram) {
  PromWriter w;
  w.histogram("h_seconds", {{"iface", "eth0"}}, {0.001, 0.01}, {2, 5}, 0.25, 7);
  EXPECT_EQ(w.text(),
            "h_seconds_bucket{iface=\"eth0\",le=\"0.001\"} 2\n"
            "h_seconds_bucket{iface=\"eth0\",le=\"0.01\"} 5\n"
            "h_seconds_bucket{iface=\"eth0\",le=\"+Inf\"} 7\n"
            "h_seconds_sum{iface=\"eth0\"} 0.25\n"
            "h_seconds_count{iface=\"eth0\"} 7\n");
}

}  // namespace
}  // namespace dripgate::common
