#include "config/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace dripgate::config {

namespace {

// A file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Why what st describes is not read under rule ("" when it is: a regular file within the
// limit).
std::string refusal(const struct stat& st, const FileRule& rule) {
  if (S_ISDIR(st.st_mode)) return std::string("is a directory, not ") + rule.file;
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return std::string("is ") + kind + ", not a regular file; " + rule.holds +
           " is read from a regular file";
  }
  if (static_cast<uintmax_t>(st.st_size) > rule.max_bytes)
    return "the file has " + std::to_string(st.st_size) + " bytes; " + rule.holds + " is at most " +
           size_text(rule.max_bytes);
  return "";
}

}  // namespace

std::string size_text(size_t bytes) {
  if (bytes > 0 && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes > 0 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::optional<std::string> read_regular_file(const std::string& path, const FileRule& rule,
                                             std::string& text) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string("cannot open: ") + std::strerror(errno);
  if (std::string why = refusal(st, rule); !why.empty()) return why;
  // O_NONBLOCK: a FIFO put in the file's place since the stat opens at once instead of waiting
  // for a writer (and is then refused by its fstat); a regular file reads the same with it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) return std::string("cannot open: ") + std::strerror(errno);
  if (::fstat(fd.get(), &st) != 0) return std::string("cannot read: ") + std::strerror(errno);
  if (std::string why = refusal(st, rule); !why.empty()) return why;
  text.clear();
  // One more byte than allowed tells a file that grew past the limit from one at it.
  const size_t cap = rule.max_bytes + 1;
  text.resize(std::min(static_cast<size_t>(st.st_size), rule.max_bytes) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (text.size() == cap) break;
      text.resize(std::min(cap, text.size() * 2));
    }
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("cannot read: ") + std::strerror(errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  if (got > rule.max_bytes)
    return "the file grew past " + size_text(rule.max_bytes) + " while it was read; " + rule.holds +
           " is at most that";
  return std::nullopt;
}

}  // namespace dripgate::config
