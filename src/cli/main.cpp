// Entry point of the `cpattn` program: parses the command line (CLI11) and dispatches to a
// subcommand; every cpattn::Error becomes a one-line message and a non-zero exit status
// (docs/design.md section 8), and so does running out of memory.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/signals.h"
#include "cpattn/error.h"
#include "cpattn/version.h"
#include "train/blas.h"

namespace {

// "cpattn: error (out_of_memory): ..." (cli::out_of_memory_message) for the command that ran
// (`command`: its name).
int out_of_memory(const std::bad_alloc& e, const std::string& command) {
  std::fprintf(stderr, "cpattn: error (out_of_memory): %s\n",
               cpattn::cli::out_of_memory_message(e, command).c_str());
  return cpattn::cli::kExitOutOfMemory;
}

// "cpattn 0.2.0 (library 0.2.0, built for any CPU of its architecture; kernel ISA avx512
// (available: generic avx2 avx512; AMX-BF16 not exposed by this CPU); train's matrix products:
// oneDNN 2.6.3 sgemm on avx2, 1 thread)".
std::string version_line() {
  std::string isa;
  try {
    isa = cpattn::cli::isa_summary();
  } catch (const cpattn::Error& e) {
    isa = std::string("kernel ISA: ") + e.what();
  }
  return cpattn::detail::str_cat(
      "cpattn ", CPATTN_VERSION_STRING, " (library ", cpattn::library_version(), ", built ",
      cpattn::library_built_native() ? "with -march=native for its build machine"
                                     : "for any CPU of its architecture",
      "; ", isa, "; train's matrix products: ", cpattn::train::blas_summary(), ")");
}

bool is_subcommand(const std::vector<cpattn::cli::Command>& commands, const std::string& word) {
  for (const auto& c : commands) {
    if (c.name == word) return true;
  }
  return false;
}

// Error(kInvalidArgument) "unknown subcommand 'bogus'; the subcommands are train, verify, ...".
cpattn::Error unknown_subcommand(const std::vector<cpattn::cli::Command>& commands,
                                 const std::string& word) {
  std::string names;
  for (const auto& c : commands) names += (names.empty() ? "" : ", ") + c.name;
  return cpattn::Error(
      cpattn::ErrorCode::kInvalidArgument,
      "unknown subcommand '" + word + "'; the subcommands are " + names + " (cpattn --help)");
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout (`cpattn train | head`) becomes a write error the commands report.
  cpattn::cli::ignore_sigpipe();
  CLI::App app{"cpattn: context-parallel exact attention (forward, backward, recompute-safe)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_line());
  std::vector<cpattn::cli::Command> commands = cpattn::cli::all_commands();
  std::vector<std::function<int()>> runners;
  for (auto& command : commands) runners.push_back(command.add_to(app));
  // CLI11 reads an empty value of a numeric option ("--lr ''") as 0: refuse it instead.
  const CLI::Validator not_empty(
      [](const std::string& value) {
        return value.empty() ? std::string("an empty string is not a number") : std::string();
      },
      "");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options([](CLI::Option* o) {
           const std::string type = o->get_type_name();
           return type == "INT" || type == "UINT" || type == "FLOAT";
         })) {
      opt->check(not_empty);
    }
  }
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand(commands, argv[1])) {
    // CLI11 would say only "A subcommand is required".
    const cpattn::Error e = unknown_subcommand(commands, argv[1]);
    cpattn::cli::print_error(e);
    return cpattn::cli::exit_status(e);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A bad flag or value: cpattn's one error line and status, like every other refusal.
    const std::string help = argc > 1 && is_subcommand(commands, argv[1])
                                 ? std::string("cpattn ") + argv[1] + " --help"
                                 : std::string("cpattn --help");
    const cpattn::Error error(cpattn::ErrorCode::kInvalidArgument,
                              cpattn::detail::one_line(e.what()) + " (" + help + ")");
    cpattn::cli::print_error(error);
    return cpattn::cli::exit_status(error);
  }
  std::string command;
  try {
    for (size_t i = 0; i < commands.size(); ++i) {
      if (!app.got_subcommand(commands[i].name)) continue;
      command = commands[i].name;
      return runners[i]();
    }
  } catch (const cpattn::Error& e) {
    cpattn::cli::print_error(e);
    return cpattn::cli::exit_status(e);
  } catch (const std::bad_alloc& e) {
    return out_of_memory(e, command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpattn: error: %s\n", e.what());
    return 2;
  }
  return 2;
}
