// DataplaneClient against a real unix stream socket served by this test (tests/line_peer.h: a
// peer that records lines and answers, or stays silent), driven by a real libevent loop.
#include "control/dataplane_client/dataplane_client.h"

#include <event2/event.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "control/metrics/metrics.h"
#include "tests/line_peer.h"

namespace dripgate::control {
namespace {

using json = nlohmann::json;
using testing::LinePeer;
using namespace std::chrono_literals;

class DataplaneClientTest : public ::testing::Test {
 protected:
  DataplaneClientTest() {
    char tmpl[] = "/tmp/dripgate-dpc-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/dp.sock";
    base_ = event_base_new();
  }
  ~DataplaneClientTest() override {
    event_base_free(base_);
    std::filesystem::remove_all(dir_);
  }
  // Runs the loop until `results` holds n answers (or `limit` passes).
  void run_until(const std::vector<std::string>& results, size_t n,
                 std::chrono::seconds limit = std::chrono::seconds(3)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (results.size() < n && std::chrono::steady_clock::now() < deadline)
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK), std::this_thread::sleep_for(1ms);
  }
  // Runs the loop until the call completes (or 3 s pass) and returns its result.
  template <typename Call>
  std::string complete(Call call) {
    std::string result;
    bool done = false;
    call([&](const std::string& r) {
      result = r;
      done = true;
    });
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!done && std::chrono::steady_clock::now() < deadline)
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK), std::this_thread::sleep_for(1ms);
    return done ? result : "<no result>";
  }

  Flow flow() const {
    Flow f;
    f.src = "10.0.0.1";
    f.dst = "10.0.0.2";
    f.sport = 1234;
    f.dport = 443;
    f.proto = 6;
    return f;
  }

  // The answer timeout of the tests that expect an answer: the peer is a thread of this
  // process, which a loaded machine can keep from answering within the daemon's 100 ms; these
  // tests are about what is answered, not when (the timeout has tests of its own).
  static constexpr int kAnswerMs = 2000;

  std::string dir_, path_;
  event_base* base_ = nullptr;
  Metrics metrics_;
};

TEST_F(DataplaneClientTest, TagAndUntagSpeakTheProtocol) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 120, "", done); }), "ok");
  EXPECT_TRUE(c.connected());
  EXPECT_EQ(complete([&](auto done) { c.untag(flow(), done); }), "ok");
  auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 2u);
  json f = {
      {"src", "10.0.0.1"}, {"sport", 1234}, {"dst", "10.0.0.2"}, {"dport", 443}, {"proto", 6}};
  EXPECT_EQ(lines[0], (json{{"op", "tag"}, {"flow", f}, {"class", "gold"}, {"ttl_s", 120}}));
  EXPECT_EQ(lines[1], (json{{"op", "untag"}, {"flow", f}}));
  EXPECT_EQ(metrics_.dataplane_tags().value({"ok"}), 1u);
  EXPECT_EQ(metrics_.dataplane_untags().value({"ok"}), 1u);
}

// Addresses are written as they are when they need no escape; anything else is escaped, so a
// line stays JSON whatever a Flow holds.
TEST_F(DataplaneClientTest, AFlowThatNeedsEscapingStillMakesAJsonLine) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  Flow f = flow();
  f.src = "10.0.0.1\"\\";
  EXPECT_EQ(complete([&](auto done) { c.tag(f, "gold", 120, "", done); }), "ok");
  const auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(lines[0].is_object());
  EXPECT_EQ(lines[0]["flow"]["src"], "10.0.0.1\"\\");
  EXPECT_EQ(lines[0]["flow"]["dst"], "10.0.0.2");
}

// The tags asked for in one pass of the loop leave as one line per class and ttl.
TEST_F(DataplaneClientTest, TagsOfOnePassLeaveAsOneLinePerClass) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  std::vector<std::string> results;
  auto record = [&](const std::string& r) { results.push_back(r); };
  Flow a = flow(), b = flow(), d = flow();
  b.sport = 1235;
  d.sport = 1236;
  c.tag(a, "gold", 120, "", record);
  c.tag(b, "gold", 120, "", record);
  c.tag(d, "silver", 120, "", record);
  run_until(results, 3);
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "ok"}));
  auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["class"], "gold");
  ASSERT_EQ(lines[0]["flows"].size(), 2u);
  EXPECT_EQ(lines[0]["flows"][1]["sport"], 1235);
  EXPECT_FALSE(lines[0].contains("flow"));
  EXPECT_EQ(lines[1]["class"], "silver");
  EXPECT_EQ(lines[1]["flow"]["sport"], 1236);  // one flow: the one-flow form
  EXPECT_EQ(metrics_.dataplane_tags().value({"ok"}), 3u);
}

