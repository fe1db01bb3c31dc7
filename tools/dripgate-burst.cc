// dripgate-burst: generates the micro-bursts of many agents (hundreds of requests inside
// 10 ms, then silence) or a steady stream, as UDP datagrams or TCP requests, and prints exactly
// what it sent so a receiver-side profile can be checked against it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/iat/units.h"

namespace dripgate::burst {
namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Sleeps most of the way, then spins: clock_nanosleep alone oversleeps by tens of microseconds,
// which would blur the spacing the pattern asks for.
void wait_until(uint64_t due) {
  constexpr uint64_t kSpin = 80'000;
  for (;;) {
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    if (now >= due || g_stop) return;
    if (due - now > kSpin) {
      uint64_t wake = due - kSpin;
      timespec ts{static_cast<time_t>(wake / 1'000'000'000ull),
                  static_cast<long>(wake % 1'000'000'000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);  // EINTR: loop re-checks
    }
  }
}

void enter_netns(const std::string& ns) {
  std::string path = ns.find('/') == std::string::npos ? "/var/run/netns/" + ns : ns;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw sys_error(fmt::format("network namespace '{}' ({})", ns, path));
  if (::setns(fd.get(), CLONE_NEWNET) != 0)
    throw sys_error(fmt::format("cannot enter network namespace '{}' (needs root)", ns));
}

sockaddr_storage resolve(const std::string& hostport, socklen_t& len) {
  std::string host, port;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string::npos || close + 1 >= hostport.size() || hostport[close + 1] != ':')
      throw std::runtime_error(fmt::format("bad target '{}' (expected [v6addr]:port)", hostport));
    host = hostport.substr(1, close - 1);
    port = hostport.substr(close + 2);
  } else {
    auto colon = hostport.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == hostport.size())
      throw std::runtime_error(fmt::format("bad target '{}' (expected host:port)", hostport));
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", hostport, gai_strerror(rc)));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return ss;
}

struct Plan {
  // Packet i is due at t0 + due_offset(i).
  uint64_t total = 0;
  uint64_t burst = 0, within_ns = 0, every_ns = 0, bursts = 0;  // burst mode
  double rate = 0;                                              // steady mode
  uint64_t deadline_ns = 0;  // --duration: nothing leaves after start + this, sent or not
  uint64_t due_offset(uint64_t i) const {
    if (rate > 0) return static_cast<uint64_t>(std::llround(static_cast<double>(i) * 1e9 / rate));
    uint64_t b = i / burst, j = i % burst;
    return b * every_ns + (within_ns * j) / burst;
  }
};

std::string iso_utc(uint64_t realtime_ns) {
  time_t s = static_cast<time_t>(realtime_ns / 1'000'000'000ull);
  tm t{};
  gmtime_r(&s, &t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", t.tm_year + 1900, t.tm_mon + 1,
                     t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, realtime_ns % 1'000'000'000ull);
}

struct Args {
  std::string target, proto = "udp", netns, json_path, bind_addr;
  size_t size = 64;
  uint64_t burst = 0, count = 0;
  std::string within = "0", every = "1s", duration;
  double rate = 0;
  unsigned connections = 1;
  bool quiet = false, catch_up = false;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--target", a.target, "destination host:port or [v6]:port")->required();
  app.add_option("--proto", a.proto, "udp (datagrams) or tcp (requests on open connections)")
      ->check(CLI::IsMember({"udp", "tcp"}))
      ->capture_default_str();
  app.add_option("--size", a.size, "payload bytes per datagram/request (first 16: seq, send time)")
      ->check(CLI::Range(size_t{1}, size_t{65000}))
      ->capture_default_str();
  auto* o_burst =
      app.add_option("--burst", a.burst, "packets per burst")->check(CLI::PositiveNumber);
  app.add_option("--within", a.within, "spread each burst over this time (0 = back to back)")
      ->capture_default_str();
  app.add_option("--every", a.every, "a burst starts every this long")->capture_default_str();
  app.add_option("--count", a.count,
                 "burst mode: number of bursts (default 1); rate mode: number of packets");
  auto* o_rate = app.add_option("--rate", a.rate, "steady mode: packets per second")
                     ->check(CLI::PositiveNumber);
  app.add_option("--duration", a.duration, "steady mode: how long (e.g. 5s)");
  app.add_option("--connections", a.connections, "tcp: requests go round robin over N connections")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--bind", a.bind_addr, "source address[:port] to bind");
  app.add_option("--netns", a.netns, "run inside this network namespace (name or path)");
  app.add_option("--json", a.json_path, "also write what was sent as JSON to this file");
  app.add_flag("--quiet", a.quiet, "no text report");
  app.add_flag("--catch-up", a.catch_up,
               "when late, send the overdue packets at once to keep the long-run rate (default: "
               "shift the rest of the schedule, keeping the spacing)");
  o_burst->excludes(o_rate);
}

Plan make_plan(const Args& a) {
  Plan plan;
  if (a.burst) {
    plan.burst = a.burst;
    plan.within_ns = iat::parse_duration_ns(a.within);
    plan.every_ns = iat::parse_duration_ns(a.every);
    plan.bursts = a.count ? a.count : 1;
    if (plan.bursts > 1 && plan.every_ns < plan.within_ns)
      throw std::runtime_error("--every must be at least --within: bursts would overlap");
    plan.total = plan.burst * plan.bursts;
  } else if (a.rate > 0) {
    plan.rate = a.rate;
    if (a.count && !a.duration.empty())
      throw std::runtime_error("give --count or --duration with --rate, not both");
    if (a.count) {
      plan.total = a.count;
    } else if (!a.duration.empty()) {
      plan.deadline_ns = iat::parse_duration_ns(a.duration);
      plan.total =
          static_cast<uint64_t>(std::llround(a.rate * static_cast<double>(plan.deadline_ns) / 1e9));
    } else {
      throw std::runtime_error("--rate needs --count or --duration");
    }
  } else {
    throw std::runtime_error(
        "give a pattern: --burst N [--within W --every P --count K] or "
        "--rate R (--duration D | --count K)");
  }
  if (plan.total == 0) throw std::runtime_error("the pattern sends no packets");
  return plan;
}

struct Target {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int type = SOCK_DGRAM;
};

// One UDP socket, or one TCP connection per --connections.
std::vector<Fd> open_sockets(const Args& a, Target& dst) {
  std::vector<Fd> socks;
  const unsigned nsock = dst.type == SOCK_DGRAM ? 1 : a.connections;
  for (unsigned i = 0; i < nsock; ++i) {
    Fd fd(::socket(dst.addr.ss_family, dst.type | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) throw sys_error("socket");
    int buf = 4 << 20;  // a whole burst fits: the sender never blocks mid-burst on a small buffer
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (!a.bind_addr.empty()) {
      std::string b = a.bind_addr;
      if (b.find(':') == std::string::npos || (b.front() == '[' && b.back() == ']')) b += ":0";
      socklen_t blen = 0;
      sockaddr_storage bs = resolve(b, blen);
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&bs), blen) != 0)
        throw sys_error(fmt::format("bind {}", a.bind_addr));
    }
    if (dst.type == SOCK_STREAM) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&dst.addr), dst.len) != 0)
        throw sys_error(fmt::format("connect {}", a.target));
    }
    socks.push_back(std::move(fd));
  }
  return socks;
}

