#include "common/error.h"

namespace dripgate::common {

std::string Error::str() const {
  // A file-level problem (cannot open) has no position; a syntax error has no field path.
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(col);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

std::string quote(std::string_view value) {
  constexpr size_t kMax = 60;
  std::string out = "'";
  out += value.size() > kMax ? std::string(value.substr(0, kMax)) + "..." : std::string(value);
  return out + "'";
}

}  // namespace dripgate::common
