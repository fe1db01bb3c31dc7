#include "common/prom_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace dripgate::common {

namespace {

// The most labels a selector names: a bit each in a mask.
constexpr size_t kMaxSelectorLabels = 16;

bool name_start(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool name_char(char c, bool colon) {
  return name_start(c, colon) || (c >= '0' && c <= '9');
}

// A cursor over one line, or over a selector.
struct Cursor {
  std::string_view s;
  size_t i = 0;

  bool end() const { return i >= s.size(); }
  char peek() const { return end() ? '\0' : s[i]; }
  void blanks() {
    while (!end() && (s[i] == ' ' || s[i] == '\t')) ++i;
  }
  // A metric name (colon: ':' allowed) or a label name; empty when none is here.
  std::string_view name(bool colon) {
    size_t b = i;
    if (end() || !name_start(s[i], colon)) return {};
    while (!end() && name_char(s[i], colon)) ++i;
    return s.substr(b, i - b);
  }
  // A quoted label value, unescaped into out (\\, \", \n); false when malformed.
  bool quoted(std::string& out, std::string& why) {
    out.clear();
    if (peek() != '"') return why = "expected '\"' to open a label value", false;
    for (++i; !end(); ++i) {
      char c = s[i];
      if (c == '"') return ++i, true;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (++i >= s.size()) break;
      char e = s[i];
      if (e == 'n')
        out.push_back('\n');
      else if (e == '\\' || e == '"')
        out.push_back(e);
      else
        return why = std::string("unknown escape '\\") + e + "' in a label value", false;
    }
    return why = "unterminated label value", false;
  }
  // `{name="value",...}` (a trailing comma allowed); each label is given to `label`.
  template <class F>
  bool labels(std::string& value, std::string& why, F&& label) {
    ++i;  // '{'
    for (;;) {
      blanks();
      if (peek() == '}') return ++i, true;
      std::string_view n = name(false);
      if (n.empty()) return why = "expected a label name or '}'", false;
      blanks();
      if (peek() != '=') return why = "expected '=' after label " + std::string(n), false;
      ++i;
      blanks();
      if (!quoted(value, why)) return false;
      if (!label(n, value, why)) return false;
      blanks();
      if (peek() == ',') {
        ++i;
        continue;
      }
      if (peek() != '}') return why = "expected ',' or '}' after a label", false;
      return ++i, true;
    }
  }
};

// A sample value as Go's ParseFloat writes them: decimal, "NaN", "+Inf", "-Inf".
std::optional<double> parse_value(std::string_view v) {
  if (v.empty()) return std::nullopt;
  bool neg = false;
  if (v.front() == '+' || v.front() == '-') {
    neg = v.front() == '-';
    v.remove_prefix(1);
  }
  if (v.empty() || v.front() == '+' || v.front() == '-') return std::nullopt;
  double d = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d, std::chars_format::general);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return neg ? -d : d;
}

bool parse_timestamp(std::string_view t) {
  if (!t.empty() && t.front() == '-') t.remove_prefix(1);
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ms);
  return !t.empty() && ec == std::errc() && end == t.data() + t.size();
}

}  // namespace

