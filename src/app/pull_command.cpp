#include <iostream>

#include "app/commands.h"
#include "common/model_store.h"

namespace brisk {

CommandRunner register_pull_command(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  app.add_option("model", *name, "Catalog name of the model (e.g. gemma3-270m)")->required();
  return [name] {
    const ModelStore store = ModelStore::from_environment();
    const PullResult result = store.pull(*name, std::cout);
    if (!result.ok()) {
      std::cerr << "error: " << result.error << "\n";
      return 1;
    }
    std::cout << result.path.string() << "\n";
    return 0;
  };
}

}  // namespace brisk
