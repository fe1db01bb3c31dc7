#include "dataplane/reload.h"

namespace dripgate::dataplane {
namespace {

std::string class_names(const std::vector<config::Class>& classes) {
  std::string names;
  for (const config::Class& c : classes) names += (names.empty() ? "" : ", ") + c.name;
  return names;
}

}  // namespace

Judgement judge(const config::Dataplane& dp, uint64_t tsc_hz) {
  Judgement j;
  auto compiled = Classifier::compile(dp.classify, dp.classes);
  if (compiled.classifier) {
    j.classifier = std::make_unique<Classifier>(std::move(*compiled.classifier));
  } else {
    j.errors.push_back("dataplane." + compiled.error);
  }
  bool has_default = false;
  for (const config::Class& c : dp.classes) has_default |= c.name == "default";
  if (dp.unknown_flows == config::UnknownFlows::kDefault && !has_default)
    j.errors.push_back("dataplane.unknown_flows: is 'default' but there is no class 'default'");
  for (const std::string& e : Scheduler::validate(dp.drip, dp.classes, tsc_hz))
    j.errors.push_back("dataplane." + e);
  if (!j.errors.empty()) j.classifier.reset();
  return j;
}

std::vector<std::string> restart_fields(const config::Dataplane& a, const config::Dataplane& b) {
  std::vector<std::string> f;
  auto differ = [&f](bool d, std::string name) {
    if (d) f.push_back(std::move(name));
  };
  differ(a.eal != b.eal, "dataplane.eal");
  differ(a.client_port != b.client_port || a.cluster_port != b.cluster_port ||
             a.rx_queues != b.rx_queues,
         "dataplane.ports");
  differ(a.rx_lcores != b.rx_lcores || a.drip_lcore != b.drip_lcore, "dataplane.lcores");
  differ(a.mbufs != b.mbufs, "dataplane.mbufs");
  differ(a.mtu != b.mtu, "dataplane.mtu");
  differ(a.flow_table_size != b.flow_table_size, "dataplane.flow_table_size");
  differ(a.control_socket != b.control_socket, "dataplane.control_socket");
  differ(a.control_socket_group != b.control_socket_group, "dataplane.control_socket_group");
  differ(a.metrics_listen != b.metrics_listen, "dataplane.metrics_listen");
  const std::string was = class_names(a.classes), now = class_names(b.classes);
  differ(was != now, "dataplane.classes (names, order: " + was + " -> " + now + ")");
  return f;
}

Reloader::Reloader(Scheduler& sched, DripMailbox& drip, std::vector<RxMailbox*> rx,
                   config::Dataplane running, std::unique_ptr<Classifier> classifier)
    : sched_(sched),
      drip_(drip),
      rx_(std::move(rx)),
      running_(std::move(running)),
      classifier_(std::move(classifier)) {}

Reloader::~Reloader() = default;

Reloader::Outcome Reloader::reload(const config::Dataplane& next,
                                   std::chrono::milliseconds timeout) {
  Outcome out;
  out.restart = restart_fields(running_, next);
  if (!out.restart.empty()) return out;
  Judgement j = judge(next, sched_.tsc_hz());
  out.errors = std::move(j.errors);
  bool idle = drip_.idle();
  for (const RxMailbox* m : rx_) idle = idle && m->idle();
  if (!idle)
    out.errors.push_back("a previous change is still pending (a worker lcore is not answering)");
  auto reconfig = std::make_unique<SchedulerReconfig>();
  if (out.errors.empty()) {
    for (const std::string& e : sched_.prepare(next.drip, next.classes, reconfig.get()))
      out.errors.push_back("dataplane." + e);
  }
  if (!out.errors.empty()) return out;

  MailboxResult res;
  DripChange change;
  change.reconfig = reconfig.get();
  if (!drip_.post_and_wait(change, &res, timeout)) {
    unanswered_reconfigs_.push_back(std::move(reconfig));
    out.errors.push_back("drip lcore: " + res.error + "; nothing else was changed");
    return out;
  }
  reconfig.reset();  // now holds the rings replaced by larger ones
  // Each RX lcore in turn: between two answers the lcores classify by different rules for a
  // moment, as a single lcore does between two bursts.
  for (size_t i = 0; i < rx_.size(); ++i) {
    const bool answered =
        rx_[i]->post_and_wait({j.classifier.get(), next.unknown_flows}, &res, timeout);
    if (!answered || !res.ok) {
      // Lcore i may still take the new rules, and those before it did: they stay alive (the
      // old ones too, in classifier_, for the lcores after it).
      if (!answered || i > 0) unanswered_classifiers_.push_back(std::move(j.classifier));
      out.errors.push_back(
          (rx_.size() > 1 ? "rx lcore " + std::to_string(i) : std::string("rx lcore")) + ": " +
          res.error + "; the drip part (rates, weights, depths, TTLs) was applied");
      return out;
    }
  }
  classifier_ = std::move(j.classifier);  // no RX lcore uses the old one now: freed
  running_ = next;
  out.applied = true;
  return out;
}

}  // namespace dripgate::dataplane
