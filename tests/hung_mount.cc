#include "tests/hung_mount.h"

#include <linux/fuse.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dripgate::testing {

HungMount::HungMount() {
  char tmpl[] = "/tmp/dg-hung-XXXXXX";
  if (!mkdtemp(tmpl)) {
    error_ = std::string("mkdtemp: ") + std::strerror(errno);
    return;
  }
  path_ = tmpl;
  fuse_fd_ = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fuse_fd_ < 0) {
    error_ = std::string("/dev/fuse: ") + std::strerror(errno);
    return;
  }
  const std::string options = "fd=" + std::to_string(fuse_fd_) +
                              ",rootmode=40000,user_id=" + std::to_string(getuid()) +
                              ",group_id=" + std::to_string(getgid());
  if (::mount("dripgate-hung", path_.c_str(), "fuse", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    error_ = "mount fuse at " + path_ + ": " + std::strerror(errno);
    ::close(fuse_fd_);
    fuse_fd_ = -1;
    return;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  server_ = std::thread([this] { serve(); });
}

HungMount::~HungMount() {
  if (server_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    server_.join();
  }
  // MNT_FORCE aborts the connection: a lookup still waiting fails (ECONNABORTED) instead of
  // waiting on. Closing /dev/fuse would too, but only when no forked child holds a copy.
  if (fuse_fd_ >= 0) {
    ::umount2(path_.c_str(), MNT_FORCE | MNT_DETACH);
    ::close(fuse_fd_);
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (!path_.empty()) ::rmdir(path_.c_str());
}

bool HungMount::lookups_reached(int n, std::chrono::milliseconds guard) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, guard, [&] { return lookups_ >= n; });
}

int HungMount::lookups() {
  std::lock_guard lock(mu_);
  return lookups_;
}

void HungMount::release() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    ids.swap(waiting_);
  }
  for (uint64_t id : ids) reply(id, -ENOENT);
}

void HungMount::reply(uint64_t unique, int error, const void* body, size_t size) {
  fuse_out_header h{};
  h.len = static_cast<uint32_t>(sizeof h + size);
  h.error = error;
  h.unique = unique;
  iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(body), size}};
  // A request the kernel gave up on (its process ended) is refused with ENOENT: nothing to do.
  (void)!::writev(fuse_fd_, iov, size ? 2 : 1);
}

void HungMount::serve() {
  // The kernel refuses a read into less than FUSE_MIN_READ_BUFFER, or than a write request of
  // max_write would take.
  std::vector<char> buf(FUSE_MIN_READ_BUFFER + 64 * 1024);
  for (;;) {
    pollfd p[2] = {{fuse_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno == EINTR) continue;
    if (p[1].revents) return;
    const ssize_t n = ::read(fuse_fd_, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return;  // unmounted (ENODEV)
    fuse_in_header in{};
    std::memcpy(&in, buf.data(), sizeof in);
    switch (in.opcode) {
      case FUSE_INIT: {
        fuse_init_in init{};
        std::memcpy(&init, buf.data() + sizeof in,
                    std::min(sizeof init, static_cast<size_t>(n) - sizeof in));
        fuse_init_out out{};
        out.major = FUSE_KERNEL_VERSION;
        out.minor = FUSE_KERNEL_MINOR_VERSION;
        out.max_readahead = init.max_readahead;
        out.max_background = 16;
        out.congestion_threshold = 12;
        out.max_write = 64 * 1024;
        out.time_gran = 1;
        reply(in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_LOOKUP: {
        std::lock_guard lock(mu_);
        ++lookups_;
        waiting_.push_back(in.unique);
        cv_.notify_all();
        break;
      }
      case FUSE_GETATTR: {  // the root, the only node there is
        fuse_attr_out out{};
        out.attr.ino = FUSE_ROOT_ID;
        out.attr.mode = S_IFDIR | 0755;
        out.attr.nlink = 2;
        reply(in.unique, 0, &out, sizeof out);
        break;
      }
      case FUSE_FORGET:
      case FUSE_BATCH_FORGET:
      case FUSE_INTERRUPT:  // the request it names is answered when released
        break;
      default:
        reply(in.unique, -ENOSYS);
    }
  }
}

}  // namespace dripgate::testing
