// A file system whose lookups wait until the test releases them: a FUSE file system served by
// the test itself (the kernel's protocol on /dev/fuse, linux/fuse.h; no libfuse). A path under it
// stands for a file on a hung mount (a network file system whose server went away): a stat() or
// open() of it waits in the kernel, however the caller opens it, which no local file can make
// it do (a FIFO or a device is refused before it is opened). Needs root, as the tests do.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dripgate::testing {

class HungMount {
 public:
  // Mounts at a new directory under /tmp and serves it on a thread; error() says why not.
  HungMount();
  // Fails what still waits, unmounts and removes the directory.
  ~HungMount();
  HungMount(const HungMount&) = delete;
  HungMount& operator=(const HungMount&) = delete;

  const std::string& error() const { return error_; }  // empty: mounted
  const std::string& path() const { return path_; }    // the mount point

  // Waits until `n` lookups have arrived since the mount, for up to `guard` (a test that
  // would otherwise hang fails instead): false if they did not.
  bool lookups_reached(int n, std::chrono::milliseconds guard = std::chrono::seconds(10));
  // How many lookups arrived since the mount.
  int lookups();
  // Answers the lookups waiting now: no such file. Those that arrive later wait again.
  void release();

 private:
  void serve();
  void reply(uint64_t unique, int error, const void* body = nullptr, size_t size = 0);

  std::string path_, error_;
  int fuse_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: the serving thread's poll ends on it
  std::thread server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int lookups_ = 0;
  std::vector<uint64_t> waiting_;  // the held lookups' request ids
};

}  // namespace dripgate::testing
