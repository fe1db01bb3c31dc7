#include "tests/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace dripgate::testing {

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "<absent>" : it->second;
}

nlohmann::json HttpResponse::body_json() const {
  return nlohmann::json::parse(body, nullptr, false);
}

HttpResponse http(int port, const std::string& method, const std::string& path,
                  const std::string& body, const std::vector<std::string>& extra) {
  HttpResponse r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return r;
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : extra) req += h + "\r\n";
  if (method == "POST") req += "Content-Type: application/json\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return r;
  }
  std::string raw;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::istringstream head(raw.substr(0, end));
  std::string line;
  std::getline(head, line);
  if (line.size() < 12) return r;
  r.status = std::atoi(line.c_str() + 9);  // "HTTP/1.1 200 OK"
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r.headers[name] = value;
  }
  r.body = raw.substr(end + 4);
  return r;
}

void await_redis(int port) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int in_a_row = 0;
  while (in_a_row < 2 && std::chrono::steady_clock::now() < until) {
    in_a_row = http(port, "GET", "/readyz").status == 200 ? in_a_row + 1 : 0;
    if (in_a_row < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace dripgate::testing
