#include "common/json_writer.h"

#include <array>
#include <cmath>

namespace dripgate {

JsonWriter& JsonWriter::number(double v) {
  if (!std::isfinite(v)) return null();
  value_prefix();
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, r.ptr);
  return *this;
}

namespace {

// The bytes a JSON string escapes: control characters, '"' and '\\' (UTF-8 passes through).
constexpr auto kEscaped = [] {
  std::array<bool, 256> t{};
  for (size_t c = 0; c < 0x20; ++c) t[c] = true;
  t['"'] = t['\\'] = true;
  return t;
}();

}  // namespace

void JsonWriter::string_literal(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out_ += '"';
  // Runs that need no escape (nearly every string: names, ids, reasons) are appended whole: a
  // character at a time, each with its own capacity check, was the writer's main cost. A byte
  // is told apart by one table look-up.
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (!kEscaped[c]) continue;
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

}  // namespace dripgate
