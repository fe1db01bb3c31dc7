// dripgate-lab-report: the lab's side-by-side table. Each --phase NAME=DIR is one run of the
// same offered load (DIR holds agents.json, receiver.json, dataplane.json and, when the probe
// ran, iat.json); a NAME given more than once is a repeated round, shown as the median with
// every round listed below. Each row says where its figure comes from: the agents' own counts,
// the receiver's socket (kernel receive stamps), the NIC ring modelled on those stamps, the
// eBPF probe on the cluster's veth, or the gateway dataplane's counters. --claim BEFORE,AFTER
// checks the lab's claim (lab_claim.h; the columns AFTER-alone and AFTER-fifo are the fairness
// load's baselines, every other column is a tc shaper AFTER is compared with) and sets the exit
// code.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/lab/lab_claim.h"
#include "tools/lab/lab_common.h"

namespace dripgate::lab {
namespace {

using nlohmann::json;

struct Phase {
  std::string name, dir;
  json agents, receiver, dataplane, iat;  // null when the file is missing
};

json load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return nullptr;
  json j = json::parse(f, nullptr, false);
  return j.is_discarded() ? json(nullptr) : j;
}

// Phases grouped by name, in the order the names first appear: one column each.
using Groups = std::vector<std::pair<std::string, std::vector<const Phase*>>>;

Groups group(const std::vector<Phase>& phases) {
  Groups g;
  for (const Phase& p : phases) {
    auto it = std::find_if(g.begin(), g.end(), [&](auto& e) { return e.first == p.name; });
    if (it == g.end()) it = g.insert(g.end(), {p.name, {}});
    it->second.push_back(&p);
  }
  return g;
}

using Getter = std::function<std::optional<double>(const Phase&)>;

std::optional<double> median(const std::vector<const Phase*>& rounds, const Getter& get) {
  std::vector<double> v;
  for (const Phase* p : rounds)
    if (auto x = get(*p)) v.push_back(*x);
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Getter field(const char* file, std::string path) {
  return [file, path](const Phase& p) -> std::optional<double> {
    const json& root = std::string(file) == "agents"      ? p.agents
                       : std::string(file) == "receiver"  ? p.receiver
                       : std::string(file) == "dataplane" ? p.dataplane
                                                          : p.iat;
    if (root.is_null()) return std::nullopt;
    const json::json_pointer ptr(path);
    if (!root.contains(ptr) || !root.at(ptr).is_number()) return std::nullopt;
    return root.at(ptr).get<double>();
  };
}

enum class Kind { kCount, kTenths, kNs, kRatio };

std::string format_value(std::optional<double> v, Kind k) {
  if (!v) return "-";
  switch (k) {
    case Kind::kCount:
      return fmt::format("{:.0f}", *v);
    case Kind::kTenths:
      return fmt::format("{:.1f}", *v);
    case Kind::kRatio:
      return fmt::format("{:.2f}x", *v);
    case Kind::kNs:
      if (*v >= 1e6) return fmt::format("{:.1f} ms", *v / 1e6);
      if (*v >= 1e3) return fmt::format("{:.1f} us", *v / 1e3);
      return fmt::format("{:.0f} ns", *v);
  }
  return "-";
}

struct Row {
  std::string label;
  std::function<std::string(const std::vector<const Phase*>&)> cell;  // none: a section title
};

Row section(std::string title) {
  return {std::move(title), nullptr};
}

Row numeric(std::string label, Getter get, Kind k = Kind::kCount) {
  return {std::move(label),
          [get, k](const std::vector<const Phase*>& r) { return format_value(median(r, get), k); }};
}

// The probe's own count for a window width (dripgate-iat's JSON), as a cross-check.
Getter iat_window(uint64_t width_ns) {
  return [width_ns](const Phase& p) -> std::optional<double> {
    if (p.iat.is_null()) return std::nullopt;
    for (const json& w : p.iat.value("windows", json::array()))
      if (w.value("width_ns", uint64_t{0}) == width_ns) return w.value("max_count", 0.0);
    return std::nullopt;
  };
}

std::vector<Row> tenant_rows(const std::vector<Phase>& phases) {
  std::vector<Row> rows;
  // The tenants of the phase that ran the most (a baseline phase may run one of them alone,
  // always the first: the same index in every phase).
  const json* first = nullptr;
  for (const Phase& p : phases)
    if (p.agents.is_object() &&
        (first == nullptr || p.agents["tenants"].size() > first->at("tenants").size()))
      first = &p.agents;
  if (first == nullptr) return rows;
  for (size_t i = 0; i < first->at("tenants").size(); ++i) {
    const json& t = first->at("tenants")[i];
    const std::string base = "/tenants/" + std::to_string(i) + "/";
    rows.push_back(
        numeric(fmt::format("{} ({}): sent", t.value("name", "?"), t.value("policy", "?")),
                field("agents", base + "sent")));
    rows.push_back({"  admitted / refused (gate)", [base, i](const std::vector<const Phase*>& r) {
                      std::set<std::string> gates;
                      for (const Phase* p : r)
                        if (p->agents.is_object() && i < p->agents["tenants"].size())
                          for (auto& [g, n] : p->agents["tenants"][i]["refused_by_gate"].items())
                            gates.insert(g);
                      std::string gs;
                      for (const auto& g : gates) gs += (gs.empty() ? " (" : ",") + g;
                      return fmt::format(
                          "{} / {}{}",
                          format_value(median(r, field("agents", base + "admitted")), Kind::kCount),
                          format_value(median(r, field("agents", base + "refused")), Kind::kCount),
                          gs.empty() ? "" : gs + ")");
                    }});
    // The same index in receiver.json's tenants as in agents.json's.
    rows.push_back(numeric("  delivered (ring modelled)", field("receiver", base + "delivered")));
    rows.push_back({"  share of all delivered", [base](const std::vector<const Phase*>& r) {
                      const auto share = median(r, [base](const Phase& p) -> std::optional<double> {
                        const auto d = field("receiver", base + "delivered")(p);
                        const auto all = field("receiver", "/delivered")(p);
                        if (!d || !all || *all <= 0) return std::nullopt;
                        return 100 * *d / *all;
                      });
                      return share ? fmt::format("{:.1f}%", *share) : "-";
                    }});
    rows.push_back(numeric("  delay p99, send -> socket", field("receiver", base + "delay_p99_ns"),
                           Kind::kNs));
  }
  return rows;
}

std::vector<Row> dataplane_rows(const std::vector<Phase>& phases) {
  std::vector<Row> rows = {
      numeric("gateway drops: queue full", field("dataplane", "/drops/depth")),
      numeric("gateway drops: sub-queue full", field("dataplane", "/drops/subqueue")),
      numeric("gateway drops: waited past ttl", field("dataplane", "/drops/ttl")),
      numeric("gateway drops: tx ring full", field("dataplane", "/drops/tx_full")),
      numeric("gateway drops: rx ring / unknown", [](const Phase& p) -> std::optional<double> {
        if (!p.dataplane.is_object()) return std::nullopt;
        const json& d = p.dataplane["drops"];
        return d.value("ring", 0.0) + d.value("unknown", 0.0) + d.value("pass_tx_full", 0.0);
      })};
  std::set<std::string> classes;
  for (const Phase& p : phases)
    if (p.dataplane.is_object())
      for (auto& [c, v] : p.dataplane["classes"].items()) classes.insert(c);
  for (const std::string& c : classes)
    rows.push_back(
        {"  class " + c + ": sent / full / ttl", [c](const std::vector<const Phase*>& r) {
           const std::string b = "/classes/" + c + "/";
           return fmt::format(
               "{} / {} / {}",
               format_value(median(r, field("dataplane", b + "tx_pkts")), Kind::kCount),
               format_value(median(r, field("dataplane", b + "drops/depth")), Kind::kCount),
               format_value(median(r, field("dataplane", b + "drops/ttl")), Kind::kCount));
         }});
  return rows;
}

// "2,000" for 2000.
std::string thousands(double v) {
  std::string s = fmt::format("{:.0f}", v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::vector<Row> all_rows(const std::vector<Phase>& phases, const json& ring) {
  std::vector<Row> rows = {
      section("counted by the agents"),
      numeric("offered packets (agents sent)", field("agents", "/sent")),
      section("measured at the receiver socket (kernel stamps)"),
      numeric("reached the cluster NIC", field("receiver", "/received")),
      numeric("lost in the receiver socket", field("receiver", "/kernel_dropped")),
      numeric("inter-arrival p50", field("receiver", "/iat_p50_ns"), Kind::kNs),
      numeric("inter-arrival p99", field("receiver", "/iat_p99_ns"), Kind::kNs),
      numeric("p99 jitter |gap - 1/rate|", field("receiver", "/jitter_p99_ns"), Kind::kNs),
      numeric("peak packets in any 100 us", field("receiver", "/peak_100us")),
      numeric("peak packets in any 1 ms", field("receiver", "/peak_1ms")),
      numeric("peak packets in any 10 ms", field("receiver", "/peak_10ms")),
      numeric("burst factor (1.0 = at the rate)", field("receiver", "/burst_factor"), Kind::kRatio),
      section(fmt::format("modelled: NIC ring of {} descriptors drained at {}/s, fed the "
                          "receiver's arrival stamps",
                          ring.value("descriptors", 0), thousands(ring.value("drain_pps", 0.0)))),
      numeric("NIC ring drops (modelled)", field("receiver", "/ring_dropped")),
      numeric("most descriptors in use (modelled)", field("receiver", "/ring/max_fill"),
              Kind::kTenths),
      numeric("delivered to inference (modelled)", field("receiver", "/delivered")),
      section("measured by the eBPF probe at the cluster veth (cluster0)"),
      numeric("packets", field("iat", "/packets")),
      numeric("most in a 1 ms window", iat_window(1'000'000)),
      section("counted by the gateway dataplane"),
  };
  for (Row& r : dataplane_rows(phases)) rows.push_back(std::move(r));
  rows.push_back(
      section("per tenant: agents' counts; delivered from the ring model; delay from "
              "the agent's send() to the receiver's kernel stamp"));
  for (Row& r : tenant_rows(phases)) rows.push_back(std::move(r));
  return rows;
}

void print_table(const std::vector<Phase>& phases, const Groups& groups) {
  json ring = nullptr;
  double ref = 0;
  for (const Phase& p : phases)
    if (p.receiver.is_object()) {
      ring = p.receiver["ring"];
      ref = p.receiver.value("reference_pps", 0.0);
    }
  if (ring.is_null()) ring = json::object();
  const std::vector<Row> rows = all_rows(phases, ring);
  const bool rounds =
      std::any_of(groups.begin(), groups.end(), [](auto& g) { return g.second.size() > 1; });
  std::cout << fmt::format("{:<36}", rounds ? "(median of the rounds)" : "");
  for (const auto& g : groups) std::cout << fmt::format(" {:>18}", g.first);
  std::cout << "\n" << std::string(36 + 19 * groups.size(), '-') << "\n";
  for (const Row& r : rows) {
    if (!r.cell) {
      std::cout << r.label << ":\n";
      continue;
    }
    std::cout << fmt::format("{:<36}", r.label);
    for (const auto& g : groups) std::cout << fmt::format(" {:>18}", r.cell(g.second));
    std::cout << "\n";
  }
  std::cout << fmt::format(
      "burst factor: most arrivals in any 10 ms / what {:.0f} packets/s gives in 10 ms; jitter: "
      "|inter-arrival - 1/{:.0f} s|; p99 delay: of the requests that reached the receiver "
      "socket.\n",
      ref, ref);
}

void print_rounds(const Groups& groups) {
  size_t n = 0;
  for (const auto& g : groups) n = std::max(n, g.second.size());
  if (n < 2) return;
  std::cout << fmt::format("\n{:<36}", "every round: drops / burst f. / jitter");
  for (const auto& g : groups) std::cout << fmt::format(" {:>24}", g.first);
  std::cout << "\n";
  for (size_t i = 0; i < n; ++i) {
    std::cout << fmt::format("round {:<30}", i + 1);
    for (const auto& g : groups) {
      if (i >= g.second.size()) {
        std::cout << fmt::format(" {:>24}", "-");
        continue;
      }
      const Phase& p = *g.second[i];
      std::cout << fmt::format(
          " {:>24}", fmt::format("{} / {} / {}",
                                 format_value(field("receiver", "/ring_dropped")(p), Kind::kCount),
                                 format_value(field("receiver", "/burst_factor")(p), Kind::kRatio),
                                 format_value(field("receiver", "/jitter_p99_ns")(p), Kind::kNs)));
    }
    std::cout << "\n";
  }
}

const std::vector<const Phase*>& rounds_of(const Groups& g, const std::string& name) {
  for (const auto& e : g)
    if (e.first == name) return e.second;
  throw std::runtime_error(fmt::format("no phase named '{}'", name));
}

// The sum (or, `worst`, the largest) of a receiver.json per-tenant field over the tenants whose
// agents follow `policy` (agents.json: "obeys 429" or "ignores 429"); nullopt when none does.
Getter over_tenants(const char* policy, const char* key, bool worst = false) {
  return [policy, key, worst](const Phase& p) -> std::optional<double> {
    if (!p.agents.is_object() || !p.receiver.is_object()) return std::nullopt;
    const json& t = p.agents["tenants"];
    const json& got = p.receiver["tenants"];
    std::optional<double> v;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].value("policy", "") != policy) continue;
      const double x = i < got.size() ? got[i].value(key, 0.0) : 0.0;
      v = !v ? x : worst ? std::max(*v, x) : *v + x;
    }
    return v;
  };
}

// A receiver.json per-tenant field of the tenant named `name` in agents.json; nullopt when the
// phase has no such tenant.
Getter of_tenant(const std::string& name, const char* key) {
  return [name, key](const Phase& p) -> std::optional<double> {
    if (!p.agents.is_object() || !p.receiver.is_object()) return std::nullopt;
    const json& t = p.agents["tenants"];
    const json& got = p.receiver["tenants"];
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].value("name", "") == name) return i < got.size() ? got[i].value(key, 0.0) : 0.0;
    return std::nullopt;
  };
}

