// Envoy descriptors -> one admission, and an admission's result -> the per-descriptor statuses.
#include "control/rls/rls_mapping.h"

#include <gtest/gtest.h>

namespace dripgate::control::rls {
namespace {

const Domains kDomains = {
    {"dripgate",
     {{"tenant", "tenant"},
      {"user", "user"},
      {"api_key", "api_key"},
      {"client_ip", "ip"},
      {"remote_address", "ip"},
      {"model", "model"},
      {"tool", "tool"}}},
    {"edge", {{"x-tenant-id", "tenant"}, {"x-org", "tenant"}, {"x-model", "model"}}},
};

Descriptor desc(std::vector<Entry> entries) {
  return Descriptor{std::move(entries), std::nullopt};
}

// The problem's text, or "ok".
std::string problem(const Request& req) {
  Mapped m;
  auto p = map_request(kDomains, req, m);
  if (!p) return "ok";
  return std::string(p->kind == Problem::Kind::kUnknown ? "unknown " : "invalid ") + p->str();
}

TEST(RlsMapping, EntriesOfAllDescriptorsFormOneAdmission) {
  Request req{"dripgate",
              {desc({{"tenant", "acme"}}), desc({{"tenant", "acme"}, {"model", "llama"}}),
               desc({{"user", "u1"}, {"api_key", "k1"}, {"tool", "search"}})},
              300};
  Mapped m;
  ASSERT_FALSE(map_request(kDomains, req, m));
  EXPECT_EQ(m.admit.tenant, "acme");
  EXPECT_EQ(m.admit.model, "llama");
  EXPECT_EQ(m.admit.user, "u1");
  EXPECT_EQ(m.admit.api_key, "k1");
  EXPECT_EQ(m.admit.tool, "search");
  EXPECT_EQ(m.admit.tokens, 300);  // hits_addend is the token estimate
  EXPECT_TRUE(m.admit.request_id.empty());
  ASSERT_EQ(m.gates.size(), 3u);
  EXPECT_EQ(m.gates[0], (std::vector<std::string>{"tenant"}));
  EXPECT_EQ(m.gates[1], (std::vector<std::string>{"tenant", "model"}));
  EXPECT_EQ(m.gates[2], (std::vector<std::string>{"user", "api_key", "tool"}));
}

TEST(RlsMapping, ConfiguredKeysNameGates) {
  Mapped m;
  ASSERT_FALSE(map_request(
      kDomains, Request{"edge", {desc({{"x-tenant-id", "acme"}, {"x-model", "m"}})}, 0}, m));
  EXPECT_EQ(m.admit.tenant, "acme");
  EXPECT_EQ(m.admit.model, "m");
  EXPECT_EQ(m.admit.tokens, 0);  // no hits_addend: no token estimate, as an admit without tokens
  // Two keys for one gate agree, or the request is refused.
  EXPECT_EQ(problem({"edge", {desc({{"x-tenant-id", "a"}}), desc({{"x-org", "a"}})}, 0}), "ok");
  EXPECT_EQ(problem({"edge", {desc({{"x-tenant-id", "a"}}), desc({{"x-org", "b"}})}, 0}),
            "invalid descriptors[1].entries[0].value: the tenant is already 'a' "
            "(descriptors[0].entries[0])");
}

TEST(RlsMapping, UnknownDomainsAndKeysAreReportedAsSuch) {
  EXPECT_EQ(problem({"other", {desc({{"tenant", "a"}})}, 0}),
            "unknown domain: unknown domain 'other'");
  EXPECT_EQ(problem({"dripgate", {desc({{"tenant", "a"}, {"path", "/v1"}})}, 0}),
            "unknown descriptors[0].entries[1].key: unknown descriptor key 'path' in domain "
            "'dripgate' (known: api_key, client_ip, model, remote_address, tenant, tool, user)");
  // The built-in keys are not known in a domain that does not list them.
  EXPECT_EQ(problem({"edge", {desc({{"tenant", "a"}})}, 0}),
            "unknown descriptors[0].entries[0].key: unknown descriptor key 'tenant' in domain "
            "'edge' (known: x-model, x-org, x-tenant-id)");
}

TEST(RlsMapping, MalformedRequestsNameTheField) {
  EXPECT_EQ(problem({"", {desc({{"tenant", "a"}})}, 0}), "invalid domain: required");
  EXPECT_EQ(problem({"dripgate", {}, 0}), "invalid descriptors: required");
  EXPECT_EQ(problem({"dripgate", {desc({{"tenant", "a"}}), desc({})}, 0}),
            "invalid descriptors[1].entries: required");
  EXPECT_EQ(problem({"dripgate", {desc({{"", "a"}})}, 0}),
            "invalid descriptors[0].entries[0].key: required");
  EXPECT_EQ(problem({"dripgate", {desc({{"tenant", "a b"}})}, 0}),
            "invalid descriptors[0].entries[0].value: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(problem({"dripgate", {desc({{"tenant", ""}})}, 0}),
            "invalid descriptors[0].entries[0].value: must match [A-Za-z0-9._-]{1,64}");
  EXPECT_EQ(problem({"dripgate", {desc({{"model", "m"}})}, 0}),
            "invalid descriptors: no entry names the tenant (its keys in domain 'dripgate': "
            "tenant)");
  Request big{"dripgate", {Descriptor{{{"tenant", "a"}}, uint64_t{1} << 51}}, 0};
  EXPECT_EQ(problem(big), "invalid descriptors.hits_addend: too large");
}

// Envoy's remote_address action (descriptor key "remote_address") or a client_ip entry: the
// admission's client_ip, checked as an address, not as an id.
TEST(RlsMapping, TheClientAddressIsTheAdmissionsClientIp) {
  for (const char* key : {"client_ip", "remote_address"}) {
    Mapped m;
    ASSERT_FALSE(map_request(
        kDomains, Request{"dripgate", {desc({{"tenant", "a"}, {key, "2001:db8::5"}})}, 0}, m))
        << key;
    EXPECT_EQ(m.admit.client_ip, "2001:db8::5");
    EXPECT_EQ(m.gates[0], (std::vector<std::string>{"tenant", "ip"}));
  }
  // Both names for one client agree, also written differently; two clients do not.
  EXPECT_EQ(problem({"dripgate",
                     {desc({{"tenant", "a"}, {"remote_address", "192.0.2.1"}}),
                      desc({{"client_ip", "::ffff:192.0.2.1"}})},
                     0}),
            "ok");
  EXPECT_EQ(problem({"dripgate",
                     {desc({{"tenant", "a"}, {"remote_address", "192.0.2.1"}}),
                      desc({{"client_ip", "192.0.2.2"}})},
                     0}),
            "invalid descriptors[1].entries[0].value: the ip is already '192.0.2.1' "
            "(descriptors[0].entries[1])");
  for (const char* bad : {"192.0.2.300", "", "client-7", "[::1]", "10.0.0.1:443"})
    EXPECT_EQ(problem({"dripgate", {desc({{"tenant", "a"}, {"remote_address", bad}})}, 0}),
              "invalid descriptors[0].entries[1].value: must be an IPv4 or IPv6 address")
        << bad;
}

TEST(RlsMapping, ADescriptorsOwnCostWins) {
  Request req{
      "dripgate",
      {Descriptor{{{"tenant", "a"}}, 40}, Descriptor{{{"model", "m"}}, 70}, desc({{"user", "u"}})},
      5};
  Mapped m;
  ASSERT_FALSE(map_request(kDomains, req, m));
  EXPECT_EQ(m.admit.tokens, 70);
}

Remaining gate(std::string name, double value, double limit, int64_t reset_s) {
  return Remaining{std::move(name), value, limit, 10, reset_s};
}

TEST(RlsMapping, StatusesReportTheRefusingGateOrTheTightest) {
  Mapped m;
  ASSERT_FALSE(map_request(
      kDomains,
      Request{
          "dripgate", {desc({{"tenant", "a"}}), desc({{"user", "u"}}), desc({{"model", "m"}})}, 1},
      m));
  AdmitResult ok;
  ok.outcome = Outcome::kAllowed;
  ok.remaining = {gate("tenant", 4.5, 5, 1), gate("quota", 900, 1000, 86400),
                  gate("user", 1.25, 2, 1)};
  auto s = statuses(m, ok);
  ASSERT_EQ(s.size(), 3u);
  // The tenant descriptor reports its tightest gate (the bucket, 4 left, not the quota's 900).
  EXPECT_FALSE(s[0].over_limit);
  EXPECT_EQ(s[0].gate, "tenant");
  EXPECT_EQ(s[0].remaining, 4);
  EXPECT_EQ(s[0].limit, 5);
  EXPECT_EQ(s[1].gate, "user");
  EXPECT_EQ(s[1].remaining, 1);
  EXPECT_EQ(s[2].gate, "");  // the model gate's level is not in the result: nothing to report

  AdmitResult refused = ok;
  refused.outcome = Outcome::kRefused;
  refused.gate = "quota";
  refused.retry_after_ms = 2500;
  refused.remaining[1].value = 0;
  s = statuses(m, refused);
  EXPECT_TRUE(s[0].over_limit);
  EXPECT_EQ(s[0].gate, "quota");
  EXPECT_EQ(s[0].limit, 1000);
  EXPECT_EQ(s[0].remaining, 0);
  EXPECT_EQ(s[0].reset_s, 3);  // until a retry can pass, rounded up
  EXPECT_FALSE(s[1].over_limit);
  EXPECT_FALSE(s[2].over_limit);

  // A global gate refused before it was counted: over the limit, with no numbers of its own.
  refused.gate = "model";
  s = statuses(m, refused);
  EXPECT_FALSE(s[0].over_limit);
  EXPECT_TRUE(s[2].over_limit);
  EXPECT_EQ(s[2].gate, "model");
  EXPECT_EQ(s[2].limit, 0);

  // The total gate, which every admission passes, is over the limit where the tenant is named.
  refused.gate = "total";
  refused.remaining.push_back(gate("total", 0.5, 100, 1));
  s = statuses(m, refused);
  EXPECT_TRUE(s[0].over_limit);
  EXPECT_EQ(s[0].gate, "total");
  EXPECT_EQ(s[0].limit, 100);
  EXPECT_FALSE(s[1].over_limit);
  EXPECT_FALSE(s[2].over_limit);
}

// The global ip gate (per address across tenants) is over the limit where the address is named.
TEST(RlsMapping, TheGlobalIpGateIsReportedOnTheAddress) {
  Mapped m;
  ASSERT_FALSE(map_request(
      kDomains,
      Request{"dripgate", {desc({{"tenant", "a"}}), desc({{"client_ip", "192.0.2.9"}})}, 1}, m));
  AdmitResult refused;
  refused.outcome = Outcome::kRefused;
  refused.gate = "global_ip";
  refused.retry_after_ms = 1000;
  refused.remaining = {gate("tenant", 4.5, 5, 1), gate("global_ip", 0.5, 3, 2)};
  auto s = statuses(m, refused);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_FALSE(s[0].over_limit);
  EXPECT_TRUE(s[1].over_limit);
  EXPECT_EQ(s[1].gate, "global_ip");
  EXPECT_EQ(s[1].limit, 3);
}

}  // namespace
}  // namespace dripgate::control::rls
