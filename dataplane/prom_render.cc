#include "dataplane/prom_render.h"

#include <algorithm>
#include <cmath>

#include "common/prom_writer.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"

namespace dripgate::dataplane {
namespace {

using common::PromWriter;

constexpr const char* kPrefix = "dripgate_dataplane_";

std::string name(const char* suffix) {
  return std::string(kPrefix) + suffix;
}

double seconds(int64_t ticks, uint64_t hz) {
  return static_cast<double>(ticks) / static_cast<double>(hz);
}

void render_traffic(PromWriter& w, const Stats& s, const RxTotals& rx) {
  const Scheduler& sched = *s.sched;
  std::string n = name("received_packets_total");
  w.family(n, "counter",
           "Frames received, by port (client: toward the cluster; cluster: reverse).");
  w.sample(n, {{"port", "client"}}, rx.rx_client);
  w.sample(n, {{"port", "cluster"}}, rx.rx_cluster);
  n = name("sent_packets_total");
  w.family(
      n, "counter",
      "Frames sent, by port; shaped ones by class, unshaped ones (non-IP, unknown_flows: pass, "
      "the reverse path) without a class.");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}, {"port", "cluster"}}, s.classes[c].tx_pkts.get());
  w.sample(n, {{"port", "cluster"}}, s.drip.pass_tx.get());
  w.sample(n, {{"port", "client"}}, rx.reverse_tx);
  n = name("sent_bytes_total");
  w.family(n, "counter",
           "Bytes of the shaped frames sent, by class (frame bytes, without the FCS).");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}, {"port", "cluster"}}, s.classes[c].tx_bytes.get());
  n = name("ecn_marked_total");
  w.family(n, "counter", "Frames AQM sent marked Congestion Experienced instead of dropping them.");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}}, sched.class_stats(c).ecn_marked);
}

void render_queues(PromWriter& w, const Stats& s, const MetricsContext& ctx) {
  const Scheduler& sched = *s.sched;
  std::string n = name("queue_depth_packets");
  w.family(n, "gauge", "Frames queued in the class now.");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}}, sched.class_stats(c).queue_len);
  n = name("queue_limit_packets");
  w.family(n, "gauge", "The class's queue_depth in force: past it arrivals are dropped (depth).");
  for (unsigned c = 0; c < sched.num_classes(); ++c) {
    const bool known = ctx.running != nullptr && c < ctx.running->classes.size();
    w.sample(n, {{"class", sched.class_name(c)}},
             uint64_t{known ? ctx.running->classes[c].queue_depth : 0});
  }
}

void render_drops(PromWriter& w, const Stats& s, const RxTotals& rx) {
  const Scheduler& sched = *s.sched;
  std::string n = name("drops_total");
  w.family(n, "counter",
           "Frames dropped, by cause: per class depth (queue full), subqueue (the tenant's or "
           "flow's share full), ttl (waited longer than ttl_ms), aqm (CoDel), tx (the port refused "
           "it), shutdown (queued at the stop); without a class malformed, unknown (unknown_flows: "
           "drop), ring (split layout hand-over full) and tx of unshaped frames by port.");
  for (unsigned c = 0; c < sched.num_classes(); ++c) {
    const ClassStats cs = sched.class_stats(c);
    const std::string& cls = sched.class_name(c);
    const std::pair<const char*, uint64_t> causes[] = {
        {"depth", cs.drop_depth}, {"subqueue", cs.drop_subqueue},     {"ttl", cs.drop_ttl},
        {"aqm", cs.drop_aqm},     {"tx", s.classes[c].drop_tx.get()}, {"shutdown", cs.drained}};
    for (const auto& [cause, v] : causes) w.sample(n, {{"class", cls}, {"cause", cause}}, v);
  }
  w.sample(n, {{"cause", "malformed"}}, s.malformed_total());
  w.sample(n, {{"cause", "unknown"}}, rx.drop_unknown);
  w.sample(n, {{"cause", "ring"}}, rx.drop_ring);
  w.sample(n, {{"cause", "tx"}, {"port", "cluster"}}, s.drip.pass_drop_tx.get());
  w.sample(n, {{"cause", "tx"}, {"port", "client"}}, rx.reverse_drop_tx);
  n = name("tenant_drops_total");
  w.family(n, "counter",
           "Frames dropped (depth, subqueue, ttl, aqm) by the tenant of their flow's tag, for the "
           "tenants with the most drops (at most 10; 0: untagged flows).");
  for (const TenantDrops& d : sched.top_tenant_drops(Stats::kTopTenants)) {
    std::string tenant = s.tenant_name ? s.tenant_name(d.tenant) : std::string();
    if (tenant.empty()) tenant = std::to_string(d.tenant);
    w.sample(n, {{"tenant", tenant}}, d.total());
  }
}

