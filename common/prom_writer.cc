#include "common/prom_writer.h"

#include <charconv>
#include <cmath>

namespace dripgate::common {

void append_prom_escaped(std::string& out, std::string_view v, bool label_value) {
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && label_value)
      out += "\\\"";
    else
      out += c;
  }
}

void append_prom_family(std::string& out, std::string_view name, std::string_view type,
                        std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  append_prom_escaped(out, help, false);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

std::string PromWriter::number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

void PromWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  append_prom_family(out_, name, type, help);
}

void PromWriter::series(std::string_view name, Labels labels, std::string_view le) {
  out_ += name;
  bool first = true;
  auto label = [&](std::string_view k, std::string_view v) {
    out_ += first ? '{' : ',';
    first = false;
    out_ += k;
    out_ += "=\"";
    append_prom_escaped(out_, v, true);
    out_ += '"';
  };
  for (const auto& [k, v] : labels)
    if (!v.empty()) label(k, v);
  if (!le.empty()) label("le", le);
  if (!first) out_ += '}';
  out_ += ' ';
}

void PromWriter::sample(std::string_view name, Labels labels, uint64_t value) {
  series(name, labels);
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, value);
  out_.append(buf, r.ptr);
  out_ += '\n';
}

void PromWriter::sample(std::string_view name, Labels labels, double value) {
  series(name, labels);
  out_ += number(value);
  out_ += '\n';
}

void PromWriter::histogram(std::string_view name, Labels labels, const std::vector<double>& bounds,
                           const std::vector<uint64_t>& cumulative, double sum, uint64_t count) {
  const std::string bucket = std::string(name) + "_bucket";
  for (size_t i = 0; i < bounds.size() && i < cumulative.size(); ++i) {
    series(bucket, labels, number(bounds[i]));
    out_ += std::to_string(cumulative[i]);
    out_ += '\n';
  }
  series(bucket, labels, "+Inf");
  out_ += std::to_string(count);
  out_ += '\n';
  sample(std::string(name) + "_sum", labels, sum);
  sample(std::string(name) + "_count", labels, count);
}

}  // namespace dripgate::common