// A tag carries the admitted tenant; one pass's tags leave as one line per class, ttl and tenant,
// and a tag without a tenant says none.
TEST_F(DataplaneClientTest, TagsOfOnePassLeaveAsOneLinePerTenant) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  std::vector<std::string> results;
  auto record = [&](const std::string& r) { results.push_back(r); };
  Flow a = flow(), b = flow(), d = flow(), e = flow();
  b.sport = 1235;
  d.sport = 1236;
  e.sport = 1237;
  c.tag(a, "gold", 120, "acme", record);
  c.tag(b, "gold", 120, "globex", record);
  c.tag(d, "gold", 120, "acme", record);
  c.tag(e, "gold", 120, "", record);
  run_until(results, 4);
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "ok", "ok"}));
  auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["tenant"], "acme");
  ASSERT_EQ(lines[0]["flows"].size(), 2u);
  EXPECT_EQ(lines[0]["flows"][0]["sport"], 1234);
  EXPECT_EQ(lines[0]["flows"][1]["sport"], 1236);
  EXPECT_EQ(lines[1]["tenant"], "globex");
  EXPECT_EQ(lines[1]["flow"]["sport"], 1235);
  EXPECT_FALSE(lines[2].contains("tenant")) << lines[2].dump();
  EXPECT_EQ(lines[2]["flow"]["sport"], 1237);
  // The dataplane's fast path reads the keys in this order: op, class, ttl_s, tenant, flows.
  const std::string raw = peer.raw_lines().at(0);
  EXPECT_EQ(raw.rfind(R"({"op":"tag","class":"gold","ttl_s":120,"tenant":"acme","flows":[)", 0), 0u)
      << raw;
}

// More lines in one pass than the socket holds: the first go straight into the socket, the rest
// wait in the bufferevent, and every line arrives whole and in order.
TEST_F(DataplaneClientTest, LinesBeyondWhatTheSocketHoldsArriveWholeAndInOrder) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  std::vector<std::string> results;
  auto record = [&](const std::string& r) { results.push_back(r); };
  DataplaneClient c(base_, path_, &metrics_, /*timeout_ms=*/5000);
  constexpr int kFlows = 20 * static_cast<int>(DataplaneClient::kMaxBatch);
  for (int i = 0; i < kFlows; ++i) {
    Flow f = flow();
    f.src = "2001:db8:aaaa:bbbb:cccc:dddd:" + std::to_string(1000 + i / 60000) + ":1";
    f.sport = static_cast<uint16_t>(i % 60000);
    c.tag(f, "gold", 120, "", record);
  }
  run_until(results, kFlows, 10s);
  ASSERT_EQ(results.size(), static_cast<size_t>(kFlows));
  EXPECT_EQ(std::count(results.begin(), results.end(), "ok"), kFlows);
  const auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 20u);
  int next = 0;
  for (const auto& line : lines) {
    ASSERT_TRUE(line.is_object());
    for (const auto& f : line["flows"]) EXPECT_EQ(f["sport"], next++ % 60000);
  }
  EXPECT_EQ(next, kFlows);
}

// A batch's slots are reused from pass to pass: a smaller later batch sends only its own flows.
TEST_F(DataplaneClientTest, ALaterSmallerBatchSendsOnlyItsOwnFlows) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  std::vector<std::string> results;
  auto record = [&](const std::string& r) { results.push_back(r); };
  for (int i = 0; i < 3; ++i) {
    Flow f = flow();
    f.sport = static_cast<uint16_t>(2000 + i);
    f.src = "2001:db8:aaaa:bbbb:cccc:dddd:eeee:" + std::to_string(i);  // past the short-string size
    c.tag(f, "gold", 120, "", record);
  }
  run_until(results, 3);
  Flow last = flow();
  last.sport = 3000;
  c.tag(last, "gold", 120, "", record);
  run_until(results, 4);
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "ok", "ok"}));
  auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_EQ(lines[0]["flows"].size(), 3u);
  EXPECT_EQ(lines[0]["flows"][2]["src"], "2001:db8:aaaa:bbbb:cccc:dddd:eeee:2");
  json f = {
      {"src", "10.0.0.1"}, {"sport", 3000}, {"dst", "10.0.0.2"}, {"dport", 443}, {"proto", 6}};
  EXPECT_EQ(lines[1], (json{{"op", "tag"}, {"flow", f}, {"class", "gold"}, {"ttl_s", 120}}));
}