// What was sent, as the report and --json give it.
struct Report {
  uint64_t sent = 0, errors = 0, first_err = 0;
  uint64_t start_mono = 0, end_mono = 0, start_real = 0, end_real = 0;
  uint64_t slips = 0, slipped_ns = 0;
  bool hit_deadline = false;
};

class Sender {
 public:
  static constexpr size_t kBatch = 1024;  // UIO_MAXIOV: the most one sendmmsg takes

  Sender(const Args& a, Target dst, std::vector<Fd> socks)
      : args_(a),
        dst_(dst),
        socks_(std::move(socks)),
        payloads_(kBatch, std::vector<unsigned char>(a.size, 0)),
        iov_(kBatch),
        msgs_(kBatch) {}

  Report run(const Plan& plan);

 private:
  void stamp(uint64_t first_seq, size_t n, uint64_t send_mono);
  void send_udp(size_t n);
  void send_tcp(uint64_t first_seq, size_t n);

  const Args& args_;
  Target dst_;
  std::vector<Fd> socks_;
  std::vector<std::vector<unsigned char>> payloads_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
  Report r_;
};

Report Sender::run(const Plan& plan) {
  uint64_t t0 = now_ns(CLOCK_MONOTONIC) + 1'000'000;  // 1 ms to settle before the first
  // A sender preempted on a busy machine would otherwise send everything overdue back to back:
  // a burst tighter than the one asked for, i.e. a false positive for the profiler.
  constexpr uint64_t kSlack = 20'000;
  const uint64_t deadline = plan.deadline_ns ? t0 + plan.deadline_ns : UINT64_MAX;
  uint64_t i = 0;
  while (i < plan.total && !g_stop) {
    const uint64_t off = plan.due_offset(i);
    uint64_t due = t0 + off;
    if (due >= deadline || now_ns(CLOCK_MONOTONIC) >= deadline) {
      r_.hit_deadline = true;  // a machine slower than the rate sends fewer, not for longer
      break;
    }
    if (!args_.catch_up && (i == 0 || off != plan.due_offset(i - 1))) {
      uint64_t now = now_ns(CLOCK_MONOTONIC);
      if (now > due + kSlack) {
        ++r_.slips;
        r_.slipped_ns += now - due;
        t0 += now - due;
        due = now;
      }
    }
    wait_until(due);
    if (g_stop) break;
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    // Everything due by now leaves in one call: a back-to-back burst, or at high rates the few
    // packets that fell due while the previous call ran (late by less than kSlack, else the
    // schedule was shifted above; with --catch-up, everything overdue).
    size_t n = 0;
    while (n < kBatch && i + n < plan.total && t0 + plan.due_offset(i + n) <= now) ++n;
    if (n == 0) n = 1;
    const uint64_t send_mono = now_ns(CLOCK_MONOTONIC);
    stamp(i, n, send_mono);
    if (r_.start_mono == 0) {
      r_.start_mono = send_mono;
      r_.start_real = now_ns(CLOCK_REALTIME);
    }
    if (dst_.type == SOCK_DGRAM)
      send_udp(n);
    else
      send_tcp(i, n);
    r_.end_mono = now_ns(CLOCK_MONOTONIC);
    r_.end_real = now_ns(CLOCK_REALTIME);
    i += n;
  }
  return r_;
}

