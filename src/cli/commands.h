// The CLI's subcommands. Each one registers its options on a CLI::App and returns the function
// that runs it (returning the process exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace cpattn::cli {

struct Command {
  std::string name;
  /// Adds the subcommand `name` to app; the returned function runs it after parsing.
  std::function<std::function<int()>(CLI::App& app)> add;
  std::function<int()> add_to(CLI::App& app) const { return add(app); }
};

/// `cpattn train`: trains a byte-level transformer with context-parallel attention.
Command train_command();

/// `cpattn generate`: samples text from a checkpoint of `cpattn train --save`.
Command generate_command();

/// `cpattn verify`: kernel (and, with --cp, ring) against the double reference.
Command verify_command();

/// `cpattn plan`: predicts every CP strategy's cost for a shape and recommends one.
Command plan_command();

/// Every subcommand, in help order.
std::vector<Command> all_commands();

/// The names of every sequence layout (cpattn::kLayouts): the choices of each command's
/// --layout.
std::vector<std::string> layout_choices();

}  // namespace cpattn::cli
