#include "dataplane/stats.h"

#include "dataplane/scheduler.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <rte_telemetry.h>

namespace dripgate::dataplane {

nlohmann::json hist_json(const LatencyHist& h) {
  LatencyHist::Snapshot s = h.snapshot();
  nlohmann::json j;
  j["count"] = s.count;
  j["min_ns"] = s.min_ns;
  j["max_ns"] = s.max_ns;
  j["mean_ns"] = s.mean_ns();
  j["p50_ns"] = s.percentile(50);
  j["p99_ns"] = s.percentile(99);
  j["p999_ns"] = s.percentile(99.9);
  for (uint64_t w : {64, 128, 256, 512, 1024})
    j["within_" + std::to_string(w) + "ns"] = s.share_within(w);
  // Non-empty buckets as [low_ns, high_ns, count] (inclusive edges), earliest first.
  nlohmann::json buckets = nlohmann::json::array();
  for (unsigned b = LatencyHist::kBuckets; b-- > 0;) {
    if (s.neg[b])
      buckets.push_back({-static_cast<int64_t>(LatencyHist::bucket_high(b)),
                         -static_cast<int64_t>(LatencyHist::bucket_low(b)), s.neg[b]});
  }
  for (unsigned b = 0; b < LatencyHist::kBuckets; ++b) {
    if (s.pos[b])
      buckets.push_back({static_cast<int64_t>(LatencyHist::bucket_low(b)),
                         static_cast<int64_t>(LatencyHist::bucket_high(b)), s.pos[b]});
  }
  j["buckets"] = std::move(buckets);
  return j;
}

Stats::Stats(const Scheduler* s, std::vector<std::string> causes, uint64_t hz, uint64_t start,
             unsigned rx_lcores)
    : malformed_names(std::move(causes)),
      classes(s->num_classes()),
      sched(s),
      rx(rx_lcores),
      drip(hz),
      tsc_hz(hz),
      start_tsc(start) {
  if (malformed_names.size() > static_cast<size_t>(RxStats::kMaxCauses))
    malformed_names.resize(RxStats::kMaxCauses);
  for (RxStats& r : rx) r.classified = std::vector<Counter>(s->num_classes());
}

RxTotals Stats::rx_totals() const {
  RxTotals t;
  for (const RxStats& r : rx) {
    t.rx_client += r.rx_client.get();
    t.rx_cluster += r.rx_cluster.get();
    t.pass_non_ip += r.pass_non_ip.get();
    t.pass_unknown += r.pass_unknown.get();
    t.drop_unknown += r.drop_unknown.get();
    t.drop_ring += r.drop_ring.get();
    t.reverse_tx += r.reverse_tx.get();
    t.reverse_drop_tx += r.reverse_drop_tx.get();
    for (size_t i = 0; i < t.malformed.size(); ++i) t.malformed[i] += r.malformed[i].get();
  }
  return t;
}

uint64_t Stats::classified(unsigned cls) const {
  uint64_t n = 0;
  for (const RxStats& r : rx) n += r.classified[cls].get();
  return n;
}

uint64_t Stats::malformed_total() const {
  uint64_t n = 0;
  for (uint64_t c : rx_totals().malformed) n += c;
  return n;
}

Stats::Totals Stats::totals() const {
  Totals t;
  for (unsigned i = 0; i < classes.size(); ++i) {
    ClassStats s = sched->class_stats(i);
    t.classified += classified(i);
    t.enqueued += s.enq_packets;
    t.tx += classes[i].tx_pkts.get();
    t.tx_bytes += classes[i].tx_bytes.get();
    t.depth += s.drop_depth;
    t.ttl += s.drop_ttl;
    t.drop_tx += classes[i].drop_tx.get();
    t.drained += s.drained;
    t.queue_len += s.queue_len;
    t.subqueue += s.drop_subqueue;
    t.aqm += s.drop_aqm;
    t.ecn_marked += s.ecn_marked;
  }
  return t;
}

double Stats::departure_rate_pps() const {
  uint64_t n = drip.departures.get();
  uint64_t first = drip.first_tsc.get(), last = drip.last_tsc.get();
  if (n < 2 || last <= first) return 0;
  return static_cast<double>(n - 1) * static_cast<double>(tsc_hz) /
         static_cast<double>(last - first);
}

nlohmann::json Stats::class_json(unsigned cls) const {
  const ClassCounters& c = classes[cls];
  const ClassStats s = sched->class_stats(cls);
  const config::DripRate rate = sched->class_rate(cls);
  return {{"name", sched->class_name(cls)},
          {"classified", classified(cls)},
          {"enqueued", s.enq_packets},
          {"released", s.tx_packets},
          {"tx_pkts", c.tx_pkts.get()},
          {"tx_bytes", c.tx_bytes.get()},
          {"queue_len", s.queue_len},
          {"active_subqueues", s.active_subqueues},
          {"ecn_marked", s.ecn_marked},
          {"rate_pps", rate.rate_pps},
          {"rate_bps", rate.rate_bps},
          {"drops",
           {{"depth", s.drop_depth},
            {"subqueue", s.drop_subqueue},
            {"ttl", s.drop_ttl},
            {"aqm", s.drop_aqm},
            {"tx_full", c.drop_tx.get()},
            {"shutdown", s.drained}}}};
}

nlohmann::json Stats::tenant_drops_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const TenantDrops& d : sched->top_tenant_drops(kTopTenants)) {
    std::string name = tenant_name ? tenant_name(d.tenant) : std::string();
    out.push_back({{"tenant", name.empty() ? std::to_string(d.tenant) : name},
                   {"depth", d.depth},
                   {"ttl", d.ttl},
                   {"aqm", d.aqm}});
  }
  return out;
}

