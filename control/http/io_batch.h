// IoBatch: the reads and the answers of one event-loop pass done in one io_uring submission
// each, instead of one read() or send() per connection. A system call costs about a microsecond
// of CPU on a paravirtualised guest (the VMs this daemon is measured on), as much as the rest
// of a decision's HTTP work, and at admission rate one loop pass reads tens of requests and one
// Redis reply batch answers tens of clients. Every operation is non-blocking (MSG_DONTWAIT):
// it completes within the submission (done, partly done, or EAGAIN), as read() or send() on a
// non-blocking socket would, and the caller carries on with each result as it did with theirs.
// Where the kernel refuses io_uring (an old kernel, a seccomp profile,
// kernel.io_uring_disabled), create() says why and the caller keeps its system calls.
#pragma once

#include <liburing.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace dripgate::control {

class IoBatch {
 public:
  // One recv into [data, data + len) or send of it; result: bytes or -errno.
  struct Op {
    int fd = -1;
    char* data = nullptr;
    size_t len = 0;
    bool send = false;
    ssize_t result = 0;
  };

  // Null, with why, when the kernel refuses a ring.
  static std::unique_ptr<IoBatch> create(unsigned entries, std::string& why);
  ~IoBatch();
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  // How many operations one run() takes at most.
  size_t capacity() const { return entries_; }

  // Runs every op (at most capacity()) in one submission and fills in their results. False when
  // the ring itself failed: an op without a result then has -EIO (a send's bytes may or may
  // not have gone, so its connection must close; a recv's too, as its bytes may be lost), and
  // the ring is to be dropped.
  bool run(std::span<Op> ops);

 private:
  IoBatch() = default;
  io_uring ring_{};
  size_t entries_ = 0;
};

}  // namespace dripgate::control
