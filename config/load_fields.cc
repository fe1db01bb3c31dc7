// The loader's node-walking helpers (see load_fields.h).
#include "config/load_fields.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "common/address.h"
#include "common/error.h"
#include "common/id.h"
#include "config/regular_file.h"

namespace dripgate::config::loader {

using common::kSunPathMax;
using common::quote;
using common::valid_id;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return quote(n.Scalar());
    case YAML::NodeType::Null:
      return "nothing (null)";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string num_str(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void Ctx::error(const YAML::Node& at, std::string path, std::string message) {
  YAML::Mark m = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  // An empty value's own mark is wherever the next token starts (often the next line);
  // the key it belongs to is where the user looks.
  if (at.IsDefined() && at.IsNull())
    if (auto it = null_keys_.find(m.pos); it != null_keys_.end()) m = it->second;
  add(m, std::move(path), std::move(message));
}

void Ctx::add(const YAML::Mark& m, std::string path, std::string message) {
  Error e;
  e.file = file_;
  e.line = m.is_null() ? 0 : m.line + 1;
  e.col = m.is_null() ? 0 : m.column + 1;
  e.path = std::move(path);
  e.message = std::move(message);
  errors_.push_back(std::move(e));
}

std::vector<Error> Ctx::take() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const Error& a, const Error& b) {
    return std::tie(a.line, a.col) < std::tie(b.line, b.col);
  });
  return std::move(errors_);
}

std::optional<std::vector<Entry>> entries(Ctx& ctx, const YAML::Node& n, const std::string& path) {
  if (n.IsNull()) return std::vector<Entry>{};
  if (!n.IsMap()) {
    ctx.error(n, path, "expected a mapping, got " + describe(n));
    return std::nullopt;
  }
  std::vector<Entry> out;
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : n) {
    const YAML::Node& k = kv.first;
    if (!k.IsScalar() || k.Scalar().empty()) {
      ctx.error(k, path, "keys must be non-empty strings, got " + describe(k));
      continue;
    }
    auto [it, fresh] = seen.emplace(k.Scalar(), k.Mark());
    if (!fresh) {
      ctx.error(k, join(path, k.Scalar()),
                "duplicate key (first at line " + std::to_string(it->second.line + 1) + ")");
      continue;
    }
    if (kv.second.IsNull()) ctx.note_null_value(kv.second, k);
    out.push_back(Entry{k.Scalar(), k, kv.second});
  }
  return out;
}

Fields::Fields(Ctx& ctx, const YAML::Node& n, std::string path,
               std::initializer_list<std::string_view> allowed)
    : ctx_(ctx), node_(n), path_(std::move(path)) {
  auto es = entries(ctx, n, path_);
  ok_ = es.has_value();
  if (!ok_) return;
  for (auto& e : *es) {
    if (std::find(allowed.begin(), allowed.end(), e.key) == allowed.end()) {
      ctx.error(e.key_node, join(path_, e.key),
                "unknown key " + quote(e.key) + " (allowed: " + list(allowed) + ")");
      continue;
    }
    fields_.push_back(std::move(e));
  }
}

// ---- scalars ----

