// The list of subcommands, in the order `cpattn --help` shows them.
#include "cli/commands.h"

namespace cpattn::cli {

std::vector<Command> all_commands() {
  return {train_command(), generate_command(), verify_command(), plan_command()};
}

}  // namespace cpattn::cli
