// The control socket's framing on a real unix socket: one JSON object per line each way,
// malformed input answered (never a crash), several clients at once, mode 0600, stale socket
// files replaced, a live one refused, idle clients closed and never able to lock others out, a
// client that does not read its answers held back rather than cut off; and the protocol's
// refusals that name the limit to raise, and batched tags on a real flow table.
#include "dataplane/control_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dataplane/flow_table.h"
#include "dataplane/mailbox.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"
#include "dataplane/tenants.h"
#include "tests/eal_environment.h"

namespace dripgate::dataplane {
namespace {

using nlohmann::json;

class TmpDir {
 public:
  TmpDir() {
    std::string t = (std::filesystem::temp_directory_path() / "dgcs.XXXXXX").string();
    EXPECT_NE(::mkdtemp(t.data()), nullptr);
    path = t;
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// A non-blocking connect fails at once (EAGAIN) when the listen backlog is full, instead of
// waiting for room; the socket is blocking (reads time out after 5 s) once connected.
int connect_to(const std::string& path, bool nonblocking_connect = false) {
  int fd =
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking_connect ? SOCK_NONBLOCK : 0), 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  ::fcntl(fd, F_SETFL, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until `lines` newlines arrived or the peer closed.
std::string read_lines(int fd, int lines) {
  std::string out;
  char buf[4096];
  while (std::count(out.begin(), out.end(), '\n') < lines) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One request answered (the echo handler's answer to {"n":n}); false when the connection was
// closed or refused instead.
bool round_trip(int fd, int n) {
  send_all(fd, fmt::format("{{\"n\":{}}}\n", n));
  const json a = json::parse(read_lines(fd, 1), nullptr, false);
  return !a.is_discarded() && a.value("ok", false) && a["echo"]["n"] == n;
}

// True when the server has closed fd (EOF; no reply bytes were pending).
bool closed_by_server(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

// The control socket's clock in tests: moved by hand, read by the serving thread.
std::atomic<int64_t> g_fake_ms{0};
ControlSocketOptions::Clock::time_point fake_now() {
  return ControlSocketOptions::Clock::time_point(std::chrono::milliseconds(g_fake_ms.load()));
}
ControlSocketOptions fake_clock_options() {
  g_fake_ms = 1'000'000;
  ControlSocketOptions o;
  o.now = fake_now;
  return o;
}

// The value at index i of a line the socket read, as a tree, for the echo handler's answers.
json tree(const JsonReader& r, size_t i) {
  const JsonReader::Value& v = r[i];
  switch (v.kind) {
    case JsonReader::Kind::kNull:
      return nullptr;
    case JsonReader::Kind::kBool:
      return v.boolean;
    case JsonReader::Kind::kInteger:
      return v.integer;
    case JsonReader::Kind::kUnsigned:
      return v.unsigned_;
    case JsonReader::Kind::kFloat:
      return v.number;
    case JsonReader::Kind::kString:
      return v.text;
    case JsonReader::Kind::kObject:
    case JsonReader::Kind::kArray:
      break;
  }
  json out = v.kind == JsonReader::Kind::kObject ? json::object() : json::array();
  for (size_t j = i + 1; j < r.size(); ++j) {
    if (r[j].parent != static_cast<int>(i)) continue;
    if (v.kind == JsonReader::Kind::kObject)
      out[r[j].key] = tree(r, j);
    else
      out.push_back(tree(r, j));
  }
  return out;
}

void echo_handler(const JsonReader& req, std::string& out) {
  if (req.find(JsonReader::kBody, "boom")) {
    out += "{\"ok\":";  // a partial answer, which the throw must take back
    throw std::invalid_argument("boom: requested");
  }
  ControlSocket::append_json({{"ok", true}, {"echo", tree(req, JsonReader::kBody)}}, out);
}

// Serves on a background thread until stopped.
class Server {
 public:
  explicit Server(const std::string& path, ControlSocketOptions options = {},
                  ControlSocket::Handler handler = echo_handler)
      : sock_(path, std::move(handler), options) {
    thread_ = std::thread([this] {
      while (!stop_) sock_.poll_once(20, -1);
    });
  }
  ~Server() {
    stop_ = true;
    thread_.join();
  }
  ControlSocket& sock() { return sock_; }

 private:
  ControlSocket sock_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// With a group, the file is 0660 and that group's (the control daemon runs as another user);
// the process's umask is left as it was (DPDK's threads create files meanwhile).
TEST(ControlSocket, AGroupMakesTheFile0660OfThatGroup) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  const mode_t before = ::umask(0022);
  ControlSocketOptions options;
  options.group = 4242;
  Server srv(path, options);
  EXPECT_EQ(::umask(before), 0022u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 4242u);
}

TEST(ControlSocket, AnswerLineTurnsBadInputIntoErrors) {
  auto a = json::parse(ControlSocket::answer_line("{nope", echo_handler));
  EXPECT_EQ(a["ok"], false);
  EXPECT_EQ(a["error"], "malformed JSON");
  a = json::parse(ControlSocket::answer_line("[1,2]", echo_handler));
  EXPECT_EQ(a["ok"], false);
  a = json::parse(ControlSocket::answer_line(R"({"boom":1})", echo_handler));
  EXPECT_EQ(a["ok"], false);
  EXPECT_EQ(a["error"], "boom: requested");
  a = json::parse(ControlSocket::answer_line(R"({"op":"x"})", echo_handler));
  EXPECT_EQ(a["ok"], true);
  EXPECT_EQ(a["echo"]["op"], "x");
  // Invalid UTF-8 echoed back is replaced, not thrown.
  std::string bad = "{\"op\":\"\xff\xfe\"}";
  a = json::parse(ControlSocket::answer_line(bad, echo_handler), nullptr, false);
  EXPECT_FALSE(a.is_discarded());
}

TEST(ControlSocket, ServesLinesToSeveralClientsWithMode0600) {
  TmpDir dir;
  const std::string path = dir.path + "/sub/dp.sock";  // parent created on demand
  Server srv(path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  int a = connect_to(path), b = connect_to(path);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // A request split across writes, two requests in one write, a blank line, CRLF.
  send_all(a, "{\"op\":");
  send_all(b, "{\"n\":1}\n\r\n{not json}\r\n");
  send_all(a, "\"stats\"}\n");
  std::string ra = read_lines(a, 1), rb = read_lines(b, 2);
  EXPECT_EQ(json::parse(ra)["echo"]["op"], "stats");
  auto nl = rb.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_EQ(json::parse(rb.substr(0, nl))["echo"]["n"], 1);
  EXPECT_EQ(json::parse(rb.substr(nl + 1))["ok"], false);
  ::close(a);
  // The other client still works after one went away.
  send_all(b, "{\"n\":2}\n");
  EXPECT_EQ(json::parse(read_lines(b, 1))["echo"]["n"], 2);
  ::close(b);
}

TEST(ControlSocket, OverlongLineGetsAnErrorAndTheConnectionCloses) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  Server srv(path);
  int fd = connect_to(path);
  ASSERT_GE(fd, 0);
  std::string big(ControlSocket::kMaxLine + 10, 'x');
  send_all(fd, big);
  std::string r = read_lines(fd, 1);
  auto a = json::parse(r.substr(0, r.find('\n')));
  EXPECT_EQ(a["ok"], false);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0);  // closed by the server
  ::close(fd);
  // The server is still serving.
  int fd2 = connect_to(path);
  ASSERT_GE(fd2, 0);
  send_all(fd2, "{}\n");
  EXPECT_EQ(json::parse(read_lines(fd2, 1))["ok"], true);
  ::close(fd2);
}

// A client that pipelines faster than it reads gets backpressure: once 1 MB of answers waits,
// its further lines stay unread (its writes block) until it reads; nothing is lost and the
// connection stays up.
TEST(ControlSocket, AClientThatReadsSlowlyIsHeldBackNotCutOff) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  Server srv(path);
  int fd = connect_to(path);
  ASSERT_GE(fd, 0);
  constexpr int kLines = 20000;
  const std::string pad(120, 'p');
  std::atomic<bool> reading{false};
  std::string got;
  std::thread reader([&] {
    while (!reading) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    got = read_lines(fd, kLines);
  });
  std::string batch;
  for (int i = 0; i < kLines; ++i) batch += fmt::format("{{\"n\":{},\"pad\":\"{}\"}}\n", i, pad);
  ASSERT_GT(batch.size(), 2 * ControlSocket::kMaxPendingOut);
  // The reader starts only after more than 1 MB of answers could have piled up.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    reading = true;
  });
  send_all(fd, batch);
  late.join();
  reader.join();
  ASSERT_EQ(std::count(got.begin(), got.end(), '\n'), kLines);
  size_t at = 0;
  for (int i = 0; i < kLines; ++i) {
    size_t nl = got.find('\n', at);
    const json a = json::parse(got.substr(at, nl - at));
    ASSERT_EQ(a["echo"]["n"], i);
    at = nl + 1;
  }
  EXPECT_TRUE(round_trip(fd, 7));  // still connected
  ::close(fd);
}

TEST(ControlSocket, ReplacesStaleSocketButRefusesLiveOne) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  {
    // A socket file whose process is gone.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ::close(fd);
  }
  Server srv(path);  // replaces it
  EXPECT_THROW(ControlSocket(path, echo_handler), std::runtime_error);
  // A regular file in the way is an error, not deleted.
  const std::string file = dir.path + "/file";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fclose(f);
  }
  EXPECT_THROW(ControlSocket(file, echo_handler), std::runtime_error);
  EXPECT_TRUE(std::filesystem::exists(file));
}

// Before anything is accepted, a burst of connects as large as the client limit completes (the
// kernel queues them), and each is served once the socket is polled.
TEST(ControlSocket, BacklogHoldsABurstAsLargeAsTheClientLimit) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  ControlSocket sock(path, echo_handler);
  const size_t limit = ControlSocketOptions{}.max_clients;
  std::vector<int> fds;
  for (size_t i = 0; i < limit; ++i) {
    const int fd = connect_to(path, /*nonblocking_connect=*/true);
    ASSERT_GE(fd, 0) << "connect " << i << " refused: " << std::strerror(errno);
    fds.push_back(fd);
    send_all(fd, fmt::format("{{\"n\":{}}}\n", i));
  }
  for (int i = 0; i < 100 && sock.clients() < limit; ++i) sock.poll_once(100, -1);
  ASSERT_EQ(sock.clients(), limit);
  sock.poll_once(100, -1);  // every request is readable now: all answered in one pass
  for (size_t i = 0; i < limit; ++i) {
    EXPECT_EQ(json::parse(read_lines(fds[i], 1))["echo"]["n"], i);
    ::close(fds[i]);
  }
}

// Every slot held by a silent client: each newcomer is still served at once, in the place of the
// client silent longest; the others stay connected.
TEST(ControlSocket, IdleClientsHoldingEverySlotCannotKeepANewClientOut) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  ControlSocketOptions opts = fake_clock_options();
  const size_t limit = opts.max_clients;
  Server srv(path, opts);
  std::vector<int> idle;
  for (size_t i = 0; i < limit; ++i) {
    idle.push_back(connect_to(path));
    ASSERT_GE(idle.back(), 0);
    ASSERT_TRUE(round_trip(idle.back(), static_cast<int>(i)));  // accepted, then silent
    g_fake_ms += 1;                                             // idle[0] is silent longest
  }
  constexpr int kNewcomers = 30;
  std::vector<int> newcomers;
  for (int j = 0; j < kNewcomers; ++j) {
    newcomers.push_back(connect_to(path));
    ASSERT_GE(newcomers.back(), 0);
    ASSERT_TRUE(round_trip(newcomers.back(), 1000 + j)) << "newcomer " << j << " not served";
    ASSERT_TRUE(closed_by_server(idle[j])) << "idle client " << j << " should have made room";
  }
  for (size_t i = kNewcomers; i < limit; ++i) {
    EXPECT_TRUE(round_trip(idle[i], static_cast<int>(i))) << "client " << i << " lost its slot";
  }
  for (int fd : idle) ::close(fd);
  for (int fd : newcomers) ::close(fd);
}