nlohmann::json Stats::to_json() const {
  nlohmann::json j;
  nlohmann::json by_class = nlohmann::json::object();
  for (unsigned cls = 0; cls < classes.size(); ++cls)
    by_class[sched->class_name(cls)] = class_json(cls);
  Totals t = totals();
  const RxTotals rt = rx_totals();
  nlohmann::json malformed = nlohmann::json::object();
  for (size_t i = 0; i < malformed_names.size(); ++i) {
    if (malformed_names[i].empty()) continue;
    malformed[malformed_names[i]] = rt.malformed[i];
  }
  j["classes"] = std::move(by_class);
  j["rx"] = {{"client", rt.rx_client}, {"cluster", rt.rx_cluster}};
  if (rx.size() > 1) {  // RSS: what each RX lcore received (how evenly RSS spreads)
    nlohmann::json per = nlohmann::json::array();
    for (const RxStats& r : rx)
      per.push_back({{"client", r.rx_client.get()}, {"cluster", r.rx_cluster.get()}});
    j["rx"]["per_lcore"] = std::move(per);
  }
  j["tx"] = {{"shaped", t.tx},
             {"shaped_bytes", t.tx_bytes},
             {"pass_non_ip", rt.pass_non_ip},
             {"pass_unknown", rt.pass_unknown},
             {"pass_sent", drip.pass_tx.get()},
             {"reverse", rt.reverse_tx}};
  j["drops"] = {{"depth", t.depth},
                {"subqueue", t.subqueue},
                {"ttl", t.ttl},
                {"aqm", t.aqm},
                {"tx_full", t.drop_tx},
                {"pass_tx_full", drip.pass_drop_tx.get()},
                {"reverse_tx_full", rt.reverse_drop_tx},
                {"unknown", rt.drop_unknown},
                {"ring", rt.drop_ring},
                {"shutdown", t.drained},
                {"malformed", malformed_total()},
                {"malformed_by_cause", std::move(malformed)},
                {"by_tenant", tenant_drops_json()}};
  j["ecn_marked"] = t.ecn_marked;
  j["queue_len"] = t.queue_len;
  j["departures"] = drip.departures.get();
  j["stall_clamps"] = sched->port_stats().stall_clamps;  // catch-up limit hit after a stall
  j["tx_retries"] = drip.tx_retries.get();
  j["rate_updates"] = drip.rate_updates.get();
  j["reloads"] = {{"applied", reloads_applied.get()}, {"refused", reloads_refused.get()}};
  j["tags"] = {{"ok", tags.ok.get()}, {"full", tags.full.get()}, {"invalid", tags.invalid.get()}};
  j["departure_rate_pps"] = departure_rate_pps();
  const config::DripRate port_rate = sched->port_rate();
  j["port_rate_pps"] = port_rate.rate_pps;
  j["port_rate_bps"] = port_rate.rate_bps;
  j["departure_error"] = hist_json(drip.error);
  j["tsc_hz"] = tsc_hz;
  j["mbufs_total"] = mbufs_total;
  if (int64_t avail = mbufs_available.load(); avail >= 0) j["mbufs_available"] = avail;
  return j;
}

