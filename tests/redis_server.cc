#include "tests/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dripgate::testing {

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind() to 127.0.0.1:0 failed");
  }
  int port = ntohs(sa.sin_port);
  ::close(fd);
  return port;
}

static bool can_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

RedisServer::RedisServer(Durability durability, Mode mode) : durability_(durability), mode_(mode) {
  char tmpl[] = "/tmp/dripgate-redis-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  port_ = free_port();
  // The bus port is set explicitly: the default, port + 10000, may be taken or past 65535.
  if (mode_ == Mode::kCluster) do
      bus_port_ = free_port();
    while (bus_port_ == port_);
  start();
}

RedisServer::~RedisServer() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void RedisServer::start() {
  if (pid_ > 0) return;
  std::string port = std::to_string(port_);
  const bool aof = durability_ == Durability::kAppendFsyncAlways;
  std::string bus = std::to_string(bus_port_);
  std::vector<const char*> argv = {"redis-server",
                                   "--port",
                                   port.c_str(),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   aof ? "yes" : "no",
                                   "--appendfsync",
                                   aof ? "always" : "everysec",
                                   "--dir",
                                   dir_.c_str(),
                                   "--loglevel",
                                   "warning"};
  if (mode_ == Mode::kCluster) {
    // nodes.conf and the log (a cluster's chatter) land in --dir. A short node timeout so that a
    // lost node is noticed within a test; a replica syncs at once (the diskless sync otherwise
    // waits 5 s for more replicas); the masters still up keep serving their slots while a dead
    // one's are not taken over yet (the setting a gateway's cluster wants); a test may put a
    // node to sleep in band (DEBUG SLEEP, local connections only).
    for (const char* a : {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                          "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0",
                          "--logfile", "redis.log", "--cluster-require-full-coverage", "no",
                          "--enable-debug-command", "local", "--cluster-port"})
      argv.push_back(a);
    argv.push_back(bus.c_str());
  }
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // A cluster's six nodes must not outlive a test that crashed before its destructors ran.
    if (mode_ == Mode::kCluster &&
        (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent))
      _exit(127);
    ::execvp("redis-server", const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  pid_ = pid;
  for (int i = 0; i < 500; ++i) {
    if (can_connect(port_)) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start (is it installed?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop();
  throw std::runtime_error("redis-server did not accept connections within 5 s");
}

void RedisServer::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  // The port is free once the listening socket is gone.
  for (int i = 0; i < 200 && can_connect(port_); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

std::string RedisServer::cli(const std::string& args) const {
  std::string cmd = "redis-cli -p " + std::to_string(port_) + " " + args + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = ::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace dripgate::testing