// A client silent for idle_timeout is closed; one that keeps sending is not, and neither is a
// silent one before its time.
TEST(ControlSocket, IdleClientIsClosedAfterTheTimeoutAndActiveOneIsNot) {
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  ControlSocketOptions opts = fake_clock_options();
  opts.idle_timeout = std::chrono::seconds(30);
  Server srv(path, opts);
  const int silent = connect_to(path), active = connect_to(path);
  ASSERT_GE(silent, 0);
  ASSERT_GE(active, 0);
  ASSERT_TRUE(round_trip(silent, 1));
  ASSERT_TRUE(round_trip(active, 1));

  g_fake_ms += 29'000;
  // Two answers: the second request is read on a later pass than the first answer was sent,
  // so the server has judged the silent client at 29 s in between.
  ASSERT_TRUE(round_trip(active, 2));
  ASSERT_TRUE(round_trip(active, 3));
  char c;
  const ssize_t got = ::recv(silent, &c, 1, MSG_DONTWAIT);
  const int err = errno;
  EXPECT_EQ(got, -1) << "closed before its timeout";
  EXPECT_EQ(err, EAGAIN);

  g_fake_ms += 2'000;  // silent: 31 s without a byte; active: 2 s
  EXPECT_TRUE(closed_by_server(silent));
  EXPECT_TRUE(round_trip(active, 4));
  g_fake_ms += 29'000;
  EXPECT_TRUE(round_trip(active, 5));
  g_fake_ms += 29'000;
  EXPECT_TRUE(round_trip(active, 6));  // 60 s after its first request, never 30 s silent
  ::close(silent);
  ::close(active);
}

