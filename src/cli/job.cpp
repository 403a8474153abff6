// Deadline option, mpirun detection, error line and exit statuses shared by the commands.
#include "cli/job.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "cpattn/isa.h"
#include "cpattn/memory.h"

namespace cpattn::cli {

int exit_status(const Error& e) { return 10 + static_cast<int>(e.code()); }

namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// The value in MiB of a "Name:   123 kB" line of /proc/self/status, as text ("unknown" when it
// cannot be read).
std::string status_mib(const std::string& status, const std::string& name) {
  const size_t at = status.find("\n" + name + ":");
  if (at == std::string::npos) return "unknown";
  char* end = nullptr;
  const long long kib = std::strtoll(status.c_str() + at + name.size() + 2, &end, 10);
  if (end == status.c_str() + at + name.size() + 2) return "unknown";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", mib(kib * 1024));
  return text;
}

}  // namespace

std::string out_of_memory_message(const std::bad_alloc& e, const std::string& command) {
  std::string status = "\n";  // so that every field, the first included, follows a newline
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) status.append(buf, n);
    std::fclose(f);
  }
  const MemoryStats m = process_memory().stats();
  char counted[96];
  std::snprintf(counted, sizeof counted, "%.1f MiB (peak %.1f MiB)", mib(m.live_bytes),
                mib(m.peak_bytes));
  std::string advice;
  if (command == "train") {
    advice = "; reduce --batch, --seq, --d-model or --layers, or keep --recompute on";
  } else if (!command.empty()) {
    advice = "; reduce --seq (or --batch, the heads or the head dims)";
  }
  return detail::str_cat(e.what(), " failed while the process had ", status_mib(status, "VmSize"),
                         " of address space and ", status_mib(status, "VmRSS"), " resident (peak ",
                         status_mib(status, "VmHWM"), "), of which cpattn's counted buffers ",
                         counted, advice);
}

void print_error(const Error& e) {
  std::fprintf(stderr, "cpattn: error (%s): %s\n", error_code_name(e.code()), e.what());
  std::fflush(stderr);
}

void add_timeout_option(CLI::App* cmd, double& seconds) {
  seconds = std::chrono::duration<double>(kDefaultCommTimeout).count();
  cmd->add_option("--timeout", seconds,
                  "Deadline in seconds of every wait on another rank (a stopped, hung or dead "
                  "rank fails the job after it)")
      ->capture_default_str();
}

CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, const std::string& description) {
  const CLI::Validator whole_number(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, status] = std::from_chars(text.data(), end, value);
        if (text.empty() || status != std::errc() || stop != end) {
          return "must be a whole number in [0, 2^64 - 1], got '" + text + "'";
        }
        return {};
      },
      "UINT64");
  return cmd->add_option("--seed", seed, description)->check(whole_number)->capture_default_str();
}

std::chrono::milliseconds deadline(double seconds) {
  return timeout_of_seconds(seconds, "--timeout");
}

std::string isa_summary() {
  std::string available;
  for (Isa isa : available_isas())
    available += std::string(available.empty() ? "" : " ") + isa_name(isa);
  const char* env = std::getenv("CPATTN_ISA");
  const Bf16DotRate& bf16 = bf16_dot_rate();
  const std::string bf16_text =
      bf16.source == "no AVX512_BF16"
          ? std::string()
          : "; bf16 products " +
                std::string(resolve_isa(Isa::kAuto) == Isa::kAvx512Bf16 ? "on vdpbf16ps"
                                                                        : "widened to fp32") +
                " (vdpbf16ps " + bf16.source + ")";
  return std::string("kernel ISA ") + isa_name(resolve_isa(Isa::kAuto)) + " (" +
         (env ? std::string("CPATTN_ISA=") + env + "; " : std::string()) +
         "available: " + available + bf16_text + "; " + amx_support().summary() + ")";
}

int mpirun_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr) return std::max(1, std::atoi(value));
  }
  return 1;
}

void refuse_mpirun_without_mpi(const std::string& command, std::optional<std::string> backend) {
  const int n = mpirun_processes();
  if (n == 1 || backend == "mpi") return;
  throw Error(ErrorCode::kInvalidArgument,
              backend ? detail::str_cat("cpattn ", command, " was started as one of ", n,
                                        " mpirun processes without --backend mpi: each would "
                                        "run its own job; add --backend mpi (one rank per "
                                        "process) or run it without mpirun")
                      : detail::str_cat("cpattn ", command, " was started as one of ", n,
                                        " mpirun processes, but it runs in one process (each "
                                        "would run its own job): run it without mpirun"));
}

}  // namespace cpattn::cli
