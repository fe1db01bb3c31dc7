// A real redis-server for tests: started on a free loopback port, stopped (and restartable on
// the same port, for "Redis went away" tests) by RAII. Cluster-enabled nodes (for
// tests/redis_cluster.h) keep their nodes.conf in the server's own folder, removed with it.
#pragma once

#include <sys/types.h>

#include <string>

namespace dripgate::testing {

class RedisServer {
 public:
  // kNone: nothing on disk, a restart is empty. kAppendFsyncAlways: every write reaches the
  // append-only file before its reply is sent, and start() after stop() (SIGKILL) loads it, as a
  // durable production Redis does.
  enum class Durability { kNone, kAppendFsyncAlways };
  // Starts; throws std::runtime_error when redis-server cannot start.
  // kCluster: `--cluster-enabled yes`, the cluster bus on a second free port (bus_port()); the
  // node is killed when the thread that started it ends (PR_SET_PDEATHSIG), so start() such
  // nodes from the test's main thread.
  enum class Mode { kStandalone, kCluster };
  explicit RedisServer(Durability durability = Durability::kNone, Mode mode = Mode::kStandalone);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  int bus_port() const { return bus_port_; }  // 0 unless Mode::kCluster
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  void stop();
  void start();  // same port as before
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // SIGSTOP / SIGCONT: a Redis that is alive (connections are accepted by the kernel, nothing
  // is answered) but not running, as in a long fork, a swap storm or a paused VM.
  void pause();
  void resume();
  // Runs redis-cli against this server and returns its stdout (trimmed).
  std::string cli(const std::string& args) const;

 private:
  int port_ = 0;
  int bus_port_ = 0;
  pid_t pid_ = -1;
  Durability durability_;
  Mode mode_;
  std::string dir_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

}  // namespace dripgate::testing
