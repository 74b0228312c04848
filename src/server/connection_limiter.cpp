#include "server/connection_limiter.h"

#include <fmt/format.h>

namespace brisk {

std::unique_ptr<ConnectionLimiter::Slot> ConnectionLimiter::try_acquire() {
  int open = open_.load();
  do {
    if (open >= max_connections_) {
      refused_total_.fetch_add(1);
      return nullptr;
    }
  } while (!open_.compare_exchange_weak(open, open + 1));
  accepted_total_.fetch_add(1);
  return std::make_unique<Slot>(*this);
}

std::string ConnectionLimiter::render_prometheus() const {
  return fmt::format(
      "# HELP brisk_http_connections Open client connections.\n"
      "# TYPE brisk_http_connections gauge\n"
      "brisk_http_connections {}\n"
      "# HELP brisk_http_connections_max The --max-connections limit.\n"
      "# TYPE brisk_http_connections_max gauge\n"
      "brisk_http_connections_max {}\n"
      "# HELP brisk_http_connections_accepted_total Connections accepted.\n"
      "# TYPE brisk_http_connections_accepted_total counter\n"
      "brisk_http_connections_accepted_total {}\n"
      "# HELP brisk_http_connections_refused_total Connections answered 503 at --max-connections.\n"
      "# TYPE brisk_http_connections_refused_total counter\n"
      "brisk_http_connections_refused_total {}\n",
      open_.load(), max_connections_, accepted_total_.load(), refused_total_.load());
}

}  // namespace brisk
