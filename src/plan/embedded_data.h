#pragma once

#include <string_view>

namespace brisk::plan {

// data/hardware.toml and data/models.toml as they were at build time, so that a lone binary
// plans without the source tree.
std::string_view embedded_hardware_toml();
std::string_view embedded_models_toml();

}  // namespace brisk::plan