// One column's medians, as the claim takes them; `steady` names the fairness load's steady
// tenant.
ColumnFigures figures(const std::string& name, const std::vector<const Phase*>& r,
                      const std::string& steady) {
  return {name,
          median(r, field("receiver", "/ring_dropped")),
          median(r, field("receiver", "/burst_factor")),
          median(r, field("receiver", "/jitter_p99_ns")),
          median(r, field("receiver", "/peak_100us")),
          median(r, field("receiver", "/reference_pps")),
          median(r, over_tenants("ignores 429", "delivered")),
          median(r, over_tenants("obeys 429", "delivered")),
          median(r, over_tenants("obeys 429", "delay_p99_ns", true)),
          median(r, of_tenant(steady, "delivered")),
          median(r, of_tenant(steady, "delay_p99_ns"))};
}

// The lab's claim (lab_claim.h): after against before, against the fairness load's baselines
// (the columns named `after`-alone and `after`-fifo) and against every other column (tc).
bool check_claim(const Groups& g, const std::string& before, const std::string& after,
                 const ClaimBounds& bounds, const std::string& steady) {
  std::vector<ColumnFigures> tc;
  FairnessBaselines fair;
  for (const auto& [name, rounds] : g) {
    if (name == before || name == after) continue;
    if (name == after + "-alone")
      fair.alone = figures(name, rounds, steady);
    else if (name == after + "-fifo")
      fair.fifo = figures(name, rounds, steady);
    else
      tc.push_back(figures(name, rounds, steady));
  }
  const Claim c = judge_claim(figures(before, rounds_of(g, before), steady),
                              figures(after, rounds_of(g, after), steady), tc, bounds, fair);
  std::cout << "\n" << format_claim(c);
  return c.holds;
}