namespace {

bool is_quoted(const YAML::Node& n) {
  return n.Tag() == "!";
}

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as YAML requires.
bool valid_utf8(std::string_view s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n;  // continuation bytes
    uint32_t cp;
    if (c < 0x80) {
      n = 0, cp = c;
    } else if ((c >> 5) == 0x6) {
      n = 1, cp = c & 0x1F;
    } else if ((c >> 4) == 0xE) {
      n = 2, cp = c & 0x0F;
    } else if ((c >> 3) == 0x1E) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// The whole of `s` as a T, with an optional leading '+' (from_chars takes none); a float must be
// finite. `range` is set when `s` is a well-formed number that T cannot hold.
template <class T>
std::optional<T> parse_number(std::string_view s, bool* range = nullptr) {
  T v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  if (b == e) return std::nullopt;
  auto [end, ec] = std::from_chars(b, e, v);
  if (range && ec == std::errc::result_out_of_range && end == e) *range = true;
  if (ec != std::errc() || end != e) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> get_string(Ctx& ctx, const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) {
    ctx.error(n, path, "expected a string, got " + describe(n));
    return std::nullopt;
  }
  if (!valid_utf8(n.Scalar())) {
    ctx.error(n, path, "not valid UTF-8");
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<bool> get_bool(Ctx& ctx, const YAML::Node& n, const std::string& path) {
  if (n.IsScalar() && !is_quoted(n)) {
    if (n.Scalar() == "true") return true;
    if (n.Scalar() == "false") return false;
  }
  ctx.error(n, path, "expected true or false, got " + describe(n));
  return std::nullopt;
}

std::optional<double> get_double(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                 NumRule rule) {
  if (!n.IsScalar() || is_quoted(n)) {
    ctx.error(
        n, path,
        "expected a number, got " + (n.IsScalar() ? "the string " : std::string()) + describe(n));
    return std::nullopt;
  }
  auto v = parse_number<double>(n.Scalar());
  if (!v) {
    ctx.error(n, path, "expected a number, got " + describe(n));
    return std::nullopt;
  }
  bool bad = rule.exclusive ? !(*v > rule.min) : !(*v >= rule.min);
  if (bad) {
    std::string msg = std::string("must be ") + (rule.exclusive ? "> " : ">= ") +
                      num_str(rule.min) + ", got " + n.Scalar();
    if (rule.note) msg += std::string(" (") + rule.note + ")";
    ctx.error(n, path, msg);
    return std::nullopt;
  }
  if (*v > rule.max) {
    std::string msg = "must be <= " + num_str(rule.max) + ", got " + n.Scalar();
    if (rule.max_note) msg += std::string(" (") + rule.max_note + ")";
    ctx.error(n, path, msg);
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> get_fixed(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                 int decimals, int64_t max) {
  const std::string& t = n.IsScalar() ? n.Scalar() : std::string();
  const std::string shape = "expected a number >= 0 with at most " + std::to_string(decimals) +
                            " decimals, got " + (n.IsScalar() ? t : describe(n));
  if (!n.IsScalar() || is_quoted(n) || t.empty()) {
    ctx.error(n, path, shape);
    return std::nullopt;
  }
  // digits [. digits]: no sign, exponent or hex, which a weight or price is never written with.
  const size_t dot = t.find('.');
  const std::string_view whole = std::string_view(t).substr(0, dot);
  const std::string_view frac =
      dot == std::string::npos ? std::string_view() : std::string_view(t).substr(dot + 1);
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (whole.empty() || !digits(whole) || !digits(frac) ||
      frac.size() > static_cast<size_t>(decimals) || (dot != std::string::npos && frac.empty())) {
    ctx.error(n, path, shape);
    return std::nullopt;
  }
  int64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  int64_t w = 0, f = 0;
  const bool fits =
      whole.size() <= 18 &&
      std::from_chars(whole.data(), whole.data() + whole.size(), w).ec == std::errc{} &&
      w <= max / scale;
  if (!frac.empty()) std::from_chars(frac.data(), frac.data() + frac.size(), f);
  for (size_t i = frac.size(); i < static_cast<size_t>(decimals); ++i) f *= 10;
  if (!fits || w * scale + f > max) {
    ctx.error(n, path, "must be <= " + fixed_text(max, decimals) + ", got " + t);
    return std::nullopt;
  }
  return w * scale + f;
}

std::optional<int64_t> get_int(Ctx& ctx, const YAML::Node& n, const std::string& path, int64_t min,
                               int64_t max, bool unbounded) {
  if (!n.IsScalar() || is_quoted(n)) {
    ctx.error(
        n, path,
        "expected an integer, got " + (n.IsScalar() ? "the string " : std::string()) + describe(n));
    return std::nullopt;
  }
  bool out_of_range = false;
  auto v = parse_number<int64_t>(n.Scalar(), &out_of_range);
  if (!v) {
    ctx.error(n, path,
              out_of_range ? "integer out of range: " + n.Scalar()
                           : "expected an integer, got " + describe(n));
    return std::nullopt;
  }
  if (*v < min || *v > max) {
    // Only the type's own limit as a maximum: the bound users care about is the minimum.
    std::string msg =
        unbounded && *v < min ? "must be >= " + std::to_string(min)
        : unbounded           ? "must be <= " + std::to_string(max)
                    : "must be between " + std::to_string(min) + " and " + std::to_string(max);
    ctx.error(n, path, msg + ", got " + n.Scalar());
    return std::nullopt;
  }
  return v;
}

void set_double(Ctx& ctx, const Fields& f, std::string_view key, double& out, NumRule rule) {
  if (const Entry* e = f.find(key))
    if (auto v = get_double(ctx, e->value, f.path(key), rule)) out = *v;
}

void set_share(Ctx& ctx, const Fields& f, std::string_view key, NumRule rule, const char* whole,
               double& out) {
  const Entry* e = f.find(key);
  if (!e) return;
  auto v = get_double(ctx, e->value, f.path(key), rule);
  if (!v) return;
  if (*v > 1)
    ctx.error(e->value, f.path(key),
              std::string("must be at most 1 (") + whole + "), got " + e->value.Scalar());
  else
    out = *v;
}

void set_nonempty_string(Ctx& ctx, const Fields& f, const Entry* e, std::string_view key,
                         std::string_view absent, std::string& out) {
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path(key));
  if (!s) return;
  if (s->empty())
    ctx.error(e->value, f.path(key),
              "must not be empty (leave " + std::string(absent) + " out for none)");
  else
    out = *s;
}

bool check_id(Ctx& ctx, const YAML::Node& at, const std::string& path, const std::string& id) {
  if (valid_id(id)) return true;
  ctx.error(at, path, quote(id) + " is not a valid id (1 to 64 of A-Z a-z 0-9 . _ -)");
  return false;
}

void set_gate_mode(Ctx& ctx, const Fields& f, GateMode& out) {
  const Entry* e = f.find("mode");
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path("mode"));
  if (!s) return;
  if (auto m = parse_gate_mode(*s))
    out = *m;
  else
    ctx.error(e->value, f.path("mode"),
              "unknown mode " + quote(*s) +
                  "; expected enforce (refuse) or shadow (admit, and name the gate that would "
                  "have refused)");
}

std::optional<OnFailure> get_on_failure(Ctx& ctx, const Fields& f) {
  const Entry* e = f.find("on_failure");
  if (!e) return std::nullopt;
  auto s = get_string(ctx, e->value, f.path("on_failure"));
  if (!s) return std::nullopt;
  auto mode = parse_on_failure(*s);
  if (!mode)
    ctx.error(e->value, f.path("on_failure"),
              "unknown mode " + quote(*s) +
                  "; expected closed (503), open (admit, unchecked) or local (a share of each "
                  "limit, reconciled into Redis later)");
  return mode;
}

void load_socket_path(Ctx& ctx, const Fields& f, std::string_view key, std::string& out) {
  const Entry* e = f.find(key);
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path(key));
  if (!s) return;
  if (s->empty())
    ctx.error(e->value, f.path(key), "must not be empty");
  else if (s->size() > kSunPathMax)
    ctx.error(e->value, f.path(key),
              "a unix socket path is at most " + std::to_string(kSunPathMax) + " bytes, got " +
                  std::to_string(s->size()));
  else
    out = *s;
}

void load_listen(Ctx& ctx, const Fields& f, std::string_view key, std::string& out,
                 bool off_when_empty) {
  const Entry* e = f.find(key);
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path(key));
  if (!s) return;
  if (off_when_empty && s->empty()) {
    out.clear();
    return;
  }
  std::string host;
  std::optional<int> port;
  if (auto why = common::split_host_port(*s, true, host, port))
    ctx.error(e->value, f.path(key),
              "bad listen address " + quote(*s) + ": " + *why +
                  "; expected host:port or [v6-address]:port");
  else
    out = *s;
}

// ---- secrets ----

bool load_secret_file(Ctx& ctx, const Fields& f, std::string_view key, std::string& file,
                      std::string& out) {
  const Entry* e = f.find(key);
  if (!e) return false;
  auto path = get_string(ctx, e->value, f.path(key));
  if (!path) return false;
  file = *path;
  if (!ctx.read_secrets()) return true;
  static constexpr FileRule kRule{kMaxSecretBytes, "a secret", "a secret file"};
  std::string text;
  if (auto why = read_regular_file(*path, kRule, text)) {
    ctx.error(e->value, f.path(key), quote(*path) + ": " + *why);
    return false;
  }
  std::string_view line(text);
  line = line.substr(0, line.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {
    ctx.error(e->value, f.path(key), "the first line of " + quote(*path) + " is empty");
    return false;
  }
  out = line;
  return true;
}

bool load_secret_env(Ctx& ctx, const Fields& f, std::string_view key, std::string_view other,
                     std::string& name, std::string& out) {
  const Entry* e = f.find(key);
  if (!e) return false;
  auto var = get_string(ctx, e->value, f.path(key));
  if (!var) return false;
  bool ok = !var->empty() && !std::isdigit(static_cast<unsigned char>((*var)[0]));
  for (char c : *var) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok) {
    ctx.error(e->value, f.path(key),
              "bad environment variable name " + quote(*var) + "; expected [A-Za-z_][A-Za-z0-9_]*");
    return false;
  }
  if (f.find(other)) {
    ctx.error(e->value, f.path(key),
              std::string(other) + " is set too; give the secret in one place");
    return false;
  }
  name = *var;
  if (!ctx.read_secrets()) return true;
  const char* value = std::getenv(var->c_str());
  if (!value || !*value) {
    ctx.error(e->value, f.path(key),
              "environment variable " + *var + (value ? " is empty" : " is not set"));
    return false;
  }
  out = value;
  return true;
}

}  // namespace dripgate::config::loader