// An untag sends the tags gathered in its pass first: it never overtakes its flow's tag.
TEST_F(DataplaneClientTest, AnUntagLeavesAfterTheTagsOfItsPass) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  std::vector<std::string> results;
  auto record = [&](const std::string& r) { results.push_back(r); };
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  Flow a = flow(), b = flow();
  b.sport = 1235;
  c.tag(a, "gold", 120, "", record);
  c.tag(b, "gold", 120, "", record);
  c.untag(a, record);
  run_until(results, 3);
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "ok"}));
  const auto lines = peer.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["op"], "tag");
  EXPECT_EQ(lines[0].value("flows", json::array()).size(), 2u);
  EXPECT_EQ(lines[1]["op"], "untag");
}

// A batch refused part way: the flows before `tagged` succeeded, the rest failed.
TEST_F(DataplaneClientTest, APartRefusedBatchFailsOnlyTheFlowsNotTagged) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerGiven,
                R"({"ok":false,"error":"flows[2]: flow table full","tagged":2})");
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  std::vector<std::string> results;
  for (int i = 0; i < 4; ++i) {
    Flow f = flow();
    f.sport = static_cast<uint16_t>(2000 + i);
    c.tag(f, "gold", 120, "", [&](const std::string& r) { results.push_back(r); });
  }
  run_until(results, 4);
  EXPECT_EQ(results, (std::vector<std::string>{"ok", "ok", "error", "error"}));
  EXPECT_EQ(metrics_.dataplane_tags().value({"ok"}), 2u);
  EXPECT_EQ(metrics_.dataplane_tags().value({"error"}), 2u);
}

// Only an object whose "ok" is true is a success; anything else the dataplane could say is an
// error, and the connection stays usable.
TEST_F(DataplaneClientTest, AnAnswerThatIsNotOkTrueIsAnError) {
  for (const char* answer : {R"({"ok":false})", R"({"ok":1})", R"({"ok":"true"})", R"([true])",
                             R"({"ok":true)", "not json", R"({"error":"no"})"}) {
    SCOPED_TRACE(answer);
    LinePeer peer(path_, LinePeer::Mode::kAnswerGiven, answer);
    DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
    EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "error");
    EXPECT_EQ(complete([&](auto done) { c.untag(flow(), done); }), "error");
    EXPECT_TRUE(c.connected());
  }
  LinePeer peer(path_, LinePeer::Mode::kAnswerGiven, "{\"ok\":true,\"removed\":false}\r");
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  EXPECT_EQ(complete([&](auto done) { c.untag(flow(), done); }), "ok");
}

TEST_F(DataplaneClientTest, RefusalIsAnError) {
  LinePeer peer(path_, LinePeer::Mode::kAnswerError);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "nope", 1, "", done); }), "error");
  EXPECT_EQ(metrics_.dataplane_tags().value({"error"}), 1u);
}

TEST_F(DataplaneClientTest, AbsentSocketIsUnavailableAndReconnectsLater) {
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "unavailable");
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "unavailable");
  EXPECT_EQ(metrics_.dataplane_tags().value({"unavailable"}), 2u);
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  std::this_thread::sleep_for(250ms);  // past the reconnect back-off
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "ok");
}

TEST_F(DataplaneClientTest, SilentPeerTimesOutAndTheNextCallReconnects) {
  {
    LinePeer peer(path_, LinePeer::Mode::kSilent);
    DataplaneClient c(base_, path_, &metrics_, /*timeout_ms=*/50);
    EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "timeout");
    EXPECT_FALSE(c.connected());
    EXPECT_EQ(metrics_.dataplane_tags().value({"timeout"}), 1u);
  }
  LinePeer peer(path_, LinePeer::Mode::kAnswerOk);
  DataplaneClient c(base_, path_, &metrics_, kAnswerMs);
  EXPECT_EQ(complete([&](auto done) { c.tag(flow(), "gold", 1, "", done); }), "ok");
}

