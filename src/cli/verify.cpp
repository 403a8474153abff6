// `cpattn verify` (being written: kernel sweep against the double reference).
#include "cli/commands.h"

namespace cpattn::cli {

Command verify_command() {
  return {"verify", [](CLI::App& app) -> std::function<int()> {
            app.add_subcommand("verify", "Check kernels against a double-precision reference");
            return [] { return 1; };
          }};
}

}  // namespace cpattn::cli
