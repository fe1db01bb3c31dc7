// dripgate-agents: fleets of simulated LLM agents, one thread and one UDP socket (one flow) per
// agent. Every cycle each agent asks dripgate-control for admission (POST /v1/admit with its
// flow's 5-tuple), then sends its requests inside the cycle's burst window, all agents of all
// tenants in the same few milliseconds: the synchronized bursts an inference cluster sees. An
// agent that obeys 429 stays silent for the cycle; a runaway one sends anyway. Its admission is
// released at the next cycle, which untags the flow in the dataplane.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tools/lab/lab_common.h"

namespace dripgate::lab {
namespace {

using nlohmann::json;

struct TenantSpec {
  std::string name;
  unsigned agents = 0;
  unsigned per_burst = 0;  // requests each agent sends per cycle
  bool obeys = true;       // false: sends whether admitted or not
};

// "name:agents:per_burst:obey|ignore"
TenantSpec parse_tenant(const std::string& text) {
  std::vector<std::string> f;
  for (size_t pos = 0;;) {
    const size_t c = text.find(':', pos);
    f.push_back(text.substr(pos, c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (f.size() != 4 || (f[3] != "obey" && f[3] != "ignore"))
    throw std::runtime_error(
        fmt::format("--tenant '{}': expected name:agents:per_burst:obey|ignore", text));
  TenantSpec t{f[0], static_cast<unsigned>(std::stoul(f[1])),
               static_cast<unsigned>(std::stoul(f[2])), f[3] == "obey"};
  if (t.agents == 0 || t.agents > 1000 || t.per_burst == 0)
    throw std::runtime_error(fmt::format("--tenant '{}': 1..1000 agents, 1+ requests", text));
  return t;
}

struct Setup {
  Endpoint control, target;
  std::string src;
  uint16_t sport_base = 41000;
  size_t size = 64;
  unsigned cycles = 5;
  uint64_t start_ns = 0, period_ns = 0, window_ns = 0, lead_ns = 0;
};

struct Tally {
  uint64_t sent = 0, withheld = 0, admitted = 0, errors = 0, sent_refused = 0, send_errors = 0;
  std::map<std::string, uint64_t> refused;  // by the gate that refused
};

struct HttpAnswer {
  int status = 0;  // 0: no answer
  std::string body;
};

// One request on its own connection (Connection: close), as an agent's HTTP client does.
HttpAnswer http_post(const Endpoint& ep, const std::string& path, const std::string& body) {
  OwnedFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  timeval tv{3, 0};
  ::setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(ep.port);
  if (::inet_pton(AF_INET, ep.host.c_str(), &a.sin_addr) != 1 ||
      ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    return {};
  const std::string req = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
      path, ep.host, ep.port, body.size(), body);
  if (::send(s.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return {};
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::recv(s.get(), buf, sizeof(buf), 0)) > 0;) in.append(buf, n);
  HttpAnswer ans;
  if (in.rfind("HTTP/1.", 0) != 0 || in.size() < 12) return ans;
  ans.status = std::atoi(in.c_str() + 9);
  if (auto end = in.find("\r\n\r\n"); end != std::string::npos) ans.body = in.substr(end + 4);
  return ans;
}

class Agent {
 public:
  Agent(const Setup& s, const TenantSpec& t, uint16_t tenant, uint16_t index, uint16_t sport)
      : s_(s), t_(t), tenant_(tenant), index_(index), sock_(::socket(AF_INET, SOCK_DGRAM, 0)) {
    sockaddr_in src{}, dst{};
    src.sin_family = dst.sin_family = AF_INET;
    src.sin_port = htons(sport);
    dst.sin_port = htons(s.target.port);
    ::inet_pton(AF_INET, s.src.c_str(), &src.sin_addr);
    ::inet_pton(AF_INET, s.target.host.c_str(), &dst.sin_addr);
    int buf = 1 << 20;  // a whole burst fits: no send blocks mid-burst
    ::setsockopt(sock_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (::bind(sock_.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
        ::connect(sock_.get(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0)
      throw std::runtime_error(
          fmt::format("agent socket {}:{}: {}", s.src, sport, std::strerror(errno)));
    flow_ = {{"src", s.src},
             {"sport", sport},
             {"dst", s.target.host},
             {"dport", s.target.port},
             {"proto", "udp"}};
  }

  void run(Tally& tally) {
    std::string request_id;
    for (unsigned cycle = 0; cycle < s_.cycles; ++cycle) {
      const uint64_t burst_at = s_.start_ns + cycle * s_.period_ns + s_.lead_ns;
      sleep_until(burst_at - s_.lead_ns);
      release(request_id);
      const bool admitted = admit(tally, request_id);
      if (!admitted && t_.obeys) {
        tally.withheld += t_.per_burst;
        continue;
      }
      send_burst(burst_at, cycle, admitted, tally);
    }
    sleep_until(s_.start_ns + s_.cycles * s_.period_ns);
    release(request_id);
  }

 private:
  bool admit(Tally& tally, std::string& request_id) {
    const HttpAnswer a =
        http_post(s_.control, "/v1/admit", json({{"tenant", t_.name}, {"flow", flow_}}).dump());
    const json body = json::parse(a.body, nullptr, false);
    if (a.status == 200 && body.is_object() && body.contains("request_id")) {
      ++tally.admitted;
      request_id = body["request_id"].get<std::string>();
      return true;
    }
    if (a.status == 429 && body.is_object() && body.contains("gate"))
      ++tally.refused[body["gate"].get<std::string>()];
    else
      ++tally.errors;
    return false;
  }

  void release(std::string& request_id) {
    if (request_id.empty()) return;
    http_post(s_.control, "/v1/release",
              json({{"tenant", t_.name}, {"request_id", request_id}}).dump());
    request_id.clear();
  }

  // The tenant's agents interleave evenly over the window: request j of agent a is due at
  // (j * agents + a) / (per_burst * agents) of it. A request due within kNoSleepNs leaves at
  // once: one sleep per request would cap an agent at one request per timer wake-up (the
  // thread's 50 us timer slack and the wake-up itself), far below what the high-rate load asks.
  void send_burst(uint64_t burst_at, unsigned cycle, bool admitted, Tally& tally) {
    constexpr uint64_t kNoSleepNs = 200'000;
    std::vector<unsigned char> payload(std::max(s_.size, sizeof(RequestHeader)), 0);
    const uint64_t slots = uint64_t{t_.per_burst} * t_.agents;
    for (unsigned j = 0; j < t_.per_burst; ++j) {
      const uint64_t due = burst_at + s_.window_ns * (uint64_t{j} * t_.agents + index_) / slots;
      if (due > monotonic_ns() + kNoSleepNs) sleep_until(due);
      RequestHeader h;
      h.tenant = tenant_;
      h.agent = index_;
      h.cycle = cycle;
      h.seq = j;
      h.sent_ns = monotonic_ns();
      std::memcpy(payload.data(), &h, sizeof(h));
      if (::send(sock_.get(), payload.data(), payload.size(), 0) < 0) {
        ++tally.send_errors;
        continue;
      }
      ++tally.sent;
      if (!admitted) ++tally.sent_refused;
    }
  }

  const Setup& s_;
  const TenantSpec& t_;
  uint16_t tenant_, index_;
  OwnedFd sock_;
  json flow_;
};

json tenant_json(const TenantSpec& t, const Tally& s) {
  uint64_t refused = 0;
  for (const auto& [gate, n] : s.refused) refused += n;
  return {{"name", t.name},
          {"policy", t.obeys ? "obeys 429" : "ignores 429"},
          {"agents", t.agents},
          {"per_burst", t.per_burst},
          {"sent", s.sent},
          {"withheld", s.withheld},
          {"admitted", s.admitted},
          {"refused", refused},
          {"refused_by_gate", s.refused},
          {"errors", s.errors},
          {"sent_while_refused", s.sent_refused},
          {"send_errors", s.send_errors}};
}

int run(int argc, char** argv) {
  CLI::App app{"dripgate-agents: simulated agent fleets that ask for admission, then burst"};
  Setup s;
  std::string control, target, netns, json_path, period = "1s", window = "10ms", lead = "250ms";
  std::vector<std::string> tenant_args;
  bool quiet = false;
  app.add_option("--control", control, "dripgate-control's HTTP address host:port")->required();
  app.add_option("--target", target, "the cluster's request address host:port")->required();
  app.add_option("--src", s.src, "the agents' source address")->required();
  app.add_option("--sport-base", s.sport_base, "first source port (one per agent)")
      ->capture_default_str();
  app.add_option("--tenant", tenant_args, "name:agents:per_burst:obey|ignore (repeat)")->required();
  app.add_option("--cycles", s.cycles, "bursts per agent")->capture_default_str();
  app.add_option("--period", period, "a cycle's length")->capture_default_str();
  app.add_option("--window", window, "the burst window at the start of each cycle")
      ->capture_default_str();
  app.add_option("--admit-lead", lead, "admission is asked this long before the burst")
      ->capture_default_str();
  app.add_option("--size", s.size, "UDP payload bytes per request")->capture_default_str();
  app.add_option("--netns", netns, "run inside this network namespace");
  app.add_option("--json", json_path, "write what each tenant sent and was told here");
  app.add_flag("--quiet", quiet, "no text report");
  CLI11_PARSE(app, argc, argv);

  const auto parse_ms = [](const std::string& v) {
    const double x = std::stod(v);
    const bool ms = v.ends_with("ms");
    return static_cast<uint64_t>(x * (ms ? 1e6 : 1e9));
  };
  s.period_ns = parse_ms(period);
  s.window_ns = parse_ms(window);
  s.lead_ns = parse_ms(lead);
  if (s.window_ns + s.lead_ns >= s.period_ns)
    throw std::runtime_error("--window plus --admit-lead must be shorter than --period");
  s.control = parse_endpoint(control);
  s.target = parse_endpoint(target);
  std::vector<TenantSpec> tenants;
  for (const auto& t : tenant_args) tenants.push_back(parse_tenant(t));

  ::signal(SIGPIPE, SIG_IGN);
  if (!netns.empty()) enter_netns(netns);  // threads started below inherit it
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::vector<Tally>> tallies(tenants.size());
  uint16_t sport = s.sport_base;
  for (size_t ti = 0; ti < tenants.size(); ++ti) {
    tallies[ti].resize(tenants[ti].agents);
    for (unsigned a = 0; a < tenants[ti].agents; ++a)
      agents.push_back(std::make_unique<Agent>(s, tenants[ti], static_cast<uint16_t>(ti),
                                               static_cast<uint16_t>(a), sport++));
  }
  s.start_ns = monotonic_ns() + 200'000'000;  // every thread is asleep before the first cycle
  std::vector<std::thread> threads;
  size_t k = 0;
  for (size_t ti = 0; ti < tenants.size(); ++ti)
    for (auto& t : tallies[ti]) threads.emplace_back([&a = *agents[k++], &t] { a.run(t); });
  for (auto& t : threads) t.join();

  json out = {{"cycles", s.cycles},
              {"period_ns", s.period_ns},
              {"window_ns", s.window_ns},
              {"tenants", json::array()}};
  uint64_t sent = 0;
  for (size_t ti = 0; ti < tenants.size(); ++ti) {
    Tally sum;
    for (const Tally& t : tallies[ti]) {
      sum.sent += t.sent, sum.withheld += t.withheld, sum.admitted += t.admitted;
      sum.errors += t.errors, sum.sent_refused += t.sent_refused, sum.send_errors += t.send_errors;
      for (const auto& [g, n] : t.refused) sum.refused[g] += n;
    }
    sent += sum.sent;
    out["tenants"].push_back(tenant_json(tenants[ti], sum));
    if (!quiet)
      std::cout << fmt::format("{:<12} sent {:>6}  admitted {:>4}  refused {:>4}  errors {}\n",
                               tenants[ti].name, sum.sent, sum.admitted,
                               out["tenants"].back()["refused"].get<uint64_t>(), sum.errors);
  }
  out["sent"] = sent;
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace dripgate::lab

int main(int argc, char** argv) {
  return dripgate::lab::guarded_main("dripgate-agents", dripgate::lab::run, argc, argv);
}