// The benchmark's target: no ring drop where `before` drops, burst factor at most 1.5.
void check_target(const Groups& g, const std::string& before, const std::string& name) {
  const auto d0 = median(rounds_of(g, before), field("receiver", "/ring_dropped"));
  const auto d = median(rounds_of(g, name), field("receiver", "/ring_dropped"));
  const auto b = median(rounds_of(g, name), field("receiver", "/burst_factor"));
  const bool drops_ok = d && d0 && (*d == 0 && *d0 > 0);
  const bool bf_ok = b && *b <= 1.5;
  std::cout << fmt::format(
      "target for {}: 0 NIC ring drops where {} drops: {}; burst factor <= "
      "1.5x: {}\n",
      name, before, drops_ok ? "met" : "missed", bf_ok ? "met" : "missed");
}

// Both phases' dripgate-iat charts in one SVG, one above the other.
void write_svg_pair(const std::string& out, const std::vector<std::string>& names,
                    const std::vector<std::string>& files) {
  std::string body;
  double y = 0, width = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    std::ifstream f(files[i]);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string svg = ss.str();
    const auto open = svg.find("<svg");
    if (open == std::string::npos) continue;
    svg = svg.substr(open);
    double w = 0, h = 0;
    std::sscanf(svg.substr(svg.find("width=\"")).c_str(), "width=\"%lf", &w);
    std::sscanf(svg.substr(svg.find("height=\"")).c_str(), "height=\"%lf", &h);
    body += fmt::format(
        "<text x=\"10\" y=\"{:.0f}\" font-size=\"16\" font-weight=\"bold\">{}"
        "</text>\n",
        y + 20, names[i]);
    svg.replace(0, 4, fmt::format("<svg x=\"0\" y=\"{:.0f}\"", y + 28));
    body += svg + "\n";
    y += h + 36;
    width = std::max(width, w);
  }
  std::ofstream(out) << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n{2}</svg>\n",
      width, y, body);
}