void render_drip(PromWriter& w, const Stats& s) {
  const Scheduler& sched = *s.sched;
  const config::DripRate port = sched.port_rate();
  std::string n = name("drip_configured_packets_per_second");
  w.family(n, "gauge",
           "The drip rate in force (0: unlimited), by class cap and for the port as a whole "
           "(port=\"cluster\", no class); the actual rate is rate(sent_packets_total).");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}}, sched.class_rate(c).rate_pps);
  w.sample(n, {{"port", "cluster"}}, port.rate_pps);
  n = name("drip_configured_bytes_per_second");
  w.family(n, "gauge",
           "The drip's byte rate in force (rate_bps / 8, on the wire: frame + 24 B; 0: unlimited), "
           "by class cap and for the port.");
  for (unsigned c = 0; c < sched.num_classes(); ++c)
    w.sample(n, {{"class", sched.class_name(c)}}, sched.class_rate(c).rate_bps / 8);
  w.sample(n, {{"port", "cluster"}}, port.rate_bps / 8);
  n = name("drip_behind_seconds");
  w.family(n, "gauge",
           "While the class has frames queued: how late its latest departure left after its slot "
           "on the timeline (send TSC - scheduled); 0 when nothing waits.");
  for (unsigned c = 0; c < sched.num_classes(); ++c) {
    const auto late = static_cast<int64_t>(s.classes[c].late_ticks.get());
    const bool waiting = sched.class_stats(c).queue_len > 0;
    w.sample(n, {{"class", sched.class_name(c)}},
             waiting ? seconds(std::max<int64_t>(late, 0), s.tsc_hz) : 0.0);
  }
  n = name("stall_clamps_total");
  w.family(n, "counter",
           "Times the port's timeline hit drip.max_catchup after a stall (departures it gave up).");
  w.sample(n, {}, sched.port_stats().stall_clamps);
  n = name("departure_lateness_seconds");
  w.family(n, "histogram",
           "Each departure's send time minus its slot on the timeline (negative: a batch left "
           "before its slot).");
  const LatencyHist::Snapshot h = s.drip.error.snapshot();
  w.histogram(n, {}, lateness_bounds(), cumulative_at(h, lateness_bounds()),
              static_cast<double>(h.sum_ns) / 1e9, h.count);
}

void render_control(PromWriter& w, const Stats& s, const MetricsContext& ctx) {
  std::string n = name("tags_total");
  w.family(n, "counter",
           "Tag requests on the control socket by result: ok, full (the flow table is full), "
           "invalid (refused naming a field).");
  w.sample(n, {{"result", "ok"}}, s.tags.ok.get());
  w.sample(n, {{"result", "full"}}, s.tags.full.get());
  w.sample(n, {{"result", "invalid"}}, s.tags.invalid.get());
  n = name("flows");
  w.family(n, "gauge", "Tagged flows in the flow table now.");
  w.sample(n, {}, ctx.flows);
  n = name("flow_table_capacity");
  w.family(n, "gauge", "The flow table's capacity (dataplane.flow_table_size).");
  w.sample(n, {}, ctx.flow_capacity);
  n = name("reloads_total");
  w.family(n, "counter", "SIGHUP reloads by result: applied, refused.");
  w.sample(n, {{"result", "applied"}}, s.reloads_applied.get());
  w.sample(n, {{"result", "refused"}}, s.reloads_refused.get());
  n = name("up");
  w.family(n, "gauge", "1: the dataplane's ports and lcores run.");
  w.sample(n, {}, uint64_t{1});
}

}  // namespace

const std::vector<double>& lateness_bounds() {
  static const std::vector<double> b = {-1e-5,  -1e-6,  -1e-7, 0,      1e-7,   2.5e-7, 5e-7,
                                        1e-6,   2.5e-6, 5e-6,  1e-5,   2.5e-5, 5e-5,   1e-4,
                                        2.5e-4, 5e-4,   1e-3,  2.5e-3, 1e-2,   0.1};
  return b;
}

std::vector<uint64_t> cumulative_at(const LatencyHist::Snapshot& h,
                                    const std::vector<double>& bounds) {
  std::vector<uint64_t> out;
  out.reserve(bounds.size());
  uint64_t neg_total = 0;
  for (uint64_t v : h.neg) neg_total += v;
  for (double b : bounds) {
    const double ns = std::round(b * 1e9);
    uint64_t n = 0;
    if (ns < 0) {  // samples at or below b: magnitudes of at least -ns
      const auto m = static_cast<uint64_t>(-ns);
      for (unsigned i = 0; i < LatencyHist::kBuckets; ++i)
        if (LatencyHist::bucket_low(i) >= m) n += h.neg[i];
    } else {
      n = neg_total;
      const auto m = static_cast<uint64_t>(ns);
      for (unsigned i = 0; i < LatencyHist::kBuckets && LatencyHist::bucket_high(i) <= m; ++i)
        n += h.pos[i];
    }
    out.push_back(n);
  }
  return out;
}

std::string render_metrics(const Stats& s, const MetricsContext& ctx) {
  PromWriter w;
  const RxTotals rx = s.rx_totals();
  render_traffic(w, s, rx);
  render_queues(w, s, ctx);
  render_drops(w, s, rx);
  render_drip(w, s);
  render_control(w, s, ctx);
  return w.take();
}

}  // namespace dripgate::dataplane
