#include "control/http/io_batch.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace dripgate::control {

std::unique_ptr<IoBatch> IoBatch::create(unsigned entries, std::string& why) {
  std::unique_ptr<IoBatch> b(new IoBatch());
  // Completions are reaped right after each submission, so the default completion queue (twice
  // the submission queue) never overflows. No SQPOLL: a kernel thread polling for submissions
  // would spend a core.
  const int err = io_uring_queue_init(entries, &b->ring_, 0);
  if (err < 0) {
    why = std::string("io_uring: ") + std::strerror(-err);
    return nullptr;
  }
  b->entries_ = b->ring_.sq.ring_entries;
  return b;
}

IoBatch::~IoBatch() {
  io_uring_queue_exit(&ring_);
}

bool IoBatch::run(std::span<Op> ops) {
  if (ops.size() > entries_) ops = ops.first(entries_);
  for (size_t i = 0; i < ops.size(); ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: the queue is empty here
    Op& op = ops[i];
    if (op.send)
      io_uring_prep_send(sqe, op.fd, op.data, op.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    else
      io_uring_prep_recv(sqe, op.fd, op.data, op.len, MSG_DONTWAIT);
    io_uring_sqe_set_data64(sqe, i);
    op.result = -EIO;
  }
  int submitted;
  do {
    submitted = io_uring_submit(&ring_);
  } while (submitted == -EINTR);
  if (submitted < 0) return false;
  // MSG_DONTWAIT: each completes within the submission; the wait is only for one the kernel
  // handed to a worker thread, which returns at once as well.
  for (int k = 0; k < submitted; ++k) {
    io_uring_cqe* cqe = nullptr;
    int err;
    do {
      err = io_uring_wait_cqe(&ring_, &cqe);
    } while (err == -EINTR);
    if (err < 0) return false;
    const uint64_t i = io_uring_cqe_get_data64(cqe);
    if (i < ops.size()) ops[i].result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
  }
  // Some not taken: they stay queued in the ring, which must not be used again.
  return static_cast<size_t>(submitted) == ops.size();
}

}  // namespace dripgate::control