// set_rate through the protocol, answered by an owner thread as the drip lcore does: a rate
// above the maximum is refused naming the field and the limit, and nothing changes.
TEST(ControlProtocol, SetRateAboveTheMaximumIsRefusedNamingFieldAndLimit) {
  config::Drip drip;
  drip.rate_pps = 1000;
  config::Class gold;
  gold.name = "gold";
  Scheduler sched(drip, {gold}, 1'000'000'000);
  DripMailbox mailbox;
  std::atomic<bool> stop{false};
  std::thread owner([&] {
    while (!stop) {
      mailbox.poll([&](const DripChange& r) { return apply_drip_change(sched, r, 0); });
      std::this_thread::yield();
    }
  });
  const ControlSocket::Handler h = make_protocol({nullptr, nullptr, &mailbox, &sched, nullptr});
  auto ask = [&](const std::string& line) {
    return json::parse(ControlSocket::answer_line(line, h));
  };

  json a = ask(R"({"op":"set_rate","class":"gold","rate_pps":1e308})");
  EXPECT_EQ(a["ok"], false);
  EXPECT_EQ(a["error"],
            "set_rate: rate_pps: rate_pps too high (the maximum is 1e9 packets per second)");
  a = ask(R"({"op":"set_rate","class":"port","rate_bps":2e12})");
  EXPECT_EQ(a["error"],
            "set_rate: rate_bps: rate_bps too high (the maximum is 1e12 bits per second)");
  EXPECT_EQ(sched.port_rate().rate_pps, 1000);
  EXPECT_EQ(sched.port_rate().rate_bps, 0);
  EXPECT_EQ(sched.class_rate(0).rate_pps, 0);
  a = ask(R"({"op":"set_rate","class":"gold","rate_pps":1e9,"rate_bps":1e12})");
  EXPECT_EQ(a["ok"], true) << a.dump();
  EXPECT_EQ(sched.class_rate(0).rate_pps, 1e9);
  stop = true;
  owner.join();
}

// A real flow table needs the EAL.
::testing::Environment* const kEal = ::testing::AddGlobalTestEnvironment(
    new dripgate::testing::EalEnvironment("control_socket_test", 64));

uint64_t zero_now() {
  return 0;
}

// The protocol on a real flow table of `entries` and one class, "gold".
struct Protocol {
  Protocol(const char* name, uint32_t entries, uint32_t max_tenants = TenantTable::kMaxTenants)
      : tenants(max_tenants) {
    FlowTableParams p;
    p.name = name;
    p.entries = entries;
    p.tsc_hz = 1000;
    std::string error;
    flows = FlowTable::create(p, &error);
    EXPECT_NE(flows, nullptr) << error;
  }
  ControlSocket::Handler handler() {
    return make_protocol({flows.get(), nullptr, nullptr, &sched, zero_now, &tenants});
  }
  ControlSocket::FastPath fast_path() {
    return make_tag_fast_path({flows.get(), nullptr, nullptr, &sched, zero_now, &tenants});
  }
  std::unique_ptr<FlowTable> flows;
  TenantTable tenants;
  Scheduler sched{config::Drip{}, {gold()}, 1'000'000'000};

 private:
  static config::Class gold() {
    config::Class c;
    c.name = "gold";
    return c;
  }
};

// Tag requests are counted by result (the dataplane's tags_total): tagged, refused naming a
// field, refused because the table is full; a line the fast path takes counts as the handler's.
TEST(ControlProtocol, CountsTagRequestsByResult) {
  Protocol proto("cs_tag_count", 8);
  ASSERT_NE(proto.flows, nullptr);
  Stats stats(&proto.sched, {}, 1'000'000'000, 0);
  const ControlTargets t{proto.flows.get(), &stats,   nullptr,
                         &proto.sched,      zero_now, &proto.tenants};
  const ControlSocket::Handler h = make_protocol(t);
  const ControlSocket::FastPath fast = make_tag_fast_path(t);
  JsonReader reader;
  std::string out;
  auto tag = [&](int i) {
    ControlSocket::answer_line(
        fmt::format(R"({{"op":"tag","class":"gold","ttl_s":60,"flow":{{"src":"10.0.1.{}",)"
                    R"("sport":1,"dst":"192.0.2.1","dport":2,"proto":17}}}})",
                    i),
        h, fast, reader, out);
  };
  tag(1);
  EXPECT_EQ(stats.tags.ok.get(), 1u) << out;
  ControlSocket::answer_line(R"({"op":"tag","class":"platinum","flow":{}})", h);
  ControlSocket::answer_line(R"({"op":"tag","class":"gold","flows":[]})", h);
  ControlSocket::answer_line(R"({"op":"untag","flow":{}})", h);  // not a tag
  EXPECT_EQ(stats.tags.invalid.get(), 2u);
  for (int i = 2; i < 250 && stats.tags.full.get() == 0; ++i) tag(i);
  EXPECT_EQ(stats.tags.full.get(), 1u) << out;
  EXPECT_EQ(stats.tags.ok.get(), proto.flows->size());
  EXPECT_EQ(stats.to_json()["tags"],
            json({{"ok", proto.flows->size()}, {"full", 1}, {"invalid", 2}}));
}

// {"op":"tag","flows":[...]} tags many flows in one line: all are checked first (a bad one tags
// nothing and is named), and a table that fills up says how many were tagged.
TEST(ControlProtocol, TagsAListOfFlowsInOneRequest) {
  // rte_hash may hold a few more than asked; filled below until it refuses.
  Protocol proto("cs_tag_batch", 8);
  ASSERT_NE(proto.flows, nullptr);
  FlowTable* flows = proto.flows.get();
  const ControlSocket::Handler h = proto.handler();
  auto ask = [&](const json& req) {
    return json::parse(ControlSocket::answer_line(req.dump(), h));
  };
  auto flow = [](int i) {
    return json{{"src", fmt::format("10.0.0.{}", i)},
                {"sport", 1000},
                {"dst", "192.0.2.1"},
                {"dport", 443},
                {"proto", "udp"}};
  };

  json a = ask({{"op", "tag"}, {"class", "gold"}, {"ttl_s", 60}, {"flows", {flow(1), flow(2)}}});
  EXPECT_EQ(a, json({{"ok", true}, {"class", "gold"}, {"ttl_s", 60}, {"tagged", 2}}));
  for (int i : {1, 2}) {
    auto key = dataplane::make_tuple(fmt::format("10.0.0.{}", i), 1000, "192.0.2.1", 443, 17);
    EXPECT_EQ(flows->lookup(*key, 0), 0) << i;
  }

  json bad_one = flow(4);
  bad_one["src"] = "10.0.0.999";
  a = ask({{"op", "tag"}, {"class", "gold"}, {"flows", {flow(3), bad_one}}});
  EXPECT_EQ(a["ok"], false);
  EXPECT_EQ(a["error"], "flows[1].src: not an IPv4 or IPv6 address: '10.0.0.999'");
  EXPECT_EQ(flows->size(), 2u);  // flows[0] was not tagged either
  EXPECT_EQ(ask({{"op", "tag"}, {"class", "gold"}, {"flows", json::array()}})["error"],
            "flows: must be a non-empty list of flow objects");
  EXPECT_EQ(
      ask({{"op", "tag"}, {"class", "gold"}, {"flow", flow(5)}, {"flows", {flow(6)}}})["error"],
      "flow, flows: give one of them, not both");

  // More flows than the table holds: those before the refusal stay tagged, and are counted.
  json many = json::array();
  for (int i = 10; i < 250; ++i) many.push_back(flow(i));
  a = ask({{"op", "tag"}, {"class", "gold"}, {"flows", many}});
  EXPECT_EQ(a["ok"], false);
  ASSERT_TRUE(a.contains("tagged"));
  const size_t tagged = a["tagged"].get<size_t>();
  EXPECT_GT(tagged, 0u);
  EXPECT_LT(tagged, many.size());
  EXPECT_EQ(flows->size(), 2 + tagged);
  EXPECT_EQ(a["error"].get<std::string>().rfind(fmt::format("flows[{}]: ", tagged), 0), 0u)
      << a.dump();
}

// dripgate-control pipelining tag lines faster than it reads the answers: the socket stops
// reading it while 1 MiB of answers waits, and goes on as the answers are read. Every line is
// answered, in order, and every flow tagged; the connection is never reset.
TEST(ControlProtocol, PipelinedTagLinesReadSlowlyAreAllAnsweredWithoutAReset) {
  constexpr int kLines = 20000;
  Protocol proto("cs_tag_pipe", 32768);
  ASSERT_NE(proto.flows, nullptr);
  FlowTable* flows = proto.flows.get();
  TmpDir dir;
  const std::string path = dir.path + "/dp.sock";
  Server srv(path, {}, proto.handler());
  int fd = connect_to(path);
  ASSERT_GE(fd, 0);

  std::string got;
  int answered = 0;
  bool reset = false;
  // Reads 4 KiB every 2 ms: slower than the socket answers, so answers pile up past 1 MiB.
  std::thread reader([&] {
    char buf[4096];
    while (answered < kLines) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        reset = true;
        return;
      }
      got.append(buf, static_cast<size_t>(n));
      answered += static_cast<int>(std::count(buf, buf + n, '\n'));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::string lines;
  for (int i = 0; i < kLines; ++i)
    lines += fmt::format(
        R"({{"op":"tag","class":"gold","ttl_s":60,"flow":{{"src":"10.{}.{}.{}","sport":1000,)"
        R"("dst":"192.0.2.1","dport":443,"proto":17}}}})"
        "\n",
        i >> 16, (i >> 8) & 255, i & 255);
  send_all(fd, lines);
  reader.join();
  ASSERT_FALSE(reset) << "after " << answered << " answers";
  ASSERT_GT(got.size(), ControlSocket::kMaxPendingOut);
  size_t at = 0;
  for (int i = 0; i < kLines; ++i) {
    size_t nl = got.find('\n', at);
    ASSERT_NE(nl, std::string::npos);
    const json a = json::parse(got.substr(at, nl - at));
    ASSERT_EQ(a["ok"], true) << a.dump();
    ASSERT_EQ(a["flow"], fmt::format("10.{}.{}.{}:1000 -> 192.0.2.1:443 proto 17", i >> 16,
                                     (i >> 8) & 255, i & 255));
    at = nl + 1;
  }
  EXPECT_EQ(flows->size(), static_cast<size_t>(kLines));
  // Still connected.
  send_all(fd, R"({"op":"untag","flow":{"src":"10.0.0.0","sport":1000,"dst":"192.0.2.1",)"
               R"("dport":443,"proto":17}})"
               "\n");
  EXPECT_EQ(json::parse(read_lines(fd, 1))["removed"], true);
  ::close(fd);
}

// Every refusal names the field, in the same words whatever reads the line; a good request's
// answer is the same bytes. Each line is checked alone, on one handler, in this order.
TEST(ControlProtocol, BadRequestsAreRefusedNamingTheField) {
  Protocol proto("cs_errors", 64);
  ASSERT_NE(proto.flows, nullptr);
  const ControlSocket::Handler h = proto.handler();
  const std::string f = R"("src":"10.0.0.1","sport":1000,"dst":"192.0.2.1","dport":443)";
  const std::string tag = R"({"op":"tag","class":"gold",)";
  const std::string unknown = ": unknown field (expected src, sport, dst, dport, proto)";
  const std::pair<std::string, std::string> refused[] = {
      {"{nope", "malformed JSON"},
      {"[1]", "request must be a JSON object"},
      {R"("tag")", "request must be a JSON object"},
      {"{}", "op: missing"},
      {R"({"op":1})", "op: must be a string"},
      {R"({"op":"nope"})", "op: unknown 'nope' (expected tag, untag, set_rate, stats)"},
      {R"({"op":"tag","class":"gold"})", "flow: missing"},
      {tag + R"("flow":[]})", "flow: must be an object {src, sport, dst, dport, proto}"},
      {tag + R"("flow":{)" + f + R"(,"proto":6,"zz":1,"aa":2}})", "flow.aa" + unknown},
      {tag + R"("flow":{"zz":1,"src":1}})", "flow.zz" + unknown},
      {tag + R"("flow":{"dst":"192.0.2.1","proto":6}})", "flow.src: missing"},
      {tag + R"("flow":{"src":5,"dst":"192.0.2.1","proto":6}})", "flow.src: must be a string"},
      {tag + R"("flow":{"src":"10.0.0.1","proto":6}})", "flow.dst: missing"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":null,"proto":6}})", "flow.dst: must be a string"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":70000,"proto":6}})",
       "flow.sport: must be in [0, 65535]"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":-1,"proto":6}})",
       "flow.sport: must be in [0, 65535]"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":18446744073709551615,)"
             R"("proto":6}})",
       "flow.sport: must be in [0, 65535]"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":1e30,"proto":6}})",
       "flow.sport: must be an integer"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":"80","proto":6}})",
       "flow.sport: must be an integer"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","dport":1.5,"proto":6}})",
       "flow.dport: must be an integer"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"192.0.2.1","dport":-9223372036854775808,)"
             R"("proto":6}})",
       "flow.dport: must be in [0, 65535]"},
      {tag + R"("flow":{)" + f + "}}", "flow.proto: missing"},
      {tag + R"("flow":{)" + f + R"(,"proto":"gre"}})",
       "flow.proto: expected a number 0..255 or tcp, udp, icmp, icmpv6, sctp; got 'gre'"},
      {tag + R"("flow":{)" + f + R"(,"proto":256}})", "flow.proto: must be in [0, 255]"},
      {tag + R"("flow":{)" + f + R"(,"proto":true}})", "flow.proto: must be an integer"},
      {tag + R"("flow":{"src":"10.0.0.999","dst":"192.0.2.1","proto":6}})",
       "flow.src: not an IPv4 or IPv6 address: '10.0.0.999'"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"x","proto":6}})",
       "flow.dst: not an IPv4 or IPv6 address: 'x'"},
      {tag + R"("flow":{"src":"10.0.0.1","dst":"2001:db8::1","proto":6}})",
       "flow: src and dst are of different address families"},
      {tag + R"("flows":{}})", "flows: must be a non-empty list of flow objects"},
      {tag + R"("flows":"x"})", "flows: must be a non-empty list of flow objects"},
      {tag + R"("flows":[1]})", "flows[0]: must be an object {src, sport, dst, dport, proto}"},
      {tag + R"("flows":[{)" + f + R"(,"proto":6},{)" + f + R"(,"proto":6,"bogus":1}]})",
       "flows[1].bogus" + unknown},
      {tag + R"("flows":[{)" + f + R"(,"proto":6},{)" + f +
           R"(,"proto":6},{"src":"::1",)"
           R"("dst":"192.0.2.1","proto":6}]})",
       "flows[2]: src and dst are of different address families"},
      {R"({"op":"tag","flow":{"src":1}})", "flow.src: must be a string"},
      {R"({"op":"tag","flow":{)" + f + R"(,"proto":6}})", "class: missing"},
      {R"({"op":"tag","class":3,"flow":{)" + f + R"(,"proto":6}})", "class: must be a string"},
      {R"({"op":"tag","class":"silver","flow":{)" + f + R"(,"proto":6}})",
       "class: no class named 'silver' (classes: gold)"},
      {tag + R"("ttl_s":-1,"flow":{)" + f + R"(,"proto":6}})", "ttl_s: must be in [0, 315360000]"},
      {tag + R"("ttl_s":315360001,"flow":{)" + f + R"(,"proto":6}})",
       "ttl_s: must be in [0, 315360000]"},
      {tag + R"("ttl_s":"60","flow":{)" + f + R"(,"proto":6}})", "ttl_s: must be an integer"},
      {tag + R"("ttl_s":null,"flow":{)" + f + R"(,"proto":6}})", "ttl_s: must be an integer"},
      {R"({"op":"untag"})", "flow: missing"},
      {R"({"op":"untag","flow":{)" + f + R"(,"proto":6,"x":0}})", "flow.x" + unknown},
      {R"({"op":"untag","flow":{"src":"10.0.0.1","dst":"192.0.2.1","sport":1e3,"proto":6}})",
       "flow.sport: must be an integer"},
      {R"({"op":"set_rate"})", "class: missing"},
      {R"({"op":"set_rate","class":"gold"})",
       "set_rate needs rate_pps and/or rate_bps (0 = unlimited)"},
      {R"({"op":"set_rate","class":"gold","rate_pps":null,"rate_bps":null})",
       "set_rate needs rate_pps and/or rate_bps (0 = unlimited)"},
      {R"({"op":"set_rate","class":"gold","rate_pps":"1"})", "rate_pps: must be a number >= 0"},
      {R"({"op":"set_rate","class":"gold","rate_pps":1,"rate_bps":[]})",
       "rate_bps: must be a number >= 0"},
      {R"({"op":"set_rate","class":"gold","rate_bps":-1})",
       "rate_bps: must be a finite number >= 0"},
      {R"({"op":"set_rate","class":"gold","rate_bps":-0.5})",
       "rate_bps: must be a finite number >= 0"},
      {R"({"op":"set_rate","class":"silver","rate_pps":1})",
       "class: no class named 'silver' (classes: gold)"},
  };
  for (const auto& [line, error] : refused) {
    const json a = json::parse(ControlSocket::answer_line(line, h));
    EXPECT_EQ(a, json({{"ok", false}, {"error", error}})) << line;
  }
  EXPECT_EQ(proto.flows->size(), 0u);

  // The answers to good requests, byte for byte; members the protocol does not know are ignored.
  const std::pair<std::string, std::string> answered[] = {
      {tag + R"("flow":{)" + f + R"(,"proto":"tcp"},"extra":[1,{"a":null}],"n":-2.5})",
       R"({"class":"gold","flow":"10.0.0.1:1000 -> 192.0.2.1:443 proto 6","ok":true,"ttl_s":0})"},
      {tag + R"("ttl_s":5,"flows":[{)" + f +
           R"(,"proto":17},{"src":"2001:db8::1",)"
           R"("dst":"2001:db8::2","proto":"icmpv6"}]})",
       R"({"class":"gold","ok":true,"tagged":2,"ttl_s":5})"},
      {R"({"op":"untag","flow":{)" + f + R"(,"proto":6}})",
       R"({"flow":"10.0.0.1:1000 -> 192.0.2.1:443 proto 6","ok":true,"removed":true})"},
      {R"({"op":"untag","flow":{)" + f + R"(,"proto":6}})",
       R"({"flow":"10.0.0.1:1000 -> 192.0.2.1:443 proto 6","ok":true,"removed":false})"},
  };
  for (const auto& [line, answer] : answered)
    EXPECT_EQ(ControlSocket::answer_line(line, h), answer + "\n") << line;
  EXPECT_EQ(proto.flows->size(), 2u);
}

