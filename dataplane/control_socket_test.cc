// The control socket's framing on a real unix socket: one JSON object per line each way,
// malformed input answered (never a crash), several clients at once, mode 0600, stale socket
// files replaced, a live one refused; and the protocol's refusals that name the limit.
#include "dataplane/control_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dataplane/mailbox.h"
#include "dataplane/scheduler.h"

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

int connect_to(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
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

json echo_handler(const json& req) {
  if (req.contains("boom")) throw std::invalid_argument("boom: requested");
  return {{"ok", true}, {"echo", req}};
}

// Serves on a background thread until stopped.
class Server {
 public:
  explicit Server(const std::string& path) : sock_(path, echo_handler) {
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

}  // namespace
}  // namespace dripgate::dataplane
