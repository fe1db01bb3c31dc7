// The configuration in force, shared by the worker threads and replaced whole on a reload.
// A request reads the snapshot once when it starts and keeps it (a shared_ptr) until it is
// answered, so a reload never changes the plans, gates or tenants under a request in flight.
// Workers find a new snapshot with one atomic load per request (the store's generation); only
// when it moved do they take the store's lock to copy the pointer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "config/config.h"
#include "control/admission/brake.h"
#include "control/admission/saturation.h"
#include "control/admission/script_calls.h"
#include "control/admission/tenant_directory.h"
#include "control/admission/tenant_keys.h"

namespace dripgate::control {

// One configuration and what the engine derives from it. Immutable once built.
struct Snapshot {
  Snapshot(config::Config c, std::string hash);
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  const config::Config cfg;
  const Tables tables;  // points into cfg
  const FileKeys file_keys;
  const std::string hash;  // of the file it was loaded from (reload.h), empty when none

  // The metrics label of a tenant: its id when the file lists it, "@registry" when only the
  // tenant registry names it (a label per registry tenant would grow the metrics without
  // bound), "*" when on the default plan, "" when unknown (bad input must not grow the metrics).
  std::string_view tenant_label(const std::string& tenant,
                                const TenantDirectory* registry = nullptr) const;
};

// The tenant's plan: the registry's when it names the tenant, else the file's entry, else the
// default plan's ("*"); null when none (or the registry names a plan the file lacks).
const config::Plan* plan_of(const config::Config& cfg, const std::string& tenant,
                            const TenantDirectory* registry = nullptr);

// A value one thread publishes and every worker reads: a reader checks the generation (one
// atomic load) and takes the lock only after a change (PublishedView).
template <class T>
class Published {
 public:
  void publish(std::shared_ptr<const T> next) {
    std::shared_ptr<const T> old;
    {
      std::lock_guard lock(mu_);
      old = std::move(value_);
      value_ = std::move(next);
      generation_.fetch_add(1, std::memory_order_release);
    }
    // The old value is freed here, not under the lock the workers take (a registry copy of
    // 100,000 tenants takes milliseconds to free).
  }
  std::shared_ptr<const T> get() const {
    std::lock_guard lock(mu_);
    return value_;
  }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const T> value_;
  std::atomic<uint64_t> generation_{0};
};

// One thread's view of a Published value: the one it read last, refreshed when the generation
// moved.
template <class T>
class PublishedView {
 public:
  explicit PublishedView(const Published<T>& source) : source_(source) {}
  const std::shared_ptr<const T>& get() {
    uint64_t g = source_.generation();
    if (g != generation_) {
      value_ = source_.get();
      generation_ = g;
    }
    return value_;
  }

 private:
  const Published<T>& source_;
  uint64_t generation_ = 0;
  std::shared_ptr<const T> value_;
};

class ConfigStore {
 public:
  explicit ConfigStore(std::shared_ptr<const Snapshot> first);
  // A store of one fixed configuration (tests, tools).
  explicit ConfigStore(config::Config cfg);

  // Thread-safe. Every request that starts after publish() returns runs on `next`.
  void publish(std::shared_ptr<const Snapshot> next);
  // Takes the lock: for readers off the request path (reload, health); workers use a view.
  std::shared_ptr<const Snapshot> current() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // The tenant registry's copy in force (tenant_directory.h), published the same way by its
  // poller (tenant_registry.h); null while none was read (or no poller runs).
  void publish_registry(std::shared_ptr<const TenantDirectory> next) {
    registry_.publish(std::move(next));
  }
  std::shared_ptr<const TenantDirectory> registry() const { return registry_.get(); }
  const Published<TenantDirectory>& published_registry() const { return registry_; }
  // Set by a poller when it starts: until its first copy, /readyz says the registry is missing.
  void expect_registry() { registry_expected_.store(true, std::memory_order_release); }
  bool registry_expected() const { return registry_expected_.load(std::memory_order_acquire); }

  // The service-wide brake in force (brake.h), published by its poller (brake_sync.h); null
  // while none is on.
  void publish_brake(std::shared_ptr<const Brake> next) { brake_.publish(std::move(next)); }
  std::shared_ptr<const Brake> brake() const { return brake_.get(); }
  const Published<Brake>& published_brake() const { return brake_; }

  // The model gates' saturation shares in force (saturation.h), published by their scraper
  // (saturation_sync.h); null while every share is 1.
  void publish_saturation(std::shared_ptr<const SaturationShares> next) {
    saturation_.publish(std::move(next));
  }
  std::shared_ptr<const SaturationShares> saturation() const { return saturation_.get(); }
  const Published<SaturationShares>& published_saturation() const { return saturation_; }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> snap_;
  std::atomic<uint64_t> generation_{0};
  Published<TenantDirectory> registry_;
  Published<Brake> brake_;
  Published<SaturationShares> saturation_;
  std::atomic<bool> registry_expected_{false};
};

// One thread's view of a store: the snapshot it read last, refreshed when the generation moved.
class SnapshotView {
 public:
  explicit SnapshotView(const ConfigStore& store)
      : store_(store),
        registry_(store.published_registry()),
        brake_(store.published_brake()),
        saturation_(store.published_saturation()) {}
  const std::shared_ptr<const Snapshot>& get() {
    uint64_t g = store_.generation();
    if (g != generation_ || !snap_) {
      snap_ = store_.current();
      generation_ = g;
    }
    return snap_;
  }
  // The registry's copy, refreshed the same way; null when there is none.
  const std::shared_ptr<const TenantDirectory>& registry() { return registry_.get(); }
  // The brake in force, the same way; null when none is.
  const std::shared_ptr<const Brake>& brake() { return brake_.get(); }
  // The saturation shares, the same way; null while every share is 1.
  const std::shared_ptr<const SaturationShares>& saturation() { return saturation_.get(); }

 private:
  const ConfigStore& store_;
  uint64_t generation_ = 0;
  std::shared_ptr<const Snapshot> snap_;
  PublishedView<TenantDirectory> registry_;
  PublishedView<Brake> brake_;
  PublishedView<SaturationShares> saturation_;
};

}  // namespace dripgate::control
