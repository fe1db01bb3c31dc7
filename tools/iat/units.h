// Units of dripgate-iat's command line and reports: durations in, nanoseconds and rates out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dripgate::iat {

inline constexpr uint64_t kDefaultWindows[] = {100'000, 1'000'000};  // 100 us, 1 ms

// "5s", "100us", "1.5ms", "250ns", "2m"; a bare number is seconds. Throws std::invalid_argument.
uint64_t parse_duration_ns(std::string_view text);
// "100us,1ms" -> {100000, 1000000}; at most IAT_WINDOWS widths (the probe's limit).
std::vector<uint64_t> parse_windows(std::string_view text);
// 3 significant digits with a unit: 1024 -> "1.02us", 1000000 -> "1ms".
std::string format_ns(double ns);
std::string format_rate(double per_second);

}  // namespace dripgate::iat
