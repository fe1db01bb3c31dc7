#include "dataplane/mailbox.h"

#include "dataplane/scheduler.h"

namespace dripgate::dataplane {

// The strings are only touched on a control request, never per packet.
MailboxResult apply_drip_change(Scheduler& sched, const DripChange& r, uint64_t now) {
  MailboxResult res;
  if (r.reconfig != nullptr) {
    sched.apply(*r.reconfig, now);
    res.ok = true;
  } else if (r.cls == DripChange::kPort) {
    res.ok = sched.set_port_rate(r.pps, r.bps, now, &res.error);
  } else {
    res.ok = sched.set_class_rate(static_cast<unsigned>(r.cls), r.pps, r.bps, now, &res.error);
  }
  return res;
}

}  // namespace dripgate::dataplane