TEST_F(DataplaneClientTest, PeerGoingAwayFailsPendingCalls) {
  DataplaneClient c(base_, path_, &metrics_, /*timeout_ms=*/2000);
  // Both outlive the callback, which runs after the peer's scope has ended.
  std::string result;
  bool done = false;
  {
    LinePeer peer(path_, LinePeer::Mode::kSilent);
    c.tag(flow(), "gold", 1, "", [&](const std::string& r) {
      result = r;
      done = true;
    });
    for (int i = 0; i < 50 && peer.lines().empty(); ++i) {
      event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
      std::this_thread::sleep_for(2ms);
    }
    ASSERT_EQ(peer.lines().size(), 1u);
  }  // the peer closes its connection
  for (int i = 0; i < 500 && result.empty(); ++i) {
    event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(result, "unavailable");
}

TEST(AdmittedFlows, RemembersAndForgetsOldestFirst) {
  AdmittedFlows r(2);
  Flow a, b, c;
  a.sport = 1;
  b.sport = 2;
  c.sport = 3;
  r.put("a", a);
  r.put("b", b);
  r.put("c", c);  // evicts "a"
  EXPECT_EQ(r.size(), 2u);
  EXPECT_FALSE(r.take("a"));
  auto got = r.take("b");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sport, 2);
  EXPECT_FALSE(r.take("b"));  // taken once
  EXPECT_EQ(r.take("c")->sport, 3);
  EXPECT_EQ(r.size(), 0u);
  // A put of an id already held takes the new flow and keeps the id's place in the order.
  r.put("a", a);
  r.put("b", b);
  r.put("a", c);  // still the oldest
  r.put("d", c);  // evicts "a"
  EXPECT_FALSE(r.take("a"));
  EXPECT_EQ(r.take("b")->sport, 2);
  AdmittedFlows none(0);
  none.put("a", a);
  EXPECT_EQ(none.size(), 0u);
  EXPECT_FALSE(none.take("a"));
}

// find() reads what a put left, class and tenant too, without taking it.
TEST(AdmittedFlows, FindCopiesTheFlowItsClassAndTenant) {
  AdmittedFlows r(4);
  Flow a;
  a.src = "10.0.0.1";
  a.sport = 7;
  AdmittedFlow got;
  EXPECT_FALSE(r.find("a", &got));
  r.put("a", a, "gold", "acme");
  ASSERT_TRUE(r.find("a", &got));
  EXPECT_EQ(got.flow.src, "10.0.0.1");
  EXPECT_EQ(got.flow.sport, 7);
  EXPECT_EQ(got.cls, "gold");
  EXPECT_EQ(got.tenant, "acme");
  r.put("a", a, "silver", "");  // a put of an id held replaces all three
  ASSERT_TRUE(r.find("a", &got));
  EXPECT_EQ(got.cls, "silver");
  EXPECT_EQ(got.tenant, "");
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(r.take("a"));
  EXPECT_FALSE(r.find("a", &got));
}

// Against a model of the order it keeps (a list, oldest first): random puts (new ids and ids
// held), takes (held, taken and never seen) across several rounds of eviction, with the index
// growing, wrapping and shifting back.
TEST(AdmittedFlows, KeepsTheOrderOfAListUnderChurn) {
  for (size_t capacity : {1u, 3u, 64u, 1000u}) {
    AdmittedFlows r(capacity);
    std::list<std::pair<std::string, uint16_t>> model;  // oldest first
    std::mt19937 rng(static_cast<unsigned>(capacity));
    auto find = [&](const std::string& id) {
      return std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.first == id; });
    };
    for (int step = 0; step < 20000; ++step) {
      const std::string id = "req-" + std::to_string(rng() % (3 * capacity + 5));
      Flow f;
      f.sport = static_cast<uint16_t>(step);
      f.src = step % 7 ? "10.0.0.1" : "2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff";
      if (rng() % 3) {
        r.put(id, f);
        if (auto it = find(id); it != model.end()) {
          it->second = f.sport;
        } else {
          if (model.size() >= capacity) model.pop_front();
          model.emplace_back(id, f.sport);
        }
      } else {
        auto got = r.take(id);
        auto it = find(id);
        ASSERT_EQ(got.has_value(), it != model.end()) << capacity << " " << step << " " << id;
        if (got) {
          EXPECT_EQ(got->sport, it->second);
          model.erase(it);
        }
      }
      ASSERT_EQ(r.size(), model.size());
    }
    for (const auto& [id, sport] : std::list(model)) {
      auto got = r.take(id);
      ASSERT_TRUE(got) << id;
      EXPECT_EQ(got->sport, sport);
    }
    EXPECT_EQ(r.size(), 0u);
  }
}

}  // namespace
}  // namespace dripgate::control
