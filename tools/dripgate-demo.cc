// dripgate-demo: replays the rate-limit walkthrough (a token bucket, a monthly token quota, three
// stacked gates) through dripgate-control's HTTP API and prints each run's decisions. The daemon
// must run on config/examples/walkthrough.yaml, which defines the tenants named here (the
// embedded default defines none); tools/demo.sh starts Redis and the daemon on it around this.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace {

using json = nlohmann::json;

struct Reply {
  int status = 0;
  json body;
};

// One blocking request per connection: the demo is sequential by nature.
Reply post(const std::string& host, int port, const std::string& path, const json& body) {
  Reply r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return r;
  }
  std::string payload = body.dump();
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host +
                    "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(payload.size()) + "\r\n\r\n" + payload;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) < 0) {
    close(fd);
    return r;
  }
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  auto end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.body = json::parse(raw.substr(end + 4), nullptr, false);
  return r;
}

double remaining_of(const Reply& r, const char* gate) {
  if (!r.body.is_object() || !r.body.contains("remaining")) return -1;
  const json& rem = r.body["remaining"];
  return rem.contains(gate) ? rem[gate].get<double>() : -1;
}

bool check(const Reply& r) {
  if (r.status == 200 || r.status == 429) return true;
  std::fprintf(stderr, "dripgate-demo: unexpected answer %d %s\n", r.status,
               r.body.is_discarded() ? "(no JSON body)" : r.body.dump().c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dripgate-demo: the rate-limit walkthrough, through dripgate-control"};
  std::string host = "127.0.0.1";
  int port = 8080;
  app.add_option("--host", host, "dripgate-control address (IPv4)");
  app.add_option("--port", port, "dripgate-control port");
  CLI11_PARSE(app, argc, argv);

  // A tenant bucket 5 @ 1/s, six requests, 2 s pause, two more.
  std::printf("token bucket: tenant ws-acme, capacity=5, refill=1/s\n");
  auto bucket_request = [&](int i) {
    Reply r = post(host, port, "/v1/admit", {{"tenant", "ws-acme"}});
    if (!check(r)) return false;
    std::printf("  request %d: %d  remaining tokens %.2f\n", i, r.status,
                remaining_of(r, "tenant"));
    return true;
  };
  for (int i = 1; i <= 6; ++i)
    if (!bucket_request(i)) return 1;
  std::printf("  ... waiting 2 s for the bucket to refill ...\n");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (int i = 7; i <= 8; ++i)
    if (!bucket_request(i)) return 1;

  // A quota of 1000 LLM tokens a month. Each admission reserves its estimate; the demo
  // then settles with the same count (the real count of a finished request).
  std::printf("\ntoken quota: tenant ws-quota, 1000 tokens per month\n");
  for (int cost : {300, 300, 300, 300, 100, 1}) {
    Reply r = post(host, port, "/v1/admit", {{"tenant", "ws-quota"}, {"tokens", cost}});
    if (!check(r)) return 1;
    double remaining = remaining_of(r, "quota");
    if (r.status == 200) {
      Reply s =
          post(host, port, "/v1/settle",
               {{"tenant", "ws-quota"}, {"request_id", r.body["request_id"]}, {"tokens", cost}});
      if (s.status != 200) {
        std::fprintf(stderr, "dripgate-demo: settle answered %d\n", s.status);
        return 1;
      }
      remaining = s.body["remaining"].get<double>();
    }
    std::printf("  cost %4d: %d  remaining quota %4.0f\n", cost, r.status, remaining);
  }

  // Stacked gates: tenant 20 @ 5, user 6 @ 2, tool web_search 2 @ 0.5: the tool gate refuses first.
  std::printf(
      "\nthree gates: tenant ws-gates (20 @ 5/s), user alice (6 @ 2/s), "
      "tool web_search (2 @ 0.5/s)\n");
  for (int i = 1; i <= 5; ++i) {
    Reply r = post(host, port, "/v1/admit",
                   {{"tenant", "ws-gates"}, {"user", "alice"}, {"tool", "web_search"}});
    if (!check(r)) return 1;
    if (r.status == 200) {
      std::printf("  request %d: 200  allowed  (tenant %.2f, user %.2f, tool %.2f left)\n", i,
                  remaining_of(r, "tenant"), remaining_of(r, "user"), remaining_of(r, "tool"));
    } else {
      std::string gate = r.body.value("gate", "?");
      std::printf(
          "  request %d: 429  refused by gate '%s' (%.4f tokens left, retry after %lld ms)\n", i,
          gate.c_str(), remaining_of(r, gate.c_str()),
          static_cast<long long>(r.body.value("retry_after_ms", int64_t{0})));
    }
  }
  return 0;
}
