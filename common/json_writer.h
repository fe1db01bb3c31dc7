// A JSON writer straight into a string: the API's response bodies are a handful of flat fields,
// and building an nlohmann tree for each (a heap node per value, a map per object) cost more
// than the rest of rendering. Numbers via std::to_chars (no locale, no printf); strings escaped
// per RFC 8259. The caller writes well-formed structure (key before each member value); the
// writer adds the commas.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace dripgate {

// v in decimal at the end of out (JSON integers, header values, the status line).
inline void append_integer(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(std::string_view k) {
    if (!first_) out_ += ',';
    string_literal(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& string(std::string_view v) {
    value_prefix();
    string_literal(v);
    return *this;
  }
  JsonWriter& integer(int64_t v) {
    value_prefix();
    append_integer(out_, v);
    return *this;
  }
  // The shortest text that reads back as v; a non-finite v (not JSON) as null.
  JsonWriter& number(double v);
  JsonWriter& boolean(bool v) {
    value_prefix();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& null() {
    value_prefix();
    out_ += "null";
    return *this;
  }

 private:
  JsonWriter& open(char bracket) {
    value_prefix();
    out_ += bracket;
    first_ = true;
    return *this;
  }
  JsonWriter& close(char bracket) {
    out_ += bracket;
    first_ = false;
    return *this;
  }
  // Members after a key take no comma (the key had it); top-level and array values would.
  void value_prefix() {
    if (after_key_) {
      after_key_ = false;
    } else if (!first_) {
      out_ += ',';
    }
    first_ = false;
  }
  void string_literal(std::string_view s);

  std::string& out_;
  bool first_ = true;
  bool after_key_ = false;
};

}  // namespace dripgate
