#include "control/json_writer.h"

#include <cmath>

namespace dripgate::control {

JsonWriter& JsonWriter::number(double v) {
  if (!std::isfinite(v)) return null();
  value_prefix();
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, r.ptr);
  return *this;
}

void JsonWriter::string_literal(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out_ += '"';
  // Runs that need no escape (nearly every string: names, ids, reasons) are appended whole: a
  // character at a time, each with its own capacity check, was the writer's main cost.
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;  // UTF-8 passes through
    out_.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        out_ += "\\u00";
        out_ += kHex[c >> 4];
        out_ += kHex[c & 0xf];
    }
  }
  out_.append(s.data() + run, s.size() - run);
  out_ += '"';
}

}  // namespace dripgate::control
