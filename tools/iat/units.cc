#include "tools/iat/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "ebpf/iat.h"

namespace dripgate::iat {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

uint64_t parse_duration_ns(std::string_view text) {
  std::string s = trim(text);
  if (s.empty()) throw std::invalid_argument("empty duration");
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v < 0 || !std::isfinite(v))
    throw std::invalid_argument(
        fmt::format("bad duration '{}' (expected e.g. 5s, 100us, 1.5ms)", s));
  std::string unit = trim(std::string_view(ptr, s.data() + s.size() - ptr));
  double mult;
  if (unit.empty() || unit == "s")
    mult = 1e9;
  else if (unit == "ns")
    mult = 1;
  else if (unit == "us" || unit == "\u00b5s")
    mult = 1e3;
  else if (unit == "ms")
    mult = 1e6;
  else if (unit == "m" || unit == "min")
    mult = 60e9;
  else if (unit == "h")
    mult = 3600e9;
  else
    throw std::invalid_argument(
        fmt::format("bad duration unit '{}' in '{}' (use ns, us, ms, s, m, h)", unit, s));
  double ns = v * mult;
  if (ns > 1e18) throw std::invalid_argument(fmt::format("duration '{}' is too long", s));
  return static_cast<uint64_t>(std::llround(ns));
}

std::vector<uint64_t> parse_windows(std::string_view text) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    uint64_t w = parse_duration_ns(text.substr(pos, comma - pos));
    if (w == 0) throw std::invalid_argument("a burst window must be longer than 0");
    out.push_back(w);
    pos = comma + 1;
  }
  if (out.size() > IAT_WINDOWS)
    throw std::invalid_argument(
        fmt::format("at most {} window widths, got {}", IAT_WINDOWS, out.size()));
  return out;
}

std::string format_ns(double ns) {
  if (!std::isfinite(ns)) return "inf";
  struct Unit {
    double scale;
    const char* name;
  };
  static constexpr Unit units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}, {1, "ns"}};
  for (const auto& u : units) {
    if (std::fabs(ns) >= u.scale || u.scale == 1) {
      double v = ns / u.scale;
      // 3 significant digits; "{:.3g}" would switch to exponents at 1000.
      std::string s = std::fabs(v) >= 100  ? fmt::format("{:.0f}", v)
                      : std::fabs(v) >= 10 ? fmt::format("{:.1f}", v)
                                           : fmt::format("{:.2f}", v);
      if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
      }
      return s + u.name;
    }
  }
  return "?";
}

std::string format_rate(double r) {
  if (r >= 1e6) return fmt::format("{:.3g}M/s", r / 1e6);
  if (r >= 1e3) return fmt::format("{:.3g}k/s", r / 1e3);
  return fmt::format("{:.3g}/s", r);
}

}  // namespace dripgate::iat