// A key given twice in one object is refused naming it, whichever object it is in, rather than
// read as its last value; the same name in different objects is no repeat. Nesting deeper than
// the reader takes (8 levels; a request has 3) is refused as malformed, wherever it is.
TEST(ControlProtocol, ARepeatedKeyOrDeepNestingIsRefused) {
  Protocol proto("cs_repeat", 64);
  ASSERT_NE(proto.flows, nullptr);
  const ControlSocket::Handler h = proto.handler();
  JsonReader reader;  // one reader for every line, as the socket has
  auto ask = [&](const std::string& line) {
    return json::parse(ControlSocket::answer_line(line, h, reader));
  };
  const std::string f = R"("src":"10.0.0.1","sport":1000,"dst":"192.0.2.1","dport":443)";
  EXPECT_EQ(ask(R"({"op":"stats","op":"tag"})"),
            json({{"ok", false}, {"error", "op: duplicate key"}}));
  EXPECT_EQ(ask(R"({"op":"tag","class":"gold","class":"gold","flow":{)" + f + R"(,"proto":6}})"),
            json({{"ok", false}, {"error", "class: duplicate key"}}));
  EXPECT_EQ(ask(R"({"op":"tag","class":"gold","flow":{)" + f + R"(,"src":"10.0.0.2","proto":6}})"),
            json({{"ok", false}, {"error", "src: duplicate key"}}));
  EXPECT_EQ(ask(R"({"op":"tag","class":"gold","flows":[{)" + f + R"(,"proto":6},{)" + f +
                R"(,"proto":6,"proto":17}]})"),
            json({{"ok", false}, {"error", "proto: duplicate key"}}));
  EXPECT_EQ(proto.flows->size(), 0u);
  // "src" in two flows, and "class" at the top and beside no other: no repeat.
  const json a = ask(R"({"op":"tag","class":"gold","flows":[{)" + f + R"(,"proto":6},{)" + f +
                     R"(,"proto":17}]})");
  EXPECT_EQ(a, json({{"ok", true}, {"class", "gold"}, {"ttl_s", 0}, {"tagged", 2}}));
  EXPECT_EQ(proto.flows->size(), 2u);
  EXPECT_EQ(ask(R"({"op":"stats","x":[[[[[[[[1]]]]]]]]})"),
            json({{"ok", false}, {"error", "malformed JSON"}}));
}