namespace {

const Stats* g_stats = nullptr;  // telemetry callbacks are plain function pointers

void add_u64(rte_tel_data* d, const std::string& name, uint64_t v) {
  rte_tel_data_add_dict_u64(d, name.c_str(), v);
}

int tel_stats(const char*, const char*, rte_tel_data* d) {
  if (g_stats == nullptr) return -EAGAIN;
  const Stats& s = *g_stats;
  Stats::Totals t = s.totals();
  const RxTotals rx = s.rx_totals();
  rte_tel_data_start_dict(d);
  add_u64(d, "rx_client", rx.rx_client);
  add_u64(d, "rx_cluster", rx.rx_cluster);
  add_u64(d, "tx_shaped", t.tx);
  add_u64(d, "tx_pass_non_ip", rx.pass_non_ip);
  add_u64(d, "tx_pass_unknown", rx.pass_unknown);
  add_u64(d, "tx_reverse", rx.reverse_tx);
  add_u64(d, "drop_depth", t.depth);
  add_u64(d, "drop_subqueue", t.subqueue);
  add_u64(d, "drop_ttl", t.ttl);
  add_u64(d, "drop_aqm", t.aqm);
  add_u64(d, "ecn_marked", t.ecn_marked);
  add_u64(d, "drop_tx_full", t.drop_tx + s.drip.pass_drop_tx.get() + rx.reverse_drop_tx);
  add_u64(d, "drop_unknown", rx.drop_unknown);
  add_u64(d, "drop_ring", rx.drop_ring);
  add_u64(d, "drop_shutdown", t.drained);
  add_u64(d, "drop_malformed", s.malformed_total());
  for (size_t i = 0; i < s.malformed_names.size(); ++i) {
    if (s.malformed_names[i].empty()) continue;
    std::string name = "malformed_" + s.malformed_names[i];
    for (char& ch : name)
      if (ch == '-') ch = '_';  // telemetry names: alphanumerics, '_' and '/'
    add_u64(d, name, rx.malformed[i]);
  }
  add_u64(d, "queue_len", t.queue_len);
  add_u64(d, "departures", s.drip.departures.get());
  // Telemetry dicts in 22.11 carry no floats: rates in milli-pps, shares in ppm.
  add_u64(d, "departure_rate_mpps", static_cast<uint64_t>(s.departure_rate_pps() * 1000.0));
  LatencyHist::Snapshot h = s.drip.error.snapshot();
  for (uint64_t w : {64, 128, 256, 512})
    add_u64(d, "departure_within_" + std::to_string(w) + "ns_ppm",
            h.count ? h.count_within(w) * 1000000 / h.count : 0);
  rte_tel_data_add_dict_int(d, "departure_error_p50_ns", static_cast<int>(h.percentile(50)));
  rte_tel_data_add_dict_int(d, "departure_error_p99_ns", static_cast<int>(h.percentile(99)));
  rte_tel_data_add_dict_int(d, "departure_error_max_ns",
                            static_cast<int>(std::min<int64_t>(h.max_ns, INT32_MAX)));
  return 0;
}

int tel_classes(const char*, const char* params, rte_tel_data* d) {
  if (g_stats == nullptr) return -EAGAIN;
  const Stats& s = *g_stats;
  if (params == nullptr || *params == '\0') {
    rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
    for (unsigned cls = 0; cls < s.sched->num_classes(); ++cls)
      rte_tel_data_add_array_string(d, s.sched->class_name(cls).c_str());
    return 0;
  }
  const int cls = s.sched->find_class(params);
  if (cls < 0) return -EINVAL;
  const ClassCounters& c = s.classes[static_cast<size_t>(cls)];
  const ClassStats cs = s.sched->class_stats(static_cast<unsigned>(cls));
  const config::DripRate rate = s.sched->class_rate(static_cast<unsigned>(cls));
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_string(d, "name", params);
  add_u64(d, "classified", s.classified(static_cast<unsigned>(cls)));
  add_u64(d, "enqueued", cs.enq_packets);
  add_u64(d, "tx_pkts", c.tx_pkts.get());
  add_u64(d, "tx_bytes", c.tx_bytes.get());
  add_u64(d, "queue_len", cs.queue_len);
  add_u64(d, "drop_depth", cs.drop_depth);
  add_u64(d, "drop_subqueue", cs.drop_subqueue);
  add_u64(d, "drop_ttl", cs.drop_ttl);
  add_u64(d, "drop_aqm", cs.drop_aqm);
  add_u64(d, "ecn_marked", cs.ecn_marked);
  add_u64(d, "active_subqueues", cs.active_subqueues);
  add_u64(d, "drop_tx_full", c.drop_tx.get());
  add_u64(d, "drop_shutdown", cs.drained);
  add_u64(d, "rate_pps", static_cast<uint64_t>(rate.rate_pps));
  add_u64(d, "rate_bps", static_cast<uint64_t>(rate.rate_bps));
  return 0;
}

}  // namespace

void register_telemetry(const Stats* stats) {
  g_stats = stats;
  rte_telemetry_register_cmd("/dripgate/stats", tel_stats,
                             "dripgate totals: rx, tx, drops by cause, departure error. No "
                             "parameters");
  rte_telemetry_register_cmd("/dripgate/classes", tel_classes,
                             "Without parameter: the class names. Parameter: a class name, "
                             "returns its counters");
}

}  // namespace dripgate::dataplane
