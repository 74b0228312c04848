#include "sched/device_arbiter.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "common/label_value.h"

namespace brisk {

DeviceArbiter::DeviceArbiter(std::function<TimePoint()> clock) : clock_(std::move(clock)) {}

DeviceArbiter::TenantId DeviceArbiter::add_tenant(DeviceTenantOptions options) {
  if (!(options.weight > 0)) throw std::invalid_argument("a tenant's weight must be positive");
  std::lock_guard lock(mutex_);
  Tenant tenant;
  tenant.options = std::move(options);
  tenant.wait_seconds = std::make_unique<Histogram>(Histogram::step_phase_seconds_buckets());
  tenants_.push_back(std::move(tenant));
  return static_cast<TenantId>(tenants_.size() - 1);
}

double DeviceArbiter::least_active_charge(TenantId except, bool* found) const {
  double least = 0;
  *found = false;
  for (size_t i = 0; i < tenants_.size(); ++i) {
    const auto id = static_cast<TenantId>(i);
    if (id == except || (!tenants_[i].waiting && holder_ != id)) continue;
    if (!*found || tenants_[i].charged_seconds < least) least = tenants_[i].charged_seconds;
    *found = true;
  }
  return least;
}

bool DeviceArbiter::goes_before(const Tenant& a, const Tenant& b) const {
  if (a.options.critical != b.options.critical) return a.options.critical;
  if (a.charged_seconds != b.charged_seconds) return a.charged_seconds < b.charged_seconds;
  return a.ticket < b.ticket;
}

bool DeviceArbiter::yields_to(const Tenant& holder, const Tenant& waiter) const {
  if (holder.options.critical != waiter.options.critical) return waiter.options.critical;
  return waiter.charged_seconds <= holder.charged_seconds;  // equal shares take turns
}

DeviceArbiter::TenantId DeviceArbiter::next_in_line() const {
  TenantId best = -1;
  for (size_t i = 0; i < tenants_.size(); ++i) {
    if (!tenants_[i].waiting) continue;
    if (best < 0 || goes_before(tenants_[i], tenants_[static_cast<size_t>(best)])) {
      best = static_cast<TenantId>(i);
    }
  }
  return best;
}

void DeviceArbiter::charge(Tenant& tenant, TimePoint now) {
  const double busy = seconds_between(turn_started_, now);
  tenant.busy_seconds += busy;
  tenant.charged_seconds += busy / tenant.options.weight;
  turn_started_ = now;
}

void DeviceArbiter::wait_for_turn(std::unique_lock<std::mutex>& lock, TenantId id,
                                  TimePoint asked) {
  Tenant& tenant = tenants_[static_cast<size_t>(id)];
  if (holder_ != id) {
    tenant.waiting = true;
    tenant.ticket = next_ticket_++;
    turn_changed_.wait(lock, [&] { return holder_ == id; });
  }
  turn_started_ = clock_();
  tenant.wait_seconds->observe(seconds_between(asked, turn_started_));
}

DeviceArbiter::Turn DeviceArbiter::acquire(TenantId id) {
  const TimePoint asked = clock_();
  std::unique_lock lock(mutex_);
  Tenant& tenant = tenants_.at(static_cast<size_t>(id));
  // Idle time is not credit: a tenant coming back starts no lower than the busy ones.
  bool others_active = false;
  const double least = least_active_charge(id, &others_active);
  if (others_active) tenant.charged_seconds = std::max(tenant.charged_seconds, least);
  if (holder_ < 0) holder_ = id;
  wait_for_turn(lock, id, asked);
  return Turn(this, id);
}

void DeviceArbiter::between_steps(Turn& turn) {
  const TenantId id = turn.tenant_;
  std::unique_lock lock(mutex_);
  const TimePoint now = clock_();
  Tenant& tenant = tenants_[static_cast<size_t>(id)];
  charge(tenant, now);
  const TenantId next = next_in_line();
  if (next < 0 || !yields_to(tenant, tenants_[static_cast<size_t>(next)])) {
    tenant.wait_seconds->observe(0);
    return;
  }
  holder_ = next;
  tenants_[static_cast<size_t>(next)].waiting = false;
  turn_changed_.notify_all();
  wait_for_turn(lock, id, now);
}

void DeviceArbiter::release(TenantId id) {
  {
    std::lock_guard lock(mutex_);
    charge(tenants_[static_cast<size_t>(id)], clock_());
    holder_ = next_in_line();
    if (holder_ < 0) return;
    tenants_[static_cast<size_t>(holder_)].waiting = false;
  }
  turn_changed_.notify_all();
}

int DeviceArbiter::waiting_tenants() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(
      std::count_if(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.waiting; }));
}

double DeviceArbiter::busy_seconds(TenantId id) const {
  std::lock_guard lock(mutex_);
  return tenants_.at(static_cast<size_t>(id)).busy_seconds;
}

std::string DeviceArbiter::render_prometheus() const {
  std::string out =
      "# HELP brisk_device_busy_seconds_total Time each model's steps held the device.\n"
      "# TYPE brisk_device_busy_seconds_total counter\n";
  std::lock_guard lock(mutex_);
  for (const Tenant& tenant : tenants_) {
    out += fmt::format("brisk_device_busy_seconds_total{{model=\"{}\"}} {}\n",
                       escape_label_value(tenant.options.name), tenant.busy_seconds);
  }
  out +=
      "# HELP brisk_arbiter_wait_seconds Time a model's step waited for another model's step to "
      "leave the device.\n"
      "# TYPE brisk_arbiter_wait_seconds histogram\n";
  for (const Tenant& tenant : tenants_) {
    out += tenant.wait_seconds->render_prometheus("brisk_arbiter_wait_seconds",
                                                  fmt::format("model=\"{}\"", escape_label_value(tenant.options.name)));
  }
  return out;
}

}  // namespace brisk
