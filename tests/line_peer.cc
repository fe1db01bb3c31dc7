#include "tests/line_peer.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

namespace dripgate::testing {

LinePeer::LinePeer(std::string path, Mode mode, std::string given)
    : path_(std::move(path)), mode_(mode), given_(std::move(given)) {
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
  unlink(path_.c_str());
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 8) != 0)
    throw std::runtime_error("cannot listen on " + path_ + ": " + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

LinePeer::~LinePeer() {
  stop_ = true;
  thread_.join();
  close(fd_);
  unlink(path_.c_str());
}

std::vector<nlohmann::json> LinePeer::lines() {
  std::lock_guard lock(mu_);
  return lines_;
}

std::vector<std::string> LinePeer::raw_lines() {
  std::lock_guard lock(mu_);
  return raw_lines_;
}

std::vector<nlohmann::json> LinePeer::wait_lines(size_t n, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto l = lines();
    if (l.size() >= n) return l;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return lines();
}

std::string LinePeer::answer(const nlohmann::json& line) const {
  if (mode_ == Mode::kSilent) return {};
  if (mode_ == Mode::kAnswerError) return "{\"ok\":false,\"error\":\"no\"}\n";
  if (mode_ == Mode::kAnswerGiven) return given_ + "\n";
  bool request = !line.is_discarded() && line.is_object() && line.contains("op");
  return request ? "{\"ok\":true}\n" : "{\"ok\":false,\"error\":\"bad line\"}\n";
}

void LinePeer::run() {
  std::vector<pollfd> fds{{fd_, POLLIN, 0}};
  std::map<int, std::string> bufs;
  while (!stop_) {
    if (poll(fds.data(), fds.size(), 10) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[i].fd == fd_) {
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) fds.push_back({c, POLLIN, 0});
        continue;
      }
      char buf[4096];
      ssize_t n = recv(fds[i].fd, buf, sizeof buf, 0);
      if (n <= 0) {
        bufs.erase(fds[i].fd);
        close(fds[i].fd);
        fds[i].fd = -1;
        continue;
      }
      auto& b = bufs[fds[i].fd];
      b.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = b.find('\n')) != std::string::npos; b.erase(0, nl + 1)) {
        auto line = nlohmann::json::parse(b.substr(0, nl), nullptr, false);
        {
          std::lock_guard lock(mu_);
          lines_.push_back(line);
          raw_lines_.push_back(b.substr(0, nl));
        }
        std::string a = answer(line);
        if (!a.empty()) send(fds[i].fd, a.data(), a.size(), MSG_NOSIGNAL);
      }
    }
    fds.erase(std::remove_if(fds.begin(), fds.end(), [](const pollfd& p) { return p.fd < 0; }),
              fds.end());
  }
  for (size_t i = 1; i < fds.size(); ++i) close(fds[i].fd);
}

}  // namespace dripgate::testing
