#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"

namespace brisk {

// Who gets the device next, when several models share it (docs/models.md, "Sharing the device").
struct DeviceTenantOptions {
  std::string name;
  // Its share of the device while others want it too: busy time is charged divided by the
  // weight, and the tenant charged least goes next (weighted fair share).
  double weight = 1.0;
  // A critical tenant goes before every non-critical one whenever it waits.
  bool critical = false;
};

// Shares one device between the models of a server, one step at a time: before each step (a
// generative model's engine step, an embedding model's batch) its thread takes a turn, and while
// one model's step runs no other model's does. On CPU this also keeps two models' llama.cpp
// thread pools from fighting over the same cores. When a turn ends and several tenants wait, the
// next is the critical one first, then the one with the least busy time per unit of weight;
// a tenant that was idle is not owed the time it did not use (it starts level with the least
// charged of the tenants that were busy).
class DeviceArbiter {
 public:
  using TenantId = int;

  // A step's hold on the device, from acquire() until it is destroyed.
  class Turn {
   public:
    Turn(Turn&& other) noexcept : arbiter_(other.arbiter_), tenant_(other.tenant_) {
      other.arbiter_ = nullptr;
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    Turn& operator=(Turn&&) = delete;
    ~Turn() {
      if (arbiter_) arbiter_->release(tenant_);
    }

   private:
    friend class DeviceArbiter;
    Turn(DeviceArbiter* arbiter, TenantId tenant) : arbiter_(arbiter), tenant_(tenant) {}
    DeviceArbiter* arbiter_;
    TenantId tenant_;
  };

  explicit DeviceArbiter(std::function<TimePoint()> clock = [] { return Clock::now(); });

  // Before serving starts.
  TenantId add_tenant(DeviceTenantOptions options);
  // Blocks until `tenant` may use the device; one turn per tenant at a time.
  Turn acquire(TenantId tenant);
  // Between two steps of the same turn: keeps the device, or, when a waiting tenant goes first
  // (critical, or less charged), hands it over and blocks until it is this tenant's again. A
  // loop with more steps to run calls this instead of ending the turn and asking again, so the
  // fair share holds for tenants that always have work.
  void between_steps(Turn& turn);
  int waiting_tenants() const;

  // brisk_device_busy_seconds_total{model} and brisk_arbiter_wait_seconds{model}.
  std::string render_prometheus() const;
  double busy_seconds(TenantId tenant) const;

 private:
  struct Tenant {
    DeviceTenantOptions options;
    double charged_seconds = 0;  // busy seconds / weight: the fair-share clock
    double busy_seconds = 0;
    bool waiting = false;
    uint64_t ticket = 0;  // order of arrival among the waiting
    std::unique_ptr<Histogram> wait_seconds;
  };
  void release(TenantId tenant);
  // Under mutex_: charges the running turn's time to `tenant` and starts the count again.
  void charge(Tenant& tenant, TimePoint now);
  // Under `lock`: waits until `tenant` holds the device, then counts its wait.
  void wait_for_turn(std::unique_lock<std::mutex>& lock, TenantId tenant, TimePoint asked);
  // Under mutex_: the waiting tenant that goes next, or -1.
  TenantId next_in_line() const;
  // Under mutex_: whether `a` goes before `b` when both wait for the device.
  bool goes_before(const Tenant& a, const Tenant& b) const;
  // Under mutex_: whether the holder of the device hands it to `waiter` between two steps.
  bool yields_to(const Tenant& holder, const Tenant& waiter) const;
  // Under mutex_: the least charged of the tenants waiting or running, but `except`.
  double least_active_charge(TenantId except, bool* found) const;

  const std::function<TimePoint()> clock_;
  mutable std::mutex mutex_;
  std::condition_variable turn_changed_;
  std::vector<Tenant> tenants_;
  TenantId holder_ = -1;  // the tenant whose turn it is; -1: the device is free
  TimePoint turn_started_;
  uint64_t next_ticket_ = 0;
};

}  // namespace brisk