// Lines answered two ways: by the handler alone on one table, and by the fast path (the handler
// behind it) on another.
struct TwoWays {
  TwoWays(const char* plain_name, const char* fast_name, uint32_t entries)
      : plain(plain_name, entries), fast(fast_name, entries) {}
  bool ok() const { return plain.flows != nullptr && fast.flows != nullptr; }
  // The handler's answer and the fast path's (`fp`, or another in front of the same table).
  std::pair<std::string, std::string> answer(const std::string& line,
                                             const ControlSocket::FastPath* other = nullptr) {
    std::pair<std::string, std::string> a;
    ControlSocket::answer_line(line, ha, {}, ra, a.first);
    ControlSocket::answer_line(line, hb, other ? *other : fp, rb, a.second);
    return a;
  }
  Protocol plain, fast;
  const ControlSocket::Handler ha = plain.handler(), hb = fast.handler();
  const ControlSocket::FastPath fp = fast.fast_path();
  JsonReader ra, rb;
};

// The tag fast path against the reader: lines in the form dripgate-control writes, near misses,
// and every one-byte mutation of them (a byte deleted, replaced by one that matters to JSON, or
// inserted), answered by the handler alone on one table and by the fast path (the handler
// behind it) on another: the same answers, and the same flows tagged with the same expiry.
TEST(ControlProtocol, TheTagFastPathAnswersAsTheReaderDoes) {
  TwoWays two("cs_fast_a", "cs_fast_b", 16384);
  ASSERT_TRUE(two.ok());
  const Protocol &plain = two.plain, &fast = two.fast;
  size_t taken = 0;  // lines the fast path answered
  const ControlSocket::FastPath counted = [&](std::string_view line, std::string& out) {
    const bool took = two.fp(line, out);
    taken += took;
    return took;
  };
  size_t lines = 0;
  auto both = [&](const std::string& line) {
    const auto [a, b] = two.answer(line, &counted);
    ++lines;
    ASSERT_EQ(a, b) << line;
    ASSERT_EQ(plain.flows->size(), fast.flows->size()) << line;
  };
  const std::string f1 =
      R"({"src":"10.0.0.1","sport":1234,"dst":"192.0.2.1","dport":443,"proto":6})";
  const std::string f2 =
      R"({"src":"10.0.0.2","sport":0,"dst":"192.0.2.9","dport":65535,"proto":17})";
  const std::string f6 =
      R"({"src":"2001:db8::1","sport":40000,"dst":"2001:db8::2","dport":80,"proto":255})";
  const std::string head = R"({"op":"tag","class":"gold","ttl_s":)";
  const std::vector<std::string> base = {
      head + "300,\"flow\":" + f1 + "}",
      head + "0,\"flows\":[" + f1 + "," + f2 + "," + f6 + "]}",
      head + "315360000,\"flows\":[" + f6 + "]}",
      head + "300,\"tenant\":\"acme\",\"flow\":" + f1 + "}",
      head + "60,\"tenant\":\"t-2.x_Y\",\"flows\":[" + f2 + "," + f6 + "]}",
  };
  const std::vector<std::string> near = {
      head + "315360001,\"flow\":" + f1 + "}",  // ttl_s out of range
      head + "0300,\"flow\":" + f1 + "}",       // leading zero: malformed JSON
      head + "3e2,\"flow\":" + f1 + "}",
      head + "300.0,\"flow\":" + f1 + "}",
      head + "-1,\"flow\":" + f1 + "}",
      head + "99999999999999999999999,\"flow\":" + f1 + "}",
      head + "300,\"flows\":[]}",
      head + "300,\"flows\":[" + f1 + "],\"flow\":" + f1 + "}",
      head + "300,\"flow\":" + f1 + "} ",
      head + "300,\"flow\":" + f1 + "}x",
      head + "300 ,\"flow\":" + f1 + "}",
      R"({"op":"tag","class":"silver","ttl_s":300,"flow":)" + f1 + "}",
      R"({"op":"tag","class":"go\u006cd","ttl_s":300,"flow":)" + f1 + "}",
      R"({"op":"tag","class":"gold\"","ttl_s":300,"flow":)" + f1 + "}",
      R"({"op":"tag","class":"gold","flow":)" + f1 + "}",  // no ttl_s
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":65536,"dst":"192.0.2.1","dport":443,"proto":6}})",
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"192.0.2.1","dport":443,"proto":256}})",
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"2001:db8::1","dport":443,"proto":6}})",
      head +
          R"(300,"flow":{"src":"10.0.0.256","sport":1,"dst":"192.0.2.1","dport":443,"proto":6}})",
      head +
          R"(300,"flow":{"src":"0.0.0.0","sport":1,"dst":"255.255.255.255","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10.0.0.01","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10.0.0","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10.0.0.1.","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10.0.0.1.2","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10..0.1","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"1000.0.0.1","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"::ffff:10.0.0.1","sport":1,"dst":"::1","dport":2,"proto":6}})",
      head + R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"2001:db8::1","dport":2,"proto":6}})",
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"192.0.2.1","dport":443,"proto":"tcp"}})",
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"192.0.2.1","dport":443,"proto":6,"x":1}})",
      head + R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"192.0.2.1","dport":443}})",
      head +
          R"(300,"flow":{"src":"10.0.0.1","sport":1,"dst":"192.0.2.1","dport":443,"proto":6,"proto":6}})",
      head + "300,\"flow\":" + f1 + ",\"flow\":" + f1 + "}",
      head + "300,\"flow\":" + f1 + ",\"ttl_s\":300}",
      head + "300,\"tenant\":\"\",\"flow\":" + f1 + "}",
      head + "300,\"tenant\":\"a b\",\"flow\":" + f1 + "}",
      head + "300,\"tenant\":\"{t:x}\",\"flow\":" + f1 + "}",
      head + "300,\"tenant\":\"" + std::string(65, 'a') + "\",\"flow\":" + f1 + "}",
      head + "300,\"tenant\":\"" + std::string(64, 'a') + "\",\"flow\":" + f1 + "}",
      head + "300,\"tenant\":7,\"flow\":" + f1 + "}",
      head + "300,\"tenant\":null,\"flow\":" + f1 + "}",
      head + R"(300,"tenant":"ac\u006de","flow":)" + f1 + "}",
      head + "300,\"flow\":" + f1 + ",\"tenant\":\"late\"}",
      head + "300,\"tenant\":\"acme\",\"tenant\":\"acme\",\"flow\":" + f1 + "}",
      R"({"op":"tag","class":"gold","tenant":"first","ttl_s":300,"flow":)" + f1 + "}",
      std::string(R"({"op":"tag","class":"gold)") + "\xc3\xa9" + R"(","ttl_s":1,"flow":)" + f1 +
          "}",
  };
  for (const auto& line : base) both(line);
  const size_t base_taken = taken;
  EXPECT_EQ(base_taken, base.size());  // the daemon's lines all take the fast path
  for (const auto& line : near) both(line);
  const std::string bytes = "\"\\,:{}[] 09a.e-\x01\x80";
  for (const auto& line : base) {
    for (size_t i = 0; i <= line.size(); ++i) {
      if (i < line.size()) {
        both(line.substr(0, i) + line.substr(i + 1));
        for (char c : bytes) {
          if (c == line[i]) continue;
          std::string m = line;
          m[i] = c;
          both(m);
        }
      }
      for (char c : {'0', ' ', ','}) both(line.substr(0, i) + c + line.substr(i));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(taken, base_taken + 100) << lines << " lines";
  for (const auto& text : {f1, f2, f6}) {
    const json f = json::parse(text);
    auto key = dataplane::make_tuple(f["src"].get<std::string>(), f["sport"].get<uint16_t>(),
                                     f["dst"].get<std::string>(), f["dport"].get<uint16_t>(),
                                     f["proto"].get<uint8_t>());
    ASSERT_TRUE(key);
    auto a = plain.flows->get(*key), b = fast.flows->get(*key);
    ASSERT_TRUE(a && b) << text;
    EXPECT_EQ(a->cls, b->cls);
    EXPECT_EQ(a->expires, b->expires);
    EXPECT_EQ(a->tenant, b->tenant);
    EXPECT_EQ(plain.tenants.name(a->tenant), fast.tenants.name(b->tenant));
  }
  EXPECT_EQ(plain.tenants.size(), fast.tenants.size());
  EXPECT_GT(plain.tenants.size(), 1u);
}

// A tag's tenant reaches its flows as an id of the tenant table, whichever way the line is read;
// a re-tag moves the flow to its new tenant, a tag without one leaves it none, and a bad name is
// refused naming the field.
TEST(ControlProtocol, TagsCarryTheirTenant) {
  Protocol proto("cs_tenant", 1024);
  ASSERT_NE(proto.flows, nullptr);
  const ControlSocket::Handler h = proto.handler();
  const ControlSocket::FastPath fp = proto.fast_path();
  JsonReader reader;
  auto ask = [&](const std::string& line, bool fast) {
    std::string out;
    ControlSocket::answer_line(line, h, fast ? fp : ControlSocket::FastPath{}, reader, out);
    return json::parse(out);
  };
  const std::string f1 =
      R"({"src":"10.0.0.1","sport":1234,"dst":"192.0.2.1","dport":443,"proto":6})";
  const std::string f6 =
      R"({"src":"2001:db8::1","sport":40000,"dst":"2001:db8::2","dport":80,"proto":17})";
  const FiveTuple k1 = *dataplane::make_tuple("10.0.0.1", 1234, "192.0.2.1", 443, 6);
  const FiveTuple k6 = *dataplane::make_tuple("2001:db8::1", 40000, "2001:db8::2", 80, 17);
  auto tenant_of = [&](const FiveTuple& k) {
    const auto e = proto.flows->get(k);
    EXPECT_TRUE(e);
    return e ? proto.tenants.name(e->tenant) : std::string_view("<untagged>");
  };
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast path" : "reader");
    json a = ask(R"({"op":"tag","class":"gold","ttl_s":300,"tenant":"acme","flows":[)" + f1 + "," +
                     f6 + "]}",
                 fast);
    EXPECT_EQ(
        a,
        json({{"ok", true}, {"class", "gold"}, {"ttl_s", 300}, {"tenant", "acme"}, {"tagged", 2}}));
    EXPECT_EQ(tenant_of(k1), "acme");
    EXPECT_EQ(tenant_of(k6), "acme");
    a = ask(R"({"op":"tag","class":"gold","ttl_s":300,"tenant":"globex","flow":)" + f1 + "}", fast);
    EXPECT_EQ(a["tenant"], "globex") << a.dump();
    EXPECT_EQ(tenant_of(k1), "globex");
    EXPECT_EQ(tenant_of(k6), "acme");
    a = ask(R"({"op":"tag","class":"gold","ttl_s":300,"flow":)" + f6 + "}", fast);
    EXPECT_FALSE(a.contains("tenant")) << a.dump();
    EXPECT_EQ(proto.flows->get(k6)->tenant, TenantTable::kNone);
  }
  // The same names kept their ids: two tenants in all.
  EXPECT_EQ(proto.tenants.size(), 2u);
  EXPECT_EQ(proto.tenants.name(1), "acme");
  EXPECT_EQ(proto.tenants.name(2), "globex");
  json a = ask(R"({"op":"tag","class":"gold","ttl_s":300,"tenant":"a b","flow":)" + f1 + "}", true);
  EXPECT_EQ(a["ok"], false);
  EXPECT_EQ(a["error"], "tenant: must be an id ([A-Za-z0-9._-], 1 to 64 characters), got 'a b'");
  EXPECT_EQ(tenant_of(k1), "globex");  // a refused line changes nothing
  a = ask(R"({"op":"tag","class":"gold","ttl_s":300,"tenant":1,"flow":)" + f1 + "}", true);
  EXPECT_EQ(a["error"], "tenant: must be a string");
  a = ask(R"({"op":"untag","flow":)" + f1 + "}", true);
  EXPECT_EQ(a["removed"], true);
  uint32_t tenant = 99;
  EXPECT_EQ(proto.flows->lookup(k1, 1, &tenant), FlowTable::kNoMatch);
  EXPECT_EQ(tenant, TenantTable::kNone);
}