// The first 16 payload bytes: sequence number and send time, big-endian.
void Sender::stamp(uint64_t first_seq, size_t n, uint64_t send_mono) {
  for (size_t k = 0; k < n; ++k) {
    const uint64_t seq = first_seq + k;
    auto& pl = payloads_[k];
    for (size_t b = 0; b < 8 && b < pl.size(); ++b)
      pl[b] = static_cast<unsigned char>(seq >> (56 - 8 * b));
    for (size_t b = 0; b < 8 && 8 + b < pl.size(); ++b)
      pl[8 + b] = static_cast<unsigned char>(send_mono >> (56 - 8 * b));
  }
}

void Sender::send_udp(size_t n) {
  for (size_t k = 0; k < n; ++k) {
    iov_[k] = {payloads_[k].data(), payloads_[k].size()};
    msgs_[k] = {};
    msgs_[k].msg_hdr.msg_name = &dst_.addr;
    msgs_[k].msg_hdr.msg_namelen = dst_.len;
    msgs_[k].msg_hdr.msg_iov = &iov_[k];
    msgs_[k].msg_hdr.msg_iovlen = 1;
  }
  size_t done = 0;
  while (done < n) {
    int r = ::sendmmsg(socks_[0].get(), msgs_.data() + done, static_cast<unsigned>(n - done), 0);
    if (r < 0) {
      if (errno == EINTR && !g_stop) continue;
      if (errno == EINTR) break;
      if (!r_.errors) r_.first_err = static_cast<uint64_t>(errno);
      ++r_.errors;  // this datagram is lost; the rest of the batch still goes
      ++done;
      continue;
    }
    done += static_cast<size_t>(r);
    r_.sent += static_cast<uint64_t>(r);
  }
}

void Sender::send_tcp(uint64_t first_seq, size_t n) {
  for (size_t k = 0; k < n && !g_stop; ++k) {
    int fd = socks_[(first_seq + k) % socks_.size()].get();
    size_t off = 0;
    const auto& pl = payloads_[k];
    while (off < pl.size()) {
      ssize_t r = ::send(fd, pl.data() + off, pl.size() - off, MSG_NOSIGNAL);
      if (r < 0) {
        if (errno == EINTR && !g_stop) continue;
        throw sys_error(fmt::format("send to {} after {} requests", args_.target, r_.sent));
      }
      off += static_cast<size_t>(r);
    }
    ++r_.sent;
  }
}

