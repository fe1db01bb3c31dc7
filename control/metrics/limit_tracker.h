// The tenants closest to their limits: for each of a tenant's own limits (kQuotas: its request
// bucket or window, its token-rate bucket, its monthly quota, its concurrent streams), the
// kTop tenants with the lowest remaining share (remaining / limit, 0..1) that decisions
// reported. Shown on the status page and as dripgate_quota_remaining_ratio{tenant,quota}, for
// those tenants only, so the gauge's series stay bounded whatever the number of tenants.
//
// Each front's loop (an HTTP worker, a gRPC loop) writes to a Table of its own (a Slot), under
// that table's mutex, which only a reader (the status page, a scrape: about once a second)
// ever contends for; a note scans kTop entries and copies a tenant id into a slot's kept
// capacity, so it allocates nothing. Readers merge every table: a tenant in several, its
// latest reading (every daemon reads the same Redis, so the newest is the truth). A reading
// older than kMaxAgeMs is forgotten: a tenant that stopped asking has most likely refilled, and
// nothing else would tell.
//
// Approximate by design: a table keeps, per limit, the kTop lowest shares it saw, each
// tenant's entry following its latest reading (a tenant whose bucket refilled moves up and may
// make room for another only once a lower reading comes).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dripgate::control {

class LimitTracker {
 public:
  static constexpr size_t kTop = 10;
  static constexpr int64_t kMaxAgeMs = 60'000;
  // The `quota` label: a decision's Remaining gate names that are a tenant's own.
  static constexpr std::array<std::string_view, 4> kQuotas = {"tenant", "tenant_tokens", "quota",
                                                              "concurrency"};
  // The longest tenant id kept (the id rule's bound; a longer one is not a tenant's).
  static constexpr size_t kMaxTenantBytes = 64;

  struct Row {
    std::string quota, tenant;
    double remaining = 0, limit = 0;
    int64_t at_ms = 0;  // the reading's time (the caller's clock, steady)
    double ratio() const { return limit > 0 ? remaining / limit : 1; }
  };

  class Table;
  // A front loop's table, registered while the slot lives.
  class Slot {
   public:
    explicit Slot(LimitTracker& tracker);
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // A decision's reading of `quota` (any gate name: those not in kQuotas are ignored) for
    // tenant at now_ms (steady clock). limit <= 0: no limit, ignored.
    void note(std::string_view tenant, std::string_view quota, double remaining, double limit,
              int64_t now_ms);

   private:
    LimitTracker& tracker_;
    std::shared_ptr<Table> table_;
  };

  LimitTracker();
  ~LimitTracker();
  LimitTracker(const LimitTracker&) = delete;
  LimitTracker& operator=(const LimitTracker&) = delete;

  // Per quota in kQuotas' order, the kTop lowest ratios (lowest first, ties by tenant) among
  // readings no older than kMaxAgeMs at now_ms.
  std::vector<Row> lowest(int64_t now_ms) const;

 private:
  mutable std::mutex mu_;  // the list of tables: taken to register and to read, never to note
  std::vector<std::shared_ptr<Table>> tables_;
};

}  // namespace dripgate::control