int run(int argc, char** argv) {
  CLI::App app{"dripgate-lab-report: the lab's phases side by side"};
  std::vector<std::string> phase_args;
  std::string claim, target, svg_pair, load_name = "bursts", steady = "ws-steady";
  ClaimBounds bounds;
  app.add_option("--phase", phase_args, "NAME=DIR, once per phase and round (in column order)")
      ->required();
  app.add_option(
      "--claim", claim,
      "BEFORE,AFTER: exit 1 unless AFTER has fewer NIC ring drops and a lower burst "
      "factor than BEFORE and, against the best of the other columns (tc shapers), "
      "fewer runaway requests delivered, no more ring drops and either a p99 jitter "
      "1.2x lower (--load bursts), the most packets in any 100 us 1.2x fewer and at most 1.5x "
      "the even spacing's (--load highrate) "
      "or more of the obeying tenants' requests delivered with a p99 delay 2x lower (--load "
      "overload); under --load fairness, the steady tenant as if alone through AFTER (against "
      "the column AFTER-alone) and a p99 delay 2x higher through AFTER-fifo (fairness: none); "
      "those two columns are not tc shapers");
  app.add_option("--jitter-factor", bounds.jitter_factor,
                 "under --load bursts, how many times lower the p99 jitter is claimed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--load", load_name,
                 "the offered load the phases ran: which rows the claim stands on")
      ->check(CLI::IsMember({"bursts", "overload", "highrate", "fairness"}))
      ->capture_default_str();
  app.add_option("--steady-tenant", steady,
                 "under --load fairness, the tenant whose figures the claim compares")
      ->capture_default_str();
  app.add_option("--target", target, "BEFORE,NAME: say whether NAME meets the benchmark target");
  app.add_option("--svg-pair", svg_pair,
                 "write the first and the last column's charts into one SVG here");
  CLI11_PARSE(app, argc, argv);

  std::vector<Phase> phases;
  for (const std::string& a : phase_args) {
    const auto eq = a.find('=');
    if (eq == std::string::npos) throw std::runtime_error("--phase " + a + ": expected NAME=DIR");
    Phase p;
    p.name = a.substr(0, eq);
    p.dir = a.substr(eq + 1);
    p.agents = load(p.dir + "/agents.json");
    p.receiver = load(p.dir + "/receiver.json");
    p.dataplane = load(p.dir + "/dataplane.json");
    p.iat = load(p.dir + "/iat.json");
    phases.push_back(std::move(p));
  }
  const Groups groups = group(phases);
  print_table(phases, groups);
  print_rounds(groups);
  if (!svg_pair.empty() && groups.size() >= 2)
    write_svg_pair(
        svg_pair, {groups.front().first, groups.back().first},
        {groups.front().second[0]->dir + "/iat.svg", groups.back().second[0]->dir + "/iat.svg"});
  const auto split = [](const std::string& s) {
    const auto c = s.find(',');
    if (c == std::string::npos) throw std::runtime_error("expected A,B: " + s);
    return std::pair{s.substr(0, c), s.substr(c + 1)};
  };
  if (!target.empty()) {
    auto [a, b] = split(target);
    check_target(groups, a, b);
  }
  if (!claim.empty()) {
    auto [a, b] = split(claim);
    const Load load = load_name == "overload"   ? Load::kOverload
                      : load_name == "highrate" ? Load::kHighRate
                      : load_name == "fairness" ? Load::kFairness
                                                : Load::kBursts;
    bounds.load = load;
    return check_claim(groups, a, b, bounds, steady) ? 0 : 1;
  }
  return 0;
}

}  // namespace
}  // namespace dripgate::lab

int main(int argc, char** argv) {
  return dripgate::lab::guarded_main("dripgate-lab-report", dripgate::lab::run, argc, argv);
}
