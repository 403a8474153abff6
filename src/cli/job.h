// What every `cpattn` command shares about running as a job: the one deadline setting
// (--timeout), the refusal to run N independent jobs under mpirun, the error line and exit
// statuses, and (with MPI) the per-process wrapper that ends a failed job on every rank.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <new>
#include <optional>
#include <string>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn::cli {

/// Exit status of a run stopped by SIGINT / SIGTERM (128 + signal number, as a shell reports a
/// process killed by the signal).
inline constexpr int kExitInterrupted = 130;
inline constexpr int kExitTerminated = 143;
/// Exit status when memory ran out (std::bad_alloc): beyond 10 + every ErrorCode.
inline constexpr int kExitOutOfMemory = 30;

/// 10 + the error's code (docs/design.md section 8).
int exit_status(const Error& e);

/// The message of an out-of-memory failure: what was being allocated (e.what():
/// train::AllocationError names it; a plain std::bad_alloc says "std::bad_alloc"), what the
/// process really held when it was reported (its address space, resident and peak resident
/// memory from /proc/self/status, "unknown" where that cannot be read) and how much of it were
/// cpattn's counted buffers (process_memory(): live and peak), then what to reduce for
/// `command` (a subcommand name; nothing for "").
std::string out_of_memory_message(const std::bad_alloc& e, const std::string& command);

/// Prints "cpattn: error (<code name>): <message>" on stderr (one line).
void print_error(const Error& e);

/// Registers --timeout SECONDS on `cmd` (default 300, the library's kDefaultCommTimeout): the
/// deadline of every wait on another rank. `seconds` receives the value.
void add_timeout_option(CLI::App* cmd, double& seconds);

/// Registers --seed N on `cmd` with `description`: a whole number in [0, 2^64 - 1], checked as
/// text (CLI11 would read "-1" or "1e30" into a uint64_t as its largest value). `seed` receives
/// the value. Returns the option.
CLI::Option* add_seed_option(CLI::App* cmd, uint64_t& seed, const std::string& description);

/// The deadline of the --timeout option's `seconds` (timeout_of_seconds: throws
/// Error(kInvalidArgument) outside [0.001, 1e6] seconds).
std::chrono::milliseconds deadline(double seconds);

/// "kernel ISA avx512 (available: generic avx2 avx512; AMX-BF16 not exposed by this CPU)", with
/// "CPATTN_ISA=<value>; " before "available" when the variable is set, and, on an AVX512_BF16 CPU,
/// how bf16 products run and why ("; bf16 products widened to fp32 (vdpbf16ps Intel family 0x6
/// model 0xcf (Emerald Rapids): half rate)"): the path the kernel runs for Isa::kAuto
/// (resolve_isa). Throws resolve_isa's Error(kInvalidArgument) for a bad CPATTN_ISA.
std::string isa_summary();

/// Number of processes of the mpirun job this process belongs to (OMPI_COMM_WORLD_SIZE, or
/// PMI_SIZE for other launchers), 1 when not started by mpirun.
int mpirun_processes();

/// Throws Error(kInvalidArgument) when `backend` is not "mpi" but this process is one of several
/// started by mpirun: each would run its own job (and write the same output files). `command`
/// names the subcommand in the message; `backend` is nullopt for a command without --backend
/// (one process only), whose message does not suggest one.
void refuse_mpirun_without_mpi(const std::string& command, std::optional<std::string> backend);

/// Under mpirun, runs fn() (which returns the process's exit status) on this process's rank of
/// `world`, so that a failure ends the job on every rank with the CLI's error line:
/// - train::GroupError (every rank throws it at the same point): prints the error line, leaves
///   through a barrier bounded by world's deadline, and returns exit_status;
/// - any other cpattn::Error: prints "cpattn: rank R: error (<code>): <message>" and calls
///   MPI_Abort with exit_status, so the peers end at once instead of waiting for this rank;
///   std::bad_alloc likewise with kExitOutOfMemory, other exceptions with 2.
/// After fn returns, a barrier under the deadline precedes MPI_Finalize (which has none).
/// Defined only in MPI builds.
int run_mpi_job(Communicator& world, const std::function<int()>& fn);

}  // namespace cpattn::cli
