// YAML -> Config: the entry points (config.h) and the walk of the document, whose top-level
// sections are each read by their own load_<section>.cc (load_sections.h) with the helpers of
// load_fields.h. Every problem is collected as `file:line:col: path.to.field: message` instead
// of stopping at the first one, so a user fixes a file in one pass. Nothing here throws to the
// caller: any input gives a result.
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "config/load_sections.h"
#include "config/regular_file.h"

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

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& name, Secrets secrets) {
  loader::Ctx ctx(name, secrets);
  if (yaml.size() > kMaxConfigBytes) {
    ctx.add(YAML::Mark::null_mark(), "",
            "the configuration has " + std::to_string(yaml.size()) + " bytes; it is at most " +
                size_text(kMaxConfigBytes));
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
  static constexpr FileRule kRule{kMaxConfigBytes, "a configuration", "a YAML file"};
  if (auto why = read_regular_file(path, kRule, text)) return Error{path, 0, 0, "", *why};
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
