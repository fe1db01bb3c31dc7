// A real dripgate-control for tests that talk to it over HTTP: its own temporary directory
// (config file, log), a free port, started by fork/exec and ready once /healthz answers 200;
// killed (SIGKILL) and its directory removed on destruction.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dripgate::testing {

class ControlDaemon {
 public:
  // binary: the dripgate-control to run; config_yaml: the file given as --config (its
  // control.listen is overridden by --listen); extra_args: more command-line flags.
  ControlDaemon(const std::string& binary, const std::string& config_yaml,
                const std::vector<std::string>& extra_args = {});
  ~ControlDaemon();
  ControlDaemon(const ControlDaemon&) = delete;
  ControlDaemon& operator=(const ControlDaemon&) = delete;

  bool ready() const { return ready_; }  // /healthz answered within 10 s
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace dripgate::testing
