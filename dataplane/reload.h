// A reload (SIGHUP): the YAML read again and applied live, or refused whole. Judged and carried
// out on the main lcore; the changes reach the worker lcores through their mailboxes
// (mailbox.h), which answer between bursts, so nothing queued is dropped and the packet path
// never allocates, locks or waits. Free of DPDK: tested with a thread as the worker lcore.
//
// Live: the drip (rate_pps, rate_bps, batch, max_catchup), each class's weight, rate caps,
// queue_depth and ttl_ms, the classify rules and unknown_flows (and, applied by the caller,
// flow_idle_timeout_s). Restart only: the classes' names and order, eal, ports, lcores, mbufs,
// flow_table_size, control_socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/classify.h"
#include "dataplane/mailbox.h"
#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// What the loader cannot judge: the rules compiled against the classes, unknown_flows against
// the classes, and the scheduler at this TSC rate (Scheduler::validate). One
// "dataplane.<field>: message" per problem; the compiled rules when there is none.
struct Judgement {
  std::unique_ptr<Classifier> classifier;
  std::vector<std::string> errors;
};
Judgement judge(const config::Dataplane& dp, uint64_t tsc_hz);

// The fields that differ between the two and take effect only at start, as YAML paths
// ("dataplane.mbufs"); a change of the classes' names or order names both lists.
std::vector<std::string> restart_fields(const config::Dataplane& running,
                                        const config::Dataplane& next);

class Reloader {
 public:
  struct Outcome {
    bool applied = false;
    std::vector<std::string> restart;  // refused: these fields need a restart
    std::vector<std::string> errors;   // refused: "dataplane.<field>: message", or the lcores'
  };

  // running: the configuration in force; classifier: the rules the RX side uses now.
  // rx: one mailbox per RX lcore.
  Reloader(Scheduler& sched, DripMailbox& drip, std::vector<RxMailbox*> rx,
           config::Dataplane running, std::unique_ptr<Classifier> classifier);
  ~Reloader();
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

  const config::Dataplane& running() const { return running_; }
  const Classifier& classifier() const { return *classifier_; }

  // Applies `next` whole, or nothing of it: restart-only fields or any problem refuse it before
  // anything is posted. Then the scheduler's owner takes its part, then each RX lcore the new
  // rules; the replaced classifier and queue rings are freed here, after the answers. Only a
  // worker lcore that does not answer within `timeout` can leave a change half done (said in
  // the errors; the objects it may still use are kept until this object goes).
  Outcome reload(const config::Dataplane& next, std::chrono::milliseconds timeout);

 private:
  Scheduler& sched_;
  DripMailbox& drip_;
  std::vector<RxMailbox*> rx_;
  config::Dataplane running_;
  std::unique_ptr<Classifier> classifier_;
  // Posted but never answered: the owner may take them late, so they live on.
  std::vector<std::unique_ptr<SchedulerReconfig>> unanswered_reconfigs_;
  std::vector<std::unique_ptr<Classifier>> unanswered_classifiers_;
};

}  // namespace dripgate::dataplane
