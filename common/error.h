// How dripgate reports a problem in something a person wrote (a YAML file, a command-line
// value): `file:line:col: path.to.field: message`, with the offending value quoted and cut so
// that one bad line cannot flood a terminal or a log.
#pragma once

#include <string>
#include <string_view>

namespace dripgate::common {

struct Error {
  std::string file;
  int line = 0;      // 1-based; 0 for a problem with the whole file (cannot open it)
  int col = 0;       // 1-based
  std::string path;  // the field, e.g. `dataplane.classes.gold.rate_pps`; empty for syntax errors
  std::string message;

  std::string str() const;
};

// A value in single quotes for a message; values over 60 bytes are cut and end in "...".
std::string quote(std::string_view value);

}  // namespace dripgate::common
