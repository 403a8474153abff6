// The list of subcommands, in the order `cpattn --help` shows them, and the choices they share.
#include "cli/commands.h"

#include "cpattn/layout.h"

namespace cpattn::cli {

std::vector<std::string> layout_choices() {
  std::vector<std::string> names;
  for (const Layout l : kLayouts) names.emplace_back(layout_name(l));
  return names;
}

std::vector<Command> all_commands() {
  return {train_command(), generate_command(), verify_command(), plan_command()};
}

}  // namespace cpattn::cli
