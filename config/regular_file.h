// Reading a file that a path names, without trusting what is there: the configuration file
// (loader.cc) and the secret files its *_file keys name (load_fields.cc). A wrong path can name
// a directory, /dev/zero (read for gigabytes before a size check), a FIFO without a writer
// (waited on forever) or a log of gigabytes; each is refused, unread and without waiting.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dripgate::config {

// What a file read by read_regular_file may be, and the words its refusals use.
struct FileRule {
  size_t max_bytes;
  const char* holds;  // what the file holds: "a configuration" (is at most ..., is read from ...)
  const char* file;   // what a directory is not: "a YAML file"
};

// "16 MiB", "64 KiB", or "N bytes".
std::string size_text(size_t bytes);

// Reads the regular file at path into text: nullopt when read, else why not, to follow the
// path ("is a directory, not a YAML file"). The path is stat'ed before it is opened, so that
// anything but a regular file within the limit is refused unopened; it is opened non-blocking
// and the descriptor fstat'ed again, since the path can change in between (a FIFO put there
// then opens at once, and is refused); at most rule.max_bytes + 1 bytes are read, whatever the
// size said (a file growing while it is read, or /proc's, which say 0).
std::optional<std::string> read_regular_file(const std::string& path, const FileRule& rule,
                                             std::string& text);

}  // namespace dripgate::config
