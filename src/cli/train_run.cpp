// `cpattn train`, the run: start-up checks shared by every rank (settings agreed across ranks,
// outputs that are not inputs, plot-ability, the checkpoint directory), the optional --check,
// training with stop requests and checkpoints, the summary and the exit status.
#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "cli/job.h"
#include "cli/plot.h"
#include "cli/signals.h"
#include "cli/train_options.h"
#include "cli/train_report.h"
#include "cpattn/attention.h"
#include "cpattn/digest.h"
#include "cpattn/dtype.h"
#include "cpattn/error.h"
#include "train/blas.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/files.h"
#include "train/trainer.h"
#ifdef CPATTN_HAVE_MPI
#include "cpattn/mpi_communicator.h"
#endif

namespace cpattn::cli {

namespace {

// Where the run happens and who talks: the group runner, whether this process prints, and the
// MPI communicator (null in-process) over which per-process numbers are summed.
struct Backend {
  train::GroupRunner group;
  bool lead = true;
  Communicator* world = nullptr;
};

// The job frees and allocates the same activations, gradients and kernel scratch every step.
// glibc's default hands a heap's free top back to the kernel once it passes its trim threshold
// (128 KiB, raised only by blocks that had been mapped on their own), and the next step faults
// the pages in again, zeroed; at the defaults that was most of the job's page faults and a few
// per cent of its time (docs/performance.md, "Training job"). This keeps up to 1 GiB of freed
// memory at the top of the heap, and maps on their own only blocks of 32 MiB or more, the largest
// threshold glibc's own adjustment reaches (setting one threshold turns off glibc's adjustment of
// both, so both are set). Every rank thread allocates from the one main arena: a thread's own
// arena grows in heaps of at most 64 MiB, which glibc unmaps and maps again when a step frees
// more than that, while the main arena is one heap; the ranks allocate a few hundred blocks a
// step, so sharing its lock costs nothing measurable. Called before the ranks start. Best effort:
// an allocator that does not take mallopt (ASan's) ignores it, and the job runs the same, only
// with more page faults.
void keep_freed_memory_for_the_next_step() {
  (void)mallopt(M_ARENA_MAX, 1);
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Sum of a per-process value over the MPI processes (exact: integers below 2^53).
int64_t sum_over_processes(Communicator* world, int64_t value) {
  if (world == nullptr) return value;
  double v = static_cast<double>(value);
  world->allreduce_sum(std::span<double>(&v, 1));
  return static_cast<int64_t>(v);
}

// Runs fn on the lead process only; under MPI its Error reaches every rank (GroupError).
void on_lead(const Backend& b, const std::function<void()>& fn) {
  if (b.world == nullptr) {
    fn();
    return;
  }
  train::rank0_result(*b.world, [&] {
    if (b.lead) fn();
    return std::vector<std::byte>();
  });
}

// The job settings every rank must share besides the training ones.
std::vector<train::ConfigField> job_fields(const TrainOptions& o) {
  const auto given = [](const std::string& path) { return path.empty() ? "no" : "yes"; };
  return {{"--check", o.check ? "on" : "off", "", false},
          {"--timeout", train::format_value(o.timeout_s), "", false},
          {"--save", given(o.save), o.save, false},
          {"--save-every", std::to_string(o.save_every), "", false},
          {"--overwrite", o.overwrite ? "on" : "off", "", false},
          {"--resume", given(o.resume), o.resume, false}};
}

// No output may overwrite an input (the text, the checkpoint resumed from) or another output,
// temporary files included. The one exception: --save may name the --resume checkpoint (a run
// that goes on saving where it resumed; it replaces that file only once it has read it).
void check_paths(const TrainOptions& o) {
  const std::string checkpoint = o.save.empty() ? "" : train::checkpoint_path(o.save);
  const std::string resumed = o.resume.empty() ? "" : train::checkpoint_path(o.resume);
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {o.metrics, "--metrics"},
      {o.plot, "--plot"},
      {o.plot.empty() ? "" : train::temporary_path(o.plot), "--plot (temporary)"},
      {checkpoint, "--save"},
      {checkpoint.empty() ? "" : train::temporary_path(checkpoint), "--save (temporary)"}};
  for (size_t i = 0; i < outputs.size(); ++i) {
    train::check_not_input(outputs[i].first, outputs[i].second, o.text, "--text");
    if (outputs[i].first != checkpoint) {
      train::check_not_input(outputs[i].first, outputs[i].second, resumed, "--resume checkpoint");
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      train::check_not_input(outputs[j].first, outputs[j].second, outputs[i].first,
                             outputs[i].second);
    }
  }
  CPATTN_CHECK(o.save_every >= 0, ErrorCode::kInvalidArgument,
               "--save-every must be >= 0 (0: only when stopped and at the end), got ",
               o.save_every);
}

// The checkpoint to resume from: rank 0 reads the file, every rank decodes the same bytes (so
// every rank fails alike on a bad one).
std::optional<train::Checkpoint> load_resume(const TrainOptions& o, const Backend& b,
                                             const std::vector<train::ConfigField>& fields) {
  if (o.resume.empty()) return std::nullopt;
  const std::vector<std::byte> bytes =
      b.world == nullptr
          ? train::read_checkpoint_bytes(o.resume)
          : train::rank0_result(*b.world, [&] { return train::read_checkpoint_bytes(o.resume); });
  const std::string source = "--resume '" + o.resume + "'";
  try {
    train::Checkpoint c = train::decode_checkpoint(bytes, train::checkpoint_path(o.resume));
    train::check_resumable(c, fields, source);
    return c;
  } catch (const train::GroupError&) {
    throw;
  } catch (const Error& e) {
    throw train::GroupError(e.code(), e.what());
  }
}

void print_header(const TrainOptions& o, const std::vector<uint8_t>& text, double entropy,
                  std::FILE* out) {
  const train::TrainConfig& cfg = o.config;
  std::fprintf(out,
               "cpattn train: %s (%zu bytes, unigram entropy %.4f nats)\n"
               "  model: %lld layers, d_model %lld, %lld heads / %lld kv heads, vocab %lld\n"
               "  cp %d (%s, %s, %s), attention %s, recompute %s, dropout %g, %lld steps of "
               "%lld x %lld tokens\n",
               o.text.c_str(), text.size(), entropy, static_cast<long long>(cfg.model.layers),
               static_cast<long long>(cfg.model.d_model), static_cast<long long>(cfg.model.heads),
               static_cast<long long>(cfg.model.kv_heads), static_cast<long long>(cfg.model.vocab),
               cfg.cp, layout_name(cfg.layout), strategy_name(cfg.strategy).c_str(),
               o.backend.c_str(), dtype_name(cfg.dtype), cfg.recompute ? "on" : "off", cfg.dropout,
               static_cast<long long>(cfg.steps), static_cast<long long>(cfg.batch),
               static_cast<long long>(cfg.seq_len));
  if (cfg.eval_every > 0) {
    const train::TextSplit split = train::split_text(cfg, static_cast<int64_t>(text.size()));
    std::fprintf(out, "  held-out loss every %lld steps on the last %lld bytes\n",
                 static_cast<long long>(cfg.eval_every),
                 static_cast<long long>(split.held_out_bytes));
  }
  if (!o.resume.empty()) std::fprintf(out, "  resuming from %s\n", o.resume.c_str());
  std::fprintf(out, "  %s; matrix products: %s\n", isa_summary().c_str(),
               train::blas_summary().c_str());
  CPATTN_CHECK(std::fflush(out) == 0 && std::ferror(out) == 0, ErrorCode::kIo, "writing to ",
               out == stdout ? "stdout" : "stderr", " failed: ", std::strerror(errno));
}

const char* end_name(const train::TrainResult& r) {
  switch (r.end) {
    case train::RunEnd::kCompleted:
      return "completed";
    case train::RunEnd::kNonFinite:
      return "nonfinite";
    case train::RunEnd::kStopped:
      break;
  }
  switch (r.stop) {
    case train::StopRequest::kInterrupt:
      return "interrupted";
    case train::StopRequest::kTerminate:
      return "terminated";
    default:
      return "output_failed";
  }
}

// "checkpoint saved to DIR/checkpoint.bin" / "checkpoint not saved (no --save)".
std::string checkpoint_note(const TrainOptions& o, const train::TrainResult& r) {
  if (o.save.empty()) return "checkpoint not saved (no --save)";
  return detail::str_cat("checkpoint of step ", r.saved_step, " saved to ",
                         train::checkpoint_path(o.save));
}

// The exit status of a run that did not complete, after printing why (every rank of a group
// ends the same way; only the lead prints for interruptions, which are not errors).
int stopped_status(const TrainOptions& o, const train::TrainResult& r, const Backend& b,
                   const ProgressPrinter* progress) {
  const std::string note = checkpoint_note(o, r);
  if (r.end == train::RunEnd::kNonFinite) {
    print_error(Error(ErrorCode::kNumeric,
                      r.nonfinite + "; training stopped (--on-nonfinite stop); " + note));
    return 10 + static_cast<int>(ErrorCode::kNumeric);
  }
  if (r.stop == train::StopRequest::kOutputFailed) {
    const std::string why = progress != nullptr ? progress->failure()
                                                : std::string("rank 0 could not write its output");
    print_error(Error(ErrorCode::kIo, detail::str_cat(why, "; training stopped at step ",
                                                      r.steps_done, "; ", note)));
    return 10 + static_cast<int>(ErrorCode::kIo);
  }
  const bool sigint = r.stop == train::StopRequest::kInterrupt;
  if (b.lead) {
    std::fprintf(stderr, "cpattn: %s at step %lld; %s\n", sigint ? "interrupted" : "terminated",
                 static_cast<long long>(r.steps_done), note.c_str());
    std::fflush(stderr);
  }
  return sigint ? kExitInterrupted : kExitTerminated;
}

int run(const TrainOptions& o, const std::vector<uint8_t>& text, const Backend& b,
        const std::vector<train::ConfigField>& fields) {
  const train::TrainConfig& cfg = o.config;
  const std::optional<train::Checkpoint> resume = load_resume(o, b, fields);
  // With --json stdout carries only the JSON document; the progress goes to stderr.
  std::FILE* out = o.json ? stderr : stdout;
  const double entropy = train::unigram_entropy_nats(text);
  // Every output is checked now, before any training and before the header, so that a refused
  // output is the only line printed: checkpoint directory writable (and not another run's),
  // plot drawable, metrics created.
  std::optional<ProgressPrinter> progress;
  std::optional<train::CheckpointDirLock> save_lock;  // held until the run ends
  on_lead(b, [&] {
    if (!o.save.empty()) {
      save_lock = train::prepare_checkpoint_dir(
          o.save, o.overwrite || train::same_checkpoint(o.save, o.resume));
    }
    if (!o.plot.empty()) check_plot_possible(o.plot);
    progress.emplace(resume ? resume->step : 0, cfg.steps, out, o.metrics, b.world == nullptr);
    print_header(o, text, entropy, out);
  });
  std::optional<train::CheckReport> check;
  if (o.check) {
    check = train::run_check(cfg, text, b.group);
    if (b.lead) print_check(*check, out);
    if (!check->passed) {
      if (b.lead && o.json) {
        std::printf("%s\n", nlohmann::json{{"check", check_json(*check)}}.dump(2).c_str());
      }
      return 1;
    }
  }

  train::TrainHooks hooks;
  hooks.on_step = [&](const train::StepMetrics& m) { progress->on_step(m); };
  hooks.poll_stop = [&] {
    const train::StopRequest signal = signal_stop_request();
    if (signal != train::StopRequest::kNone) return signal;
    return progress && progress->failed() ? train::StopRequest::kOutputFailed
                                          : train::StopRequest::kNone;
  };
  // In-process ranks all read the one flag, so they abandon the same step; MPI processes stop at
  // the next boundary (TrainHooks::stop_requested).
  if (b.world == nullptr) hooks.stop_requested = signal_stop_flag();
  if (!o.save.empty()) {
    hooks.save = [&](const train::Checkpoint& c) { train::save_checkpoint(o.save, c); };
    hooks.save_every = o.save_every;
  }
  const train::TrainResult result =
      train::train(cfg, text, b.group, hooks, resume ? &*resume : nullptr);
  if (progress) progress->finish();

  Summary s;
  s.end = end_name(result);
  s.first_step = result.first_step;
  s.steps_done = result.steps_done;
  s.skipped_steps = result.skipped_steps;
  if (result.saved_step >= 0) s.checkpoint = train::checkpoint_path(o.save);
  s.checkpoint_step = result.saved_step;
  s.evals = result.evals;
  s.final_loss = result.final_loss();
  s.final_window = result.final_window();
  s.unigram_entropy = entropy;
  s.tokens_per_s = result.tokens_per_s;
  s.elapsed_s = result.elapsed_s;
  s.steps = cfg.steps;
  s.tokens = result.tokens;
  s.peak_rss_bytes = sum_over_processes(b.world, peak_rss_bytes());
  const StateMemoryStats stats = memory_stats();
  s.cpattn_peak_bytes = sum_over_processes(b.world, stats.peak_bytes);
  s.live_forward_results = sum_over_processes(b.world, stats.live_forward_results);
  s.processes = b.world != nullptr ? b.world->size() : 1;
  s.first_loss = result.losses.empty() ? 0.0 : result.losses.front();
  s.weight_digest = digest_hex(result.weight_digest);
  int status = 0;
  if (b.lead) {
    if (o.json) {
      nlohmann::json doc = summary_json(s);
      if (check) doc["check"] = check_json(*check);
      doc["config"] = {{"text", o.text},
                       {"cp", cfg.cp},
                       {"backend", o.backend},
                       {"layout", layout_name(cfg.layout)},
                       {"strategy", strategy_name(cfg.strategy)},
                       {"dtype", dtype_name(cfg.dtype)},
                       {"layers", cfg.model.layers},
                       {"d_model", cfg.model.d_model},
                       {"heads", cfg.model.heads},
                       {"kv_heads", cfg.model.kv_heads},
                       {"seq", cfg.seq_len},
                       {"batch", cfg.batch},
                       {"steps", cfg.steps},
                       {"lr", cfg.adamw.lr},
                       {"dropout", cfg.dropout},
                       {"recompute", cfg.recompute},
                       {"seed", cfg.seed},
                       {"threads", cfg.threads},
                       {"eval_every", cfg.eval_every},
                       {"on_nonfinite", train::nonfinite_policy_name(cfg.on_nonfinite)}};
      std::printf("%s\n", doc.dump(2).c_str());
    } else {
      print_summary(s, stdout);
    }
    // The summary is out before anything else can fail: a bad plot does not lose it. A stdout
    // that already failed during training is reported once, by stopped_status.
    const bool output_failed =
        result.end == train::RunEnd::kStopped && result.stop == train::StopRequest::kOutputFailed;
    if ((std::fflush(stdout) != 0 || std::ferror(stdout) != 0) && !output_failed) {
      print_error(Error(ErrorCode::kIo, detail::str_cat("writing the summary to stdout failed: ",
                                                        std::strerror(errno))));
      status = 10 + static_cast<int>(ErrorCode::kIo);
    }
    if (!o.plot.empty() && !result.losses.empty()) {
      try {
        plot_losses(result.losses, result.evals, entropy, o.plot);
      } catch (const Error& e) {
        print_error(e);
        status = exit_status(e);
      }
    }
  }
  if (result.end != train::RunEnd::kCompleted) {
    return stopped_status(o, result, b, progress ? &*progress : nullptr);
  }
  if (s.live_forward_results != 0) {
    if (b.lead) {
      std::fprintf(stderr, "cpattn: error: %lld ForwardResults still alive at exit (leak)\n",
                   static_cast<long long>(s.live_forward_results));
    }
    return 1;
  }
  return status;
}

// This process's start-up: the text, the settings and the paths. Returns the settings as fields.
std::vector<train::ConfigField> start(TrainOptions& o, std::vector<uint8_t>& text) {
  o.config.layout = parse_layout(o.layout);
  o.config.strategy = parse_strategy(o.strategy);
  o.config.dtype = parse_dtype(o.dtype.c_str());
  o.config.on_nonfinite =
      o.on_nonfinite == "skip" ? train::NonFinitePolicy::kSkip : train::NonFinitePolicy::kStop;
  deadline(o.timeout_s);
  check_paths(o);
  text = train::read_text_file(o.text, o.config.seq_len);
  train::validate_train_config(o.config, text);
  std::vector<train::ConfigField> fields = train::config_fields(o.config, text, o.text);
  for (train::ConfigField& f : job_fields(o)) fields.push_back(std::move(f));
  return fields;
}

}  // namespace

int run_train(TrainOptions o) {
  refuse_mpirun_without_mpi("train", o.backend);
  // One BLAS thread per rank: ranks are the parallelism (nested BLAS threads would oversubscribe).
  train::set_blas_threads(1);
  keep_freed_memory_for_the_next_step();
  install_stop_handlers();
  std::vector<uint8_t> text;
  if (o.backend == "threads") {
    const std::vector<train::ConfigField> fields = start(o, text);
    return run(o, text, {train::thread_group(o.config.cp, deadline(o.timeout_s)), true, nullptr},
               fields);
  }
#ifdef CPATTN_HAVE_MPI
  MpiSession session(nullptr, nullptr);
  MpiCommunicator world;
  world.set_timeout(deadline(o.timeout_s));
  return run_mpi_job(world, [&] {
    // Every rank checks its own command line; the first collective tells every rank whether
    // any failed, the second whether they were all started with the same settings.
    std::optional<Error> failed;
    std::vector<train::ConfigField> fields;
    try {
      // Under mpirun the group is the MPI world: --cp, when given, must agree with -n.
      CPATTN_CHECK(!o.cp_given || o.config.cp == world.size(), ErrorCode::kInvalidArgument, "--cp ",
                   o.config.cp, " differs from the ", world.size(),
                   " MPI processes (--backend mpi uses one rank per process)");
      o.config.cp = world.size();
      fields = start(o, text);
    } catch (const Error& e) {
      failed = e;
    }
    train::share_startup_errors(world, failed);
    train::agree_on_fields(world, fields, "cpattn train");
    const Backend backend{[&world](const std::function<void(Communicator&)>& fn) { fn(world); },
                          world.rank() == 0, &world};
    return run(o, text, backend, fields);
  });
#else
  throw Error(ErrorCode::kInvalidArgument,
              "--backend mpi: this cpattn was built without MPI (OpenMPI not found at configure)");
#endif
}

}  // namespace cpattn::cli
