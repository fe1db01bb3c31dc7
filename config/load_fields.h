// The loader's node-walking helpers, shared by its sections (internal to config/): the error
// collector (`file:line:col: path.to.field: message`), mappings with a fixed set of keys, and
// typed field readers. A reader that finds a problem reports it and returns nothing (or leaves
// its output as it was), so the caller carries on and every problem of a file is reported.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"

namespace dripgate::config::loader {

std::string join(const std::string& path, std::string_view key);
std::string index(const std::string& path, size_t i);
// What a node is, for "expected X, got Y".
std::string describe(const YAML::Node& n);
// The shortest text that reads back as `v`.
std::string num_str(double v);

// "a, b, c", or "none".
template <class C>
std::string list(const C& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out.empty() ? "none" : out;
}

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// The errors of one load, and whether secrets are read.
class Ctx {
 public:
  Ctx(std::string file, Secrets secrets) : file_(std::move(file)), secrets_(secrets) {}
  bool read_secrets() const { return secrets_ == Secrets::kRead; }

  void error(const YAML::Node& at, std::string path, std::string message);
  void note_null_value(const YAML::Node& value, const YAML::Node& key) {
    null_keys_.emplace(value.Mark().pos, key.Mark());
  }
  void add(const YAML::Mark& m, std::string path, std::string message);
  // The errors in document order; among those at one spot, in the order they were found.
  std::vector<Error> take();
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  Secrets secrets_;
  std::vector<Error> errors_;
  std::map<int, YAML::Mark> null_keys_;  // mark.pos of an empty value -> its key's mark
};

// The entries of a mapping, in document order; keys must be unique non-empty scalars. A null
// value (a section with everything commented out) counts as an empty mapping.
std::optional<std::vector<Entry>> entries(Ctx& ctx, const YAML::Node& n, const std::string& path);

// A mapping with a fixed set of keys.
class Fields {
 public:
  Fields(Ctx& ctx, const YAML::Node& n, std::string path,
         std::initializer_list<std::string_view> allowed);
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  std::string path(std::string_view key) const { return join(path_, key); }

  const Entry* find(std::string_view key) const {
    for (const auto& e : fields_)
      if (e.key == key) return &e;
    return nullptr;
  }
  const Entry* require(std::string_view key) const {
    const Entry* e = find(key);
    if (!e && ok_) ctx_.error(node_, path(key), "required field is missing");
    return e;
  }

 private:
  Ctx& ctx_;
  YAML::Node node_;
  std::string path_;
  bool ok_ = false;
  std::vector<Entry> fields_;
};

// ---- scalars ----

// A scalar in valid UTF-8.
std::optional<std::string> get_string(Ctx& ctx, const YAML::Node& n, const std::string& path);

// true or false (YAML 1.2's spelling; yes/no/on/off are refused as ambiguous).
std::optional<bool> get_bool(Ctx& ctx, const YAML::Node& n, const std::string& path);

// A number; `min_exclusive` for rates and capacities that must be > 0; `max` inclusive, with
// `max_note` saying what it is.
struct NumRule {
  double min = 0;
  bool exclusive = false;
  const char* note = nullptr;
  double max = std::numeric_limits<double>::infinity();
  const char* max_note = nullptr;
};

std::optional<double> get_double(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                 NumRule rule);

// v / 10^decimals as a decimal, without trailing zeros ("1000", "0.5"): a weight or a price as
// it is written in the file (defined in config.cc, which writes them back).
std::string fixed_text(int64_t v, int decimals);

// A non-negative decimal number with at most `decimals` digits after the point, as the integer
// it is times 10^decimals, read from its text (not through a double, in which 0.1 is not 0.1);
// at most `max` (in those units). For weights and prices, which must be exact.
std::optional<int64_t> get_fixed(Ctx& ctx, const YAML::Node& n, const std::string& path,
                                 int decimals, int64_t max);

// An integer in [min, max]; `unbounded`: `max` is only the type's own limit, so a message names
// the minimum alone.
std::optional<int64_t> get_int(Ctx& ctx, const YAML::Node& n, const std::string& path, int64_t min,
                               int64_t max, bool unbounded = false);

// An integer field of type T; without `max`, only T's own range limits it.
template <class T>
void set_int(Ctx& ctx, const Fields& f, std::string_view key, T& out, int64_t min,
             std::optional<int64_t> max = std::nullopt) {
  if (const Entry* e = f.find(key))
    if (auto v = get_int(ctx, e->value, f.path(key), min,
                         max.value_or(static_cast<int64_t>(std::numeric_limits<T>::max())),
                         !max.has_value()))
      out = static_cast<T>(*v);
}

void set_double(Ctx& ctx, const Fields& f, std::string_view key, double& out, NumRule rule);

// A share in (0, 1] (`rule` gives the lower bound and its note); `whole` says what 1 is.
void set_share(Ctx& ctx, const Fields& f, std::string_view key, NumRule rule, const char* whole,
               double& out);

// A non-empty string at `e` (the entry of `key`, or null when it is absent): an empty one is
// refused, since leaving `absent` out is how to say "none".
void set_nonempty_string(Ctx& ctx, const Fields& f, const Entry* e, std::string_view key,
                         std::string_view absent, std::string& out);

bool check_id(Ctx& ctx, const YAML::Node& at, const std::string& path, const std::string& id);

// `mode: enforce | shadow`, in a gate's map (a bucket, quota, concurrency) and in a plan.
void set_gate_mode(Ctx& ctx, const Fields& f, GateMode& out);

// `on_failure: closed | open | local`, in redis and in a plan.
std::optional<OnFailure> get_on_failure(Ctx& ctx, const Fields& f);

// A unix socket path: not empty, and short enough for sockaddr_un.
void load_socket_path(Ctx& ctx, const Fields& f, std::string_view key, std::string& out);

// A host:port to listen on; `off_when_empty`: "" turns the listener off.
void load_listen(Ctx& ctx, const Fields& f, std::string_view key, std::string& out,
                 bool off_when_empty = false);

// ---- secrets ----

// A secret kept out of the YAML: `key_file: PATH` names a file whose first line is the secret
// (systemd's LoadCredential= puts such files under /run/credentials/<unit>/): a regular file of
// at most kMaxSecretBytes, read as the configuration is (regular_file.h), so a wrong path is
// refused unread and without waiting. Sets `file` and `out`; the secret itself never reaches a
// message.
bool load_secret_file(Ctx& ctx, const Fields& f, std::string_view key, std::string& file,
                      std::string& out);

// A secret in the environment: `key_env: NAME` names the variable. Sets `name` and `out`; the
// secret itself never reaches a message. Refused when `other` (the file key) is given too.
bool load_secret_env(Ctx& ctx, const Fields& f, std::string_view key, std::string_view other,
                     std::string& name, std::string& out);

}  // namespace dripgate::config::loader
