#include "control/http/openai_headers.h"

#include <charconv>
#include <string_view>

namespace dripgate::control::api {
namespace {

bool request_gate(std::string_view g) {
  return g == "tenant" || g == "user" || g == "api_key" || g == "ip";
}

bool token_gate(std::string_view g) {
  return g == "tenant_tokens" || g == "user_tokens" || g == "api_key_tokens";
}

// Whether a binds before b: less left, or as little left and longer to wait for the rest.
bool binds_first(const Remaining& a, const Remaining* b) {
  if (!b) return true;
  if (a.value != b->value) return a.value < b->value;
  return reset_ms_of(a) > reset_ms_of(*b);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

}  // namespace

OpenAiLimits openai_limits(const std::vector<Remaining>& remaining) {
  OpenAiLimits l;
  for (const Remaining& r : remaining) {
    if (request_gate(r.gate) && binds_first(r, l.requests)) l.requests = &r;
    if (token_gate(r.gate) && binds_first(r, l.tokens)) l.tokens = &r;
  }
  return l;
}

int64_t reset_ms_of(const Remaining& r) {
  if (r.reset_ms >= 0) return r.reset_ms;
  return r.reset_s > 0 ? r.reset_s * 1000 : 0;
}

void append_go_duration(std::string& out, int64_t ms) {
  if (ms <= 0) {
    out += "0s";
    return;
  }
  if (ms < 1000) {
    append_int(out, ms);
    out += "ms";
    return;
  }
  const int64_t h = ms / 3'600'000, m = ms / 60'000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
  if (h > 0) {
    append_int(out, h);
    out += 'h';
  }
  if (h > 0 || m > 0) {
    append_int(out, m);
    out += 'm';
  }
  append_int(out, s);
  if (frac > 0) {  // three digits, trailing zeros dropped: 1.5s, 17.28s, 2.005s
    char digits[4] = {static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                      static_cast<char>('0' + frac % 10), 0};
    size_t n = 3;
    while (digits[n - 1] == '0') --n;
    out += '.';
    out.append(digits, n);
  }
  out += 's';
}

std::string go_duration(int64_t ms) {
  std::string out;
  append_go_duration(out, ms);
  return out;
}

}  // namespace dripgate::control::api