// Past the tenant table's bound a tag still tags; its flows carry no tenant and a counter says
// how many tags that was.
TEST(ControlProtocol, TagsPastTheTenantBoundStillTagWithoutATenant) {
  Protocol proto("cs_tbound", 1024, 1);
  ASSERT_NE(proto.flows, nullptr);
  const ControlSocket::FastPath fp = proto.fast_path();
  const ControlSocket::Handler h = proto.handler();
  JsonReader reader;
  auto tag = [&](int i, const char* tenant) {
    std::string out;
    ControlSocket::answer_line(
        fmt::format(
            R"({{"op":"tag","class":"gold","ttl_s":300,"tenant":"{}","flow":{{"src":"10.0.0.{}","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}}}})",
            tenant, i),
        h, fp, reader, out);
    return json::parse(out);
  };
  EXPECT_EQ(tag(1, "acme")["ok"], true);
  EXPECT_EQ(tag(2, "globex")["ok"], true);
  EXPECT_EQ(tag(3, "globex")["ok"], true);
  EXPECT_EQ(tag(4, "acme")["ok"], true);
  auto tenant_of = [&](int i) {
    return proto.flows
        ->get(*dataplane::make_tuple(fmt::format("10.0.0.{}", i), 1, "192.0.2.1", 2, 6))
        ->tenant;
  };
  EXPECT_EQ(tenant_of(1), 1u);
  EXPECT_EQ(tenant_of(2), TenantTable::kNone);
  EXPECT_EQ(tenant_of(3), TenantTable::kNone);
  EXPECT_EQ(tenant_of(4), 1u);
  EXPECT_EQ(proto.tenants.untracked(), 2u);
  EXPECT_EQ(proto.flows->size(), 4u);
}

