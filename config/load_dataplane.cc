// The `dataplane` section: EAL arguments, ports and lcores, the drip, the traffic classes and
// the rules that classify flows into them.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "common/error.h"
#include "config/load_sections.h"

namespace dripgate::config::loader {

using common::parse_cidr;
using common::quote;

namespace {

void load_eal(Ctx& ctx, const Fields& f, Dataplane& dp) {
  const Entry* e = f.find("eal");
  if (!e) return;
  if (!e->value.IsSequence()) {
    ctx.error(e->value, f.path("eal"), "expected a list of strings, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i)
    if (auto s = get_string(ctx, e->value[i], index(f.path("eal"), i))) dp.eal.push_back(*s);
}

// At most this many RX lcores: more than one per RX queue a NIC offers is rare, and the drip
// lcore polls one ring per RX lcore between departures.
constexpr size_t kMaxRxLcores = 16;

void load_ports_and_lcores(Ctx& ctx, const Fields& f, Dataplane& dp) {
  // The rx_queues node, kept by value: the ports mapping's Fields end with their block, and the
  // check against the RX lcores needs both sections read.
  std::optional<YAML::Node> queues;
  if (const Entry* e = f.find("ports")) {
    Fields p(ctx, e->value, f.path("ports"), {"client", "cluster", "rx_queues"});
    set_int(ctx, p, "client", dp.client_port, 0);
    set_int(ctx, p, "cluster", dp.cluster_port, 0);
    set_int(ctx, p, "rx_queues", dp.rx_queues, 1, 1024);
    if (const Entry* q = p.find("rx_queues")) queues = q->value;
    if (p.ok() && dp.client_port == dp.cluster_port) {
      const Entry* c = p.find("cluster");
      ctx.error(c ? c->value : p.node(), p.path("cluster"),
                "must differ from ports.client (both are " + std::to_string(dp.client_port) + ")");
    }
  }
  if (const Entry* e = f.find("lcores")) {
    Fields l(ctx, e->value, f.path("lcores"), {"rx", "drip"});
    set_int(ctx, l, "drip", dp.drip_lcore, 0, 1023);
    if (const Entry* rx = l.find("rx")) {
      const std::string path = l.path("rx");
      std::vector<unsigned> lcores;
      bool ok = true;
      auto one = [&](const YAML::Node& n, const std::string& at) {
        auto v = get_int(ctx, n, at, 0, 1023);
        if (!v) {
          ok = false;
          return;
        }
        const unsigned lc = static_cast<unsigned>(*v);
        if (std::find(lcores.begin(), lcores.end(), lc) != lcores.end()) {
          ctx.error(n, at, "lcore " + std::to_string(lc) + " is listed twice");
          ok = false;
        }
        lcores.push_back(lc);
      };
      if (rx->value.IsSequence()) {
        if (rx->value.size() == 0 || rx->value.size() > kMaxRxLcores) {
          ctx.error(rx->value, path,
                    "expected 1 to " + std::to_string(kMaxRxLcores) + " lcores, got " +
                        std::to_string(rx->value.size()));
          ok = false;
        }
        for (size_t i = 0; ok && i < rx->value.size(); ++i) one(rx->value[i], index(path, i));
      } else {
        one(rx->value, path);
      }
      if (ok) {
        if (lcores.size() > 1 &&
            std::find(lcores.begin(), lcores.end(), dp.drip_lcore) != lcores.end())
          ctx.error(rx->value, path,
                    "with several RX lcores the drip lcore (" + std::to_string(dp.drip_lcore) +
                        ") must be another one");
        else
          dp.rx_lcores = std::move(lcores);
      }
    }
  }
  if (queues && dp.rx_queues != 0 && dp.rx_queues < dp.rx_lcores.size())
    ctx.error(*queues, f.path("ports") + ".rx_queues",
              "must be at least the number of RX lcores (" + std::to_string(dp.rx_lcores.size()) +
                  "): each polls its own queues");
}

void load_drip(Ctx& ctx, const Fields& f, Drip& drip) {
  const Entry* e = f.find("drip");
  if (!e) return;
  Fields d(ctx, e->value, f.path("drip"), {"rate_pps", "rate_bps", "batch", "max_catchup"});
  set_double(ctx, d, "rate_pps", drip.rate_pps, {0, false, "0 means unlimited"});
  set_double(ctx, d, "rate_bps", drip.rate_bps, {0, false, "0 means unlimited"});
  set_int(ctx, d, "batch", drip.batch, 1);
  set_int(ctx, d, "max_catchup", drip.max_catchup, 0);
}

void load_fairness(Ctx& ctx, const Fields& cf, Class& c) {
  const Entry* e = cf.find("fairness");
  if (!e) return;
  auto s = get_string(ctx, e->value, cf.path("fairness"));
  if (!s) return;
  if (*s == "tenant") {
    c.fairness = Fairness::kTenant;
  } else if (*s == "flow") {
    c.fairness = Fairness::kFlow;
  } else if (*s == "none") {
    c.fairness = Fairness::kNone;
  } else {
    ctx.error(e->value, cf.path("fairness"), "must be one of tenant, flow, none; got " + quote(*s));
  }
}

void load_aqm(Ctx& ctx, const Fields& cf, Class& c) {
  const Entry* e = cf.find("aqm");
  if (!e) return;
  Fields a(ctx, e->value, cf.path("aqm"), {"target_ms", "interval_ms", "ecn"});
  if (!a.ok()) return;
  Aqm aqm;
  // Below a microsecond, CoDel would judge the TSC's own noise; above a minute, it is a TTL.
  set_double(ctx, a, "target_ms", aqm.target_ms,
             {0.001, false, nullptr, 60000, "a minute (use ttl_ms for a hard bound)"});
  set_double(ctx, a, "interval_ms", aqm.interval_ms,
             {0.001, false, nullptr, 60000, "a minute (use ttl_ms for a hard bound)"});
  if (const Entry* b = a.find("ecn")) {
    if (auto v = get_bool(ctx, b->value, a.path("ecn"))) aqm.ecn = *v;
  }
  if (aqm.interval_ms < aqm.target_ms)
    ctx.error(e->value, cf.path("aqm.interval_ms"), "must be >= target_ms");
  c.aqm = aqm;
}

// Returns the names of the classes defined, also of those whose values are bad, so that
// references to them do not fail as well.
std::set<std::string> load_classes(Ctx& ctx, const Fields& f, Dataplane& dp) {
  std::set<std::string> names;
  const Entry* e = f.require("classes");
  if (!e) return names;
  auto es = entries(ctx, e->value, f.path("classes"));
  if (!es) return names;
  if (es->empty()) ctx.error(e->value, f.path("classes"), "at least one class is required");
  for (const auto& ce : *es) {
    std::string path = join(f.path("classes"), ce.key);
    Class c;
    c.name = ce.key;
    bool id_ok = check_id(ctx, ce.key_node, path, ce.key);
    Fields cf(ctx, ce.value, path,
              {"weight", "rate_pps", "rate_bps", "queue_depth", "ttl_ms", "priority", "fairness",
               "subqueues", "tenant_depth", "aqm"});
    set_int(ctx, cf, "weight", c.weight, 1);
    set_double(ctx, cf, "rate_pps", c.rate_pps, {0, false, "0 means unlimited"});
    set_double(ctx, cf, "rate_bps", c.rate_bps, {0, false, "0 means unlimited"});
    set_int(ctx, cf, "queue_depth", c.queue_depth, 1, int64_t{1} << 30);
    set_int(ctx, cf, "ttl_ms", c.ttl_ms, 1);
    set_int(ctx, cf, "priority", c.priority, 0, 255);
    load_fairness(ctx, cf, c);
    set_int(ctx, cf, "subqueues", c.subqueues, 1, 65536);
    set_int(ctx, cf, "tenant_depth", c.tenant_depth, 0);
    load_aqm(ctx, cf, c);
    if (id_ok) names.insert(c.name);
    if (id_ok && cf.ok()) dp.classes.push_back(c);
  }
  return names;
}

void load_rule_network(Ctx& ctx, const Fields& rf, const char* side, Rule& r) {
  const Entry* c = rf.find(side);
  if (!c) return;
  auto s = get_string(ctx, c->value, rf.path(side));
  if (!s) return;
  std::string why;
  auto net = parse_cidr(*s, &why);
  if (!net) {
    ctx.error(c->value, rf.path(side), "bad CIDR " + quote(*s) + ": " + why);
    return;
  }
  (std::string_view(side) == "src" ? r.src : r.dst) = *s;
  (std::string_view(side) == "src" ? r.src_net : r.dst_net) = *net;
}

void load_classify(Ctx& ctx, const Fields& f, Dataplane& dp, std::vector<ClassRef>& refs) {
  const Entry* e = f.find("classify");
  if (!e) return;
  if (!e->value.IsSequence() && !e->value.IsNull()) {
    ctx.error(e->value, f.path("classify"), "expected a list of rules, got " + describe(e->value));
    return;
  }
  for (size_t i = 0; i < e->value.size(); ++i) {
    std::string path = index(f.path("classify"), i);
    Fields rf(ctx, e->value[i], path, {"src", "dst", "vlan", "dscp", "class"});
    if (!rf.ok()) continue;
    Rule r;
    load_rule_network(ctx, rf, "src", r);
    load_rule_network(ctx, rf, "dst", r);
    if (const Entry* c = rf.find("vlan"))
      if (auto v = get_int(ctx, c->value, rf.path("vlan"), 0, 4095))
        r.vlan = static_cast<uint16_t>(*v);
    if (const Entry* c = rf.find("dscp"))
      if (auto v = get_int(ctx, c->value, rf.path("dscp"), 0, 63))
        r.dscp = static_cast<uint8_t>(*v);
    if (const Entry* c = rf.require("class")) {
      if (auto s = get_string(ctx, c->value, rf.path("class"))) {
        r.cls = *s;
        refs.push_back({*s, c->value, rf.path("class"), false});
      }
    }
    dp.classify.push_back(std::move(r));
  }
}

void load_unknown_flows(Ctx& ctx, const Fields& f, const std::set<std::string>& class_names,
                        Dataplane& dp) {
  if (const Entry* e = f.find("unknown_flows")) {
    if (auto s = get_string(ctx, e->value, f.path("unknown_flows"))) {
      if (*s == "default") {
        dp.unknown_flows = UnknownFlows::kDefault;
      } else if (*s == "drop") {
        dp.unknown_flows = UnknownFlows::kDrop;
      } else if (*s == "pass") {
        dp.unknown_flows = UnknownFlows::kPass;
      } else {
        ctx.error(e->value, f.path("unknown_flows"),
                  "must be one of default, drop, pass; got " + quote(*s));
      }
    }
  }
  if (dp.unknown_flows == UnknownFlows::kDefault && f.find("classes") && !class_names.empty() &&
      !class_names.count("default")) {
    const Entry* e = f.find("unknown_flows");
    ctx.error(e ? e->value : f.find("classes")->value,
              e ? f.path("unknown_flows") : f.path("classes"),
              "is 'default' but there is no class named 'default' (defined: " + list(class_names) +
                  "); add one, or set unknown_flows to drop or pass");
  }
}

// Plans and classify rules name classes; each name must be a class of the dataplane.
void check_class_refs(Ctx& ctx, const std::set<std::string>& class_names,
                      const std::vector<ClassRef>& refs) {
  for (const auto& ref : refs) {
    if (class_names.count(ref.name) || class_names.empty()) continue;
    std::string msg = "no class named " + quote(ref.name) +
                      " in dataplane.classes (defined: " + list(class_names) + ")";
    if (ref.implicit) msg = "the plan has no class, so it uses 'default', but there is " + msg;
    ctx.error(ref.at, ref.path, msg);
  }
}

// A group as /etc/group spells one (a name of letters, digits, '_', '-', '.', not starting with
// '-' or a digit; at most 32 bytes), a number, or empty for none. Whether it exists is the
// machine's to say: the dataplane looks it up when it creates the socket.
void load_socket_group(Ctx& ctx, const Fields& f, Dataplane& dp) {
  const Entry* e = f.find("control_socket_group");
  if (!e) return;
  auto s = get_string(ctx, e->value, f.path("control_socket_group"));
  if (!s) return;
  if (s->empty()) return dp.control_socket_group.clear();
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto name_char = [&](char c) {
    return digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' ||
           c == '.';
  };
  const bool number = !s->empty() && s->size() <= 10 && std::all_of(s->begin(), s->end(), digit);
  const bool name = !s->empty() && s->size() <= 32 && !digit(s->front()) && s->front() != '-' &&
                    std::all_of(s->begin(), s->end(), name_char);
  if (!number && !name)
    ctx.error(e->value, f.path("control_socket_group"),
              "must be a group name (letters, digits, '_', '-', '.'; at most 32) or a group "
              "number, got " +
                  quote(*s));
  else
    dp.control_socket_group = *s;
}

}  // namespace

void load_dataplane(Ctx& ctx, const YAML::Node& n, Dataplane& dp, std::vector<ClassRef>& refs) {
  Fields f(ctx, n, "dataplane",
           {"eal", "ports", "lcores", "mbufs", "mtu", "drip", "classes", "classify",
            "unknown_flows", "flow_idle_timeout_s", "flow_table_size", "control_socket",
            "control_socket_group", "metrics_listen"});
  if (!f.ok()) return;
  load_eal(ctx, f, dp);
  load_ports_and_lcores(ctx, f, dp);
  set_int(ctx, f, "mbufs", dp.mbufs, 1);
  // 68: the least every IPv4 link carries (RFC 791); 9216: the largest jumbo MTU NICs commonly
  // accept, and what net_pcap's transmit can copy out of a chain of mbufs.
  set_int(ctx, f, "mtu", dp.mtu, 68, 9216);
  load_drip(ctx, f, dp.drip);
  std::set<std::string> class_names = load_classes(ctx, f, dp);
  load_classify(ctx, f, dp, refs);
  load_unknown_flows(ctx, f, class_names, dp);
  set_int(ctx, f, "flow_idle_timeout_s", dp.flow_idle_timeout_s, 1);
  set_int(ctx, f, "flow_table_size", dp.flow_table_size, 1);
  load_socket_path(ctx, f, "control_socket", dp.control_socket);
  load_socket_group(ctx, f, dp);
  load_listen(ctx, f, "metrics_listen", dp.metrics_listen, true);
  check_class_refs(ctx, class_names, refs);
}

}  // namespace dripgate::config::loader
