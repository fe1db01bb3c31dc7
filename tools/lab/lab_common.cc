#include "tools/lab/lab_common.h"

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <fmt/format.h>

namespace dripgate::lab {

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

void enter_netns(const std::string& name) {
  const std::string path = name.find('/') == std::string::npos ? "/run/netns/" + name : name;
  OwnedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || ::setns(fd.get(), CLONE_NEWNET) != 0)
    throw std::runtime_error(
        fmt::format("cannot enter network namespace {}: {}", path, std::strerror(errno)));
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_until(uint64_t due) {
  timespec ts{static_cast<time_t>(due / 1'000'000'000ull),
              static_cast<long>(due % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

Endpoint parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::runtime_error(fmt::format("'{}': expected host:port", text));
  Endpoint e{text.substr(0, colon), 0};
  try {
    const int port = std::stoi(text.substr(colon + 1));
    if (port <= 0 || port > 65535) throw std::out_of_range("port");
    e.port = static_cast<uint16_t>(port);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("'{}': bad port", text));
  }
  return e;
}

int guarded_main(const char* prog, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << prog << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace dripgate::lab