nlohmann::json to_json(const Args& a, const Plan& plan, const Report& r) {
  nlohmann::json j = {
      {"proto", a.proto},
      {"target", a.target},
      {"netns", a.netns},
      {"payload_bytes", a.size},
      {"planned", plan.total},
      {"sent", r.sent},
      {"errors", r.errors},
      {"interrupted", g_stop != 0},
      {"stopped_at_deadline", r.hit_deadline},
      {"late_shifts", r.slips},
      {"late_total_ns", r.slipped_ns},
      {"start_monotonic_ns", r.start_mono},
      {"end_monotonic_ns", r.end_mono},
      {"start_realtime_ns", r.start_real},
      {"end_realtime_ns", r.end_real},
      {"elapsed_ns", r.end_mono - r.start_mono},
  };
  if (plan.rate > 0)
    j["pattern"] = {{"kind", "steady"}, {"rate_pps", plan.rate}};
  else
    j["pattern"] = {{"kind", "burst"},
                    {"burst", plan.burst},
                    {"within_ns", plan.within_ns},
                    {"every_ns", plan.every_ns},
                    {"bursts", plan.bursts}};
  return j;
}

void print_report(const Args& a, const Plan& plan, const Report& r) {
  std::string what = plan.rate > 0 ? fmt::format("steady {}/s", plan.rate)
                                   : fmt::format("{} bursts of {} within {} every {}", plan.bursts,
                                                 plan.burst, iat::format_ns(double(plan.within_ns)),
                                                 iat::format_ns(double(plan.every_ns)));
  std::cout << fmt::format("sent {} of {} {} {} ({} B payload) to {}{}: {}\n", r.sent, plan.total,
                           a.proto, a.proto == "udp" ? "datagrams" : "requests", a.size, a.target,
                           a.netns.empty() ? "" : " from netns " + a.netns, what);
  if (r.sent)
    std::cout << fmt::format("start {}  end {}  elapsed {}\n", iso_utc(r.start_real),
                             iso_utc(r.end_real),
                             iat::format_ns(double(r.end_mono - r.start_mono)));
  if (r.hit_deadline)
    std::cout << fmt::format("stopped at the --duration deadline after {} of {} packets\n", r.sent,
                             plan.total);
  if (r.slips)
    std::cout << fmt::format(
        "late {} times by {} in total: the rest of the schedule was shifted (--catch-up "
        "keeps it)\n",
        r.slips, iat::format_ns(double(r.slipped_ns)));
  if (r.errors)
    std::cout << fmt::format("{} send errors (first: {})\n", r.errors,
                             std::strerror(static_cast<int>(r.first_err)));
  if (g_stop) std::cout << "interrupted by a signal\n";
}

int run(int argc, char** argv) {
  CLI::App app{
      "dripgate-burst: sends micro-bursts (\"N packets within W every P\") or a steady rate of "
      "UDP datagrams or TCP requests, and prints what it sent"};
  Args args;
  add_options(app, args);
  CLI11_PARSE(app, argc, argv);
  const Plan plan = make_plan(args);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Sockets belong to the namespace current at their creation: enter it first.
  if (!args.netns.empty()) enter_netns(args.netns);
  Target dst;
  dst.addr = resolve(args.target, dst.len);
  dst.type = args.proto == "udp" ? SOCK_DGRAM : SOCK_STREAM;
  Sender sender(args, dst, open_sockets(args, dst));
  const Report report = sender.run(plan);

  if (!args.json_path.empty()) {
    std::ofstream f(args.json_path);
    f << to_json(args, plan, report).dump(2) << "\n";
    if (!f) throw std::runtime_error(fmt::format("cannot write '{}'", args.json_path));
  }
  if (!args.quiet) print_report(args, plan, report);
  return report.errors ? 1 : 0;
}

}  // namespace
}  // namespace dripgate::burst

int main(int argc, char** argv) {
  try {
    return dripgate::burst::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dripgate-burst: " << e.what() << "\n";
    return 2;
  }
}
