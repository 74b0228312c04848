#include "common/log.h"

#include <fmt/chrono.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

namespace brisk {
namespace {

LogFormat g_format = LogFormat::text;

class JsonLineSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    const std::string text(message.payload.data(), message.payload.size());
    nlohmann::json line = {
        {"ts", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z",
                           fmt::gmtime(std::chrono::system_clock::to_time_t(message.time)))},
        {"level", spdlog::level::to_string_view(message.level).data()}};
    nlohmann::json fields =
        text.starts_with("{") ? nlohmann::json::parse(text, nullptr, false) : nlohmann::json();
    if (fields.is_object()) {
      line.update(fields);
    } else {
      line["msg"] = text;
    }
    const std::string out =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(out.data(), 1, out.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

bool configure_logging(LogFormat format, const std::string& level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") return false;
  g_format = format;
  std::shared_ptr<spdlog::logger> logger;
  if (format == LogFormat::json) {
    logger = std::make_shared<spdlog::logger>("brisk", std::make_shared<JsonLineSink>());
  } else {
    logger = std::make_shared<spdlog::logger>(
        "brisk", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return true;
}

LogFormat log_format() { return g_format; }

}  // namespace brisk