// A table that fills up answers the same through the fast path: a single flow's refusal (thrown
// by the tagging, after the line was read) and a batch refused part way.
TEST(ControlProtocol, TheTagFastPathAnswersAFullTableAsTheReaderDoes) {
  TwoWays two("cs_full_a", "cs_full_b", 8);
  ASSERT_TRUE(two.ok());
  auto flow = [](int i) {
    return fmt::format(R"({{"src":"10.0.{}.1","sport":1,"dst":"192.0.2.1","dport":2,"proto":6}})",
                       i);
  };
  std::string batch = R"({"op":"tag","class":"gold","ttl_s":5,"flows":[)";
  for (int i = 100; i < 140; ++i) batch += (i > 100 ? "," : "") + flow(i);
  batch += "]}";
  std::vector<std::string> lines = {batch};
  for (int i = 0; i < 40; ++i)
    lines.push_back(R"({"op":"tag","class":"gold","ttl_s":5,"flow":)" + flow(i) + "}");
  bool refused = false;
  for (const auto& line : lines) {
    const auto [a, b] = two.answer(line);
    EXPECT_EQ(a, b) << line;
    refused |= json::parse(a)["ok"] == false;
  }
  EXPECT_TRUE(refused);
  EXPECT_EQ(two.plain.flows->size(), two.fast.flows->size());
}

}  // namespace
}  // namespace dripgate::dataplane
