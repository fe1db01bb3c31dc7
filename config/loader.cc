// YAML -> Config: the entry points (config.h) and the walk of the document, whose top-level
// sections are each read by their own load_<section>.cc (load_sections.h) with the helpers of
// load_fields.h. Every problem is collected as `file:line:col: path.to.field: message` instead
// of stopping at the first one, so a user fixes a file in one pass. Nothing here throws to the
// caller: any input gives a result.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/load_sections.h"

namespace dripgate::config {

namespace embedded {
extern const char default_yaml[];
extern const unsigned long default_yaml_size;
}  // namespace embedded

namespace {

using namespace loader;

// Where each document of a stream starts, without building nodes. yaml-cpp 0.7.0 (Debian 12)
// can report a document without consuming any input (a stray ',' at the top level), and its
// LoadAll() then loops forever, allocating (jbeder/yaml-cpp#1040, fixed upstream by #1319);
// so we never call LoadAll and stop as soon as a document starts where the previous one did.
// The same pass stops at the first collection nested deeper than kMaxDepth: yaml-cpp's own guard
// trips much deeper, after seconds of work, and says only "bad file" at the end of the input.
constexpr int kMaxDepth = 64;

struct TooDeep {
  YAML::Mark at;
};

class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxDepth) throw TooDeep{mark};
  }
  int depth_ = 0;
};

// Checks the document structure of the stream: false (with the error added) when the parser
// is stuck; `second` is set when there is more than one document.
bool scan_documents(Ctx& ctx, const std::string& yaml, std::optional<YAML::Mark>& second) {
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  DocumentStarts h;
  for (;;) {
    try {
      if (h.starts.size() >= 2 || !parser.HandleNextDocument(h)) break;
    } catch (const TooDeep& deep) {
      ctx.add(deep.at, "",
              "nested deeper than " + std::to_string(kMaxDepth) +
                  " levels; a configuration "
                  "is a few levels deep");
      return false;
    }
    const auto& s = h.starts;
    // A null document at the very spot of an unconsumed token: the parser made no progress.
    bool stuck = s.size() >= 2 && s[s.size() - 1].pos == s[s.size() - 2].pos;
    if (!stuck && s.size() == 1 && static_cast<size_t>(s[0].pos) < yaml.size() &&
        yaml[s[0].pos] == ',') {
      stuck = true;
    }
    if (stuck) {
      const YAML::Mark& m = s.back();
      char c = static_cast<size_t>(m.pos) < yaml.size() ? yaml[m.pos] : '?';
      ctx.add(m, "", std::string("YAML syntax error: unexpected '") + c + "'");
      return false;
    }
  }
  if (h.starts.size() >= 2) second = h.starts[1];
  return true;
}

void load_root(Ctx& ctx, const YAML::Node& root, Config& cfg) {
  if (root.IsNull()) {
    ctx.add(YAML::Mark(), "",
            "the configuration is empty; expected a mapping of redis, control, plans, tenants, "
            "global_gates, dataplane");
    return;
  }
  Fields f(ctx, root, "", {"redis", "control", "plans", "tenants", "global_gates", "dataplane"});
  if (!f.ok()) return;
  LocalModeUse local;
  if (const Entry* e = f.find("redis")) load_redis(ctx, e->value, cfg.redis, local);
  if (const Entry* e = f.find("control")) load_control(ctx, e->value, cfg.control);

  std::vector<ClassRef> refs;
  std::set<std::string> plan_names;
  if (const Entry* e = f.find("plans"))
    load_plans(ctx, e->value, cfg.plans, plan_names, refs, local);
  if (const Entry* e = f.find("tenants")) load_tenants(ctx, e->value, plan_names, cfg.tenants);
  if (const Entry* e = f.find("global_gates")) load_global_gates(ctx, e->value, cfg.global_gates);
  // Local decisions are charged to Redis later, from the journal: without one a restart during
  // an outage would forget them.
  if (local.at && cfg.redis.journal.empty())
    ctx.error(*local.at, local.path,
              "local needs redis.journal: the file that keeps the local decisions until they are "
              "reconciled into Redis");
  if (const Entry* e = f.find("dataplane")) {
    Dataplane dp;
    load_dataplane(ctx, e->value, dp, refs);
    cfg.dataplane = std::move(dp);
  }
}

