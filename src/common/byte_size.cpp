#include "common/byte_size.h"

#include <charconv>
#include <cmath>
#include <utility>

namespace brisk {

std::optional<uint64_t> parse_byte_size(std::string_view text, std::optional<uint64_t> whole,
                                        std::string& error) {
  error = "'" + std::string(text) +
          "' is no size: write bytes with a unit, such as 12GiB, 800MiB, 16GB or 12G" +
          (whole ? ", or a share such as 75%" : "");
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || !(number >= 0) || !std::isfinite(number)) return std::nullopt;
  std::string unit(end, text.data() + text.size());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double bytes = 0;
  if (unit == "%") {
    if (!whole || number > 100) return std::nullopt;
    bytes = static_cast<double>(*whole) * number / 100;
  } else {
    static const std::pair<const char*, double> kUnits[] = {
        {"", 1},          {"b", 1},          {"k", 1024.0},     {"kib", 1024.0},
        {"kb", 1e3},      {"m", 1048576.0},  {"mib", 1048576.0}, {"mb", 1e6},
        {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9}, {"t", 1099511627776.0},
        {"tib", 1099511627776.0}, {"tb", 1e12}};
    bool known = false;
    for (const auto& [name, scale] : kUnits) {
      if (unit == name) {
        bytes = number * scale;
        known = true;
      }
    }
    if (!known) return std::nullopt;
  }
  if (bytes < 1 || bytes > 1e18) return std::nullopt;
  error.clear();
  return static_cast<uint64_t>(bytes);
}

}  // namespace brisk