std::optional<PromSelector> parse_prom_selector(std::string_view text, std::string* why) {
  std::string w;
  auto fail = [&](std::string m) -> std::optional<PromSelector> {
    if (why) *why = std::move(m);
    return std::nullopt;
  };
  Cursor c{text};
  PromSelector sel;
  sel.name = std::string(c.name(true));
  if (sel.name.empty()) return fail("expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
  if (c.peek() == '{') {
    std::string value;
    bool ok = c.labels(value, w, [&](std::string_view n, const std::string& v, std::string& e) {
      for (const auto& [have, _] : sel.labels)
        if (have == n) return e = "label " + std::string(n) + " named twice", false;
      if (sel.labels.size() == kMaxSelectorLabels)
        return e = "more than " + std::to_string(kMaxSelectorLabels) + " labels", false;
      sel.labels.emplace_back(n, v);
      return true;
    });
    if (!ok) return fail(w);
  }
  if (!c.end())
    return fail("unexpected '" + std::string(text.substr(c.i)) + "' after the selector");
  return sel;
}

std::string_view prom_aggregate_name(PromAggregate a) {
  return a == PromAggregate::kSum ? "sum" : "max";
}

std::optional<PromAggregate> parse_prom_aggregate(std::string_view name) {
  for (PromAggregate a : {PromAggregate::kMax, PromAggregate::kSum})
    if (prom_aggregate_name(a) == name) return a;
  return std::nullopt;
}

namespace {

// Walks the sample lines of `body`, checking each: want(name) says whether a line's labels and
// value matter (its labels go to label(name, value), then its value to sample(value));
// comments and blank lines are skipped. "" when every line is the format, else "line N: why".
template <class Want, class Label, class Sample>
std::string scan(std::string_view body, Want&& want, Label&& label, Sample&& sample) {
  std::string value;  // a label value, unescaped; reused
  size_t line_no = 0;
  for (size_t pos = 0; pos < body.size();) {
    size_t nl = body.find('\n', pos);
    std::string_view line = body.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? body.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Cursor c{line};
    c.blanks();
    if (c.end() || c.peek() == '#') continue;
    auto bad = [&](const std::string& why) { return "line " + std::to_string(line_no) + ": " + why; };
    std::string_view name = c.name(true);
    if (name.empty()) return bad("expected a metric name");
    const bool ours = want(name);
    const size_t after_name = c.i;
    c.blanks();
    if (c.peek() != '{') c.i = after_name;  // the blanks before the value, checked below
    if (c.peek() == '{') {
      std::string why;
      bool ok = c.labels(value, why, [&](std::string_view n, const std::string& v, std::string&) {
        if (ours) label(n, v);
        return true;
      });
      if (!ok) return bad(why);
    }
    size_t before = c.i;
    c.blanks();
    if (c.i == before && !c.end()) return bad("expected a blank before the value");
    size_t vb = c.i;
    while (!c.end() && c.peek() != ' ' && c.peek() != '\t') ++c.i;
    std::optional<double> v = parse_value(line.substr(vb, c.i - vb));
    if (!v) return bad("expected a number, got '" + std::string(line.substr(vb, c.i - vb)) + "'");
    c.blanks();
    if (!c.end()) {
      size_t tb = c.i;
      while (!c.end() && c.peek() != ' ' && c.peek() != '\t') ++c.i;
      if (!parse_timestamp(line.substr(tb, c.i - tb))) return bad("expected a timestamp in ms");
      c.blanks();
      if (!c.end()) return bad("unexpected text after the timestamp");
    }
    if (ours) sample(*v);
  }
  return {};
}

}  // namespace

PromReading read_prom_metric(std::string_view body, const PromSelector& sel, PromAggregate agg) {
  PromReading r;
  const uint32_t all = (1u << sel.labels.size()) - 1;
  uint32_t matched = 0;
  bool any = false;
  std::string error = scan(
      body,
      [&](std::string_view name) {
        matched = 0;
        return name == sel.name;
      },
      [&](std::string_view n, const std::string& v) {
        for (size_t k = 0; k < sel.labels.size(); ++k)
          if (sel.labels[k].first == n && sel.labels[k].second == v) matched |= 1u << k;
      },
      [&](double v) {
        if (matched != all) return;
        ++r.series;
        if (std::isnan(v)) return;
        r.value = !any ? v : agg == PromAggregate::kSum ? r.value + v : std::max(r.value, v);
        any = true;
      });
  if (!error.empty()) {
    r = {};
    r.status = PromReading::Status::kParse;
    r.error = std::move(error);
    return r;
  }
  if (any)
    r.status = PromReading::Status::kOk;
  else
    r.status = r.series > 0 ? PromReading::Status::kNan : PromReading::Status::kAbsent;
  return r;
}

std::string read_prom_samples(std::string_view body, std::span<const std::string_view> names,
                              std::vector<PromSample>& out) {
  out.clear();
  PromSample s;
  std::string error = scan(
      body,
      [&](std::string_view name) {
        s.labels.clear();
        for (std::string_view n : names)
          if (n == name) return s.name = n, true;
        return false;
      },
      [&](std::string_view n, const std::string& v) { s.labels.emplace_back(n, v); },
      [&](double v) {
        s.value = v;
        out.push_back(s);
      });
  if (!error.empty()) out.clear();
  return error;
}

}  // namespace dripgate::common
