#include "tools/iat/serve.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

#include "common/metrics_http.h"
#include "ebpf/iat_probe.h"
#include "tools/iat/metrics.h"

namespace dripgate::iat {
namespace {

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

class SignalFd {
 public:
  explicit SignalFd(const sigset_t& set) : fd_(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) {
    if (fd_ < 0) throw std::runtime_error(fmt::format("signalfd: {}", std::strerror(errno)));
  }
  ~SignalFd() { ::close(fd_); }
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;
  int fd() const { return fd_; }
  int take() const {
    signalfd_siginfo si{};
    return ::read(fd_, &si, sizeof si) == sizeof si ? static_cast<int>(si.ssi_signo) : 0;
  }

 private:
  int fd_;
};

}  // namespace

int serve_metrics(ebpf::IatProbe& probe, const ServeSpec& spec, const sigset_t& stop) {
  SignalFd signals(stop);
  BurstTracker bursts(spec.windows_ns, spec.period_ns);
  common::MetricsHttp http(
      spec.listen, [&] { return render_iat_metrics(probe.snapshot(), bursts, spec.iface); });
  // The period starts here: what the probe saw before (since the load) is the first tick's.
  auto tick = [&](uint64_t now) {
    const std::array<uint64_t, IAT_WINDOWS> peaks = probe.take_window_peaks();
    bursts.tick(now, probe.snapshot().totals.packets,
                std::vector<uint64_t>(peaks.begin(), peaks.begin() + spec.windows_ns.size()));
  };
  uint64_t next = mono_ns();
  tick(next);
  next += spec.tick_ns;
  std::cerr << fmt::format(
                   "dripgate-iat: serving http://{}/metrics (port {}) for {}; SIGTERM or "
                   "Ctrl-C stops and detaches\n",
                   spec.listen, http.port(), spec.where)
            << std::flush;
  for (;;) {
    const uint64_t now = mono_ns();
    if (now >= next) {
      tick(now);
      next = std::max(next + spec.tick_ns, now);  // after a stall, no burst of ticks
    }
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {http.fd(), POLLIN, 0}};
    const auto wait_ms = static_cast<int>((next - std::min(next, mono_ns())) / 1'000'000 + 1);
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    if (fds[0].revents & POLLIN)
      if (const int sig = signals.take()) return sig;
    http.serve();
  }
}

}  // namespace dripgate::iat
