// What the lab programs share: the request datagram the agents send and the receiver reads, a
// file descriptor that closes itself, and entering a network namespace.
#pragma once

#include <cstdint>
#include <string>

namespace dripgate::lab {

// The first bytes of every request datagram; the rest of the payload is zeroes.
struct RequestHeader {
  static constexpr uint32_t kMagic = 0x44474c42;  // "DGLB"
  uint32_t magic = kMagic;
  uint16_t tenant = 0;  // index of the tenant in the agents' --tenant order
  uint16_t agent = 0;
  uint32_t cycle = 0;
  uint32_t seq = 0;
  uint64_t sent_ns = 0;  // CLOCK_MONOTONIC at the sender
};

class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Moves the calling thread (and the threads it starts later) into namespace `name` (a name
// under /run/netns or a path); throws std::runtime_error when that fails.
void enter_netns(const std::string& name);

uint64_t monotonic_ns();
// Sleeps until CLOCK_MONOTONIC reaches `due` (no spinning: the lab's senders are many threads
// on one core, and a late wake-up only makes a burst burstier).
void sleep_until(uint64_t due);

// "host:port" -> IPv4 address and port; throws std::runtime_error on anything else.
struct Endpoint {
  std::string host;
  uint16_t port = 0;
};
Endpoint parse_endpoint(const std::string& text);

// main() of a lab program: run(argc, argv), or "prog: message" on stderr and exit 1 when it
// throws.
int guarded_main(const char* prog, int (*run)(int, char**), int argc, char** argv);

}  // namespace dripgate::lab
