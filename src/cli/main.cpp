// Entry point of the `cpattn` program: parses the command line (CLI11) and dispatches to a
// subcommand; every cpattn::Error becomes a one-line message and a non-zero exit status.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cpattn/error.h"
#include "cpattn/version.h"

int main(int argc, char** argv) {
  CLI::App app{"cpattn: context-parallel exact attention (forward, backward, recompute-safe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       cpattn::detail::str_cat("cpattn ", CPATTN_VERSION_STRING, " (library ",
                                               cpattn::library_version(), ", built ",
                                               cpattn::library_built_native()
                                                   ? "with -march=native for its build machine"
                                                   : "for any x86-64 CPU",
                                               ")"));
  std::vector<cpattn::cli::Command> commands = cpattn::cli::all_commands();
  std::vector<std::function<int()>> runners;
  for (auto& command : commands) runners.push_back(command.add_to(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (size_t i = 0; i < commands.size(); ++i) {
      if (app.got_subcommand(commands[i].name)) return runners[i]();
    }
  } catch (const cpattn::Error& e) {
    std::fprintf(stderr, "cpattn: error (%s): %s\n", cpattn::error_code_name(e.code()), e.what());
    return 10 + static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpattn: error: %s\n", e.what());
    return 2;
  }
  return 2;
}
