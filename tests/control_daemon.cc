#include "tests/control_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "tests/http_client.h"
#include "tests/redis_server.h"

namespace dripgate::testing {

ControlDaemon::ControlDaemon(const std::string& binary, const std::string& config_yaml,
                             const std::vector<std::string>& extra_args)
    : port_(free_port()) {
  char tmpl[] = "/tmp/dripgate-control-XXXXXX";
  dir_ = mkdtemp(tmpl);
  const std::string cfg = dir_ + "/control.yaml";
  const std::string log = dir_ + "/daemon.log";
  std::ofstream(cfg) << config_yaml;
  std::vector<std::string> args = {binary, "--config", cfg, "--listen",
                                   "127.0.0.1:" + std::to_string(port_)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (http(port_, "GET", "/healthz").status != 0) {  // 503 "down" while Redis is away
      ready_ = true;
      await_redis(port_);
      return;
    }
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ControlDaemon::~ControlDaemon() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ControlDaemon::log() const {
  std::ifstream in(dir_ + "/daemon.log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace dripgate::testing