// A file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Why what st describes is not read as a configuration ("" when it is: a regular file within
// the limit).
std::string not_a_config_file(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "is a directory, not a YAML file";
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return std::string("is ") + kind +
           ", not a regular file; a configuration is read from a regular file";
  }
  if (static_cast<uintmax_t>(st.st_size) > kMaxConfigBytes)
    return "the file has " + std::to_string(st.st_size) + " bytes; a configuration is at most " +
           std::to_string(kMaxConfigBytes >> 20) + " MiB";
  return "";
}

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& name, Secrets secrets) {
  loader::Ctx ctx(name, secrets);
  if (yaml.size() > kMaxConfigBytes) {
    ctx.add(YAML::Mark::null_mark(), "",
            "the configuration has " + std::to_string(yaml.size()) + " bytes; it is at most " +
                std::to_string(kMaxConfigBytes >> 20) + " MiB");
    return LoadResult{std::nullopt, ctx.take()};
  }
  Config cfg;
  cfg.source = name;
  try {
    std::optional<YAML::Mark> second;
    if (scan_documents(ctx, yaml, second)) {
      if (second)
        ctx.add(*second, "", "more than one YAML document; a config file holds exactly one");
      load_root(ctx, YAML::Load(yaml), cfg);
    }
  } catch (const YAML::Exception& e) {
    // Syntax errors come with their position; the message is yaml-cpp's own, without the
    // "yaml-cpp: error at line..." prefix that what() adds.
    ctx.add(e.mark, "", "YAML syntax error: " + e.msg);
  } catch (const std::exception& e) {
    ctx.add(YAML::Mark::null_mark(), "", std::string("cannot read the configuration: ") + e.what());
  }
  LoadResult r;
  r.errors = ctx.take();
  if (r.errors.empty()) r.config = std::move(cfg);
  return r;
}

std::optional<Error> read_config_file(const std::string& path, std::string& text) {
  auto refuse = [&](std::string why) { return Error{path, 0, 0, "", std::move(why)}; };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return refuse(std::string("cannot open: ") + std::strerror(errno));
  if (std::string why = not_a_config_file(st); !why.empty()) return refuse(std::move(why));
  // O_NONBLOCK: a FIFO put in the file's place since the stat opens at once instead of waiting
  // for a writer (and is then refused by its fstat); a regular file reads the same with it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) return refuse(std::string("cannot open: ") + std::strerror(errno));
  if (::fstat(fd.get(), &st) != 0)
    return refuse(std::string("cannot read: ") + std::strerror(errno));
  if (std::string why = not_a_config_file(st); !why.empty()) return refuse(std::move(why));
  text.clear();
  // One more byte than allowed tells a file that grew past the limit from one at it.
  const size_t cap = kMaxConfigBytes + 1;
  text.resize(std::min(static_cast<size_t>(st.st_size), kMaxConfigBytes) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (text.size() == cap) break;
      text.resize(std::min(cap, text.size() * 2));
    }
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  if (got > kMaxConfigBytes)
    return refuse("the file grew past " + std::to_string(kMaxConfigBytes >> 20) +
                  " MiB while it was read; a configuration is at most that");
  return std::nullopt;
}

LoadResult load_file(const std::string& path, Secrets secrets) {
  std::string text;
  if (auto why = read_config_file(path, text)) {
    LoadResult r;
    r.errors.push_back(std::move(*why));
    return r;
  }
  return load_string(text, path, secrets);
}

const std::string& default_yaml() {
  static const std::string text(embedded::default_yaml, embedded::default_yaml_size);
  return text;
}

LoadResult load_default() {
  return load_string(default_yaml(), "<embedded default>");
}

}  // namespace dripgate::config
