// Command line: own options before `--`, EAL arguments after it (appended to dataplane.eal, or
// replacing it with --eal-replace), overrides applied to the config.
#include "dataplane/args.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dripgate::dataplane {
namespace {

ParseOutcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dripgate-dataplane");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

TEST(Args, SplitsAtDoubleDashAndAppendsEalArgs) {
  auto r = parse({"--rate-pps", "5000", "--duration", "2", "--", "--file-prefix=x", "--check"});
  ASSERT_TRUE(r.options);
  EXPECT_FALSE(r.options->check);  // after `--`: for the EAL, not ours
  EXPECT_EQ(r.options->eal_extra, (std::vector<std::string>{"--file-prefix=x", "--check"}));
  config::Dataplane dp;
  dp.eal = {"-l", "0-1"};
  EXPECT_EQ(eal_args(*r.options, dp, "p"),
            (std::vector<std::string>{"p", "-l", "0-1", "--file-prefix=x", "--check"}));
  apply_overrides(*r.options, dp);
  EXPECT_EQ(dp.drip.rate_pps, 5000);
  EXPECT_EQ(r.options->duration_s, 2);
}

TEST(Args, EalReplaceDropsTheConfigList) {
  auto r = parse({"--eal-replace", "--", "-l", "2-3"});
  ASSERT_TRUE(r.options);
  config::Dataplane dp;
  dp.eal = {"-l", "0-1", "--vdev=net_null0"};
  EXPECT_EQ(eal_args(*r.options, dp, "p"), (std::vector<std::string>{"p", "-l", "2-3"}));
}

TEST(Args, OverridesOnlyWhatIsGiven) {
  auto r = parse({"--control-socket", "/tmp/x.sock", "--rx-lcore", "2,4", "--drip-lcore", "3",
                  "--batch", "4"});
  ASSERT_TRUE(r.options);
  config::Dataplane dp;
  dp.drip.rate_pps = 7;
  apply_overrides(*r.options, dp);
  EXPECT_EQ(dp.control_socket, "/tmp/x.sock");
  EXPECT_EQ(dp.rx_lcores, (std::vector<unsigned>{2, 4}));
  EXPECT_EQ(dp.drip_lcore, 3u);
  EXPECT_EQ(dp.drip.batch, 4u);
  EXPECT_EQ(dp.drip.rate_pps, 7);
}

TEST(Args, BadArgumentsFailWithoutOptions) {
  EXPECT_FALSE(parse({"--rate-pps", "-1"}).options);
  EXPECT_FALSE(parse({"--config", "/nonexistent/dripgate.yaml"}).options);
  EXPECT_FALSE(parse({"--no-such-flag"}).options);
  auto r = parse({"--batch", "0"});
  EXPECT_FALSE(r.options);
  EXPECT_NE(r.exit_code, 0);
  auto h = parse({"--help"});
  EXPECT_FALSE(h.options);
  EXPECT_EQ(h.exit_code, 0);
}

}  // namespace
}  // namespace dripgate::dataplane
