// `cpattn train`: trains the byte-level transformer on a text file with context parallelism over
// in-process ranks (default) or MPI processes, optionally after the step-0 gradient check.
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/train_report.h"
#include "cpattn/attention.h"
#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "train/blas.h"
#include "train/data.h"
#include "train/trainer.h"
#ifdef CPATTN_HAVE_MPI
#include "cpattn/mpi_communicator.h"
#endif

namespace cpattn::cli {

namespace {

struct TrainOptions {
  train::TrainConfig config;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string backend = "threads";
  std::string layout = "zigzag";
  std::string metrics;
  std::string plot;
  bool check = false;
  bool json = false;
  bool cp_given = false;
};

// The defaults of `cpattn train` (README quick start): sized so that --check plus training take
// under 3 minutes on 2 cores and end well below GPL-3's unigram entropy (docs/train.md).
train::TrainConfig default_config() {
  train::TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 128;
  c.model.heads = 4;
  c.model.kv_heads = 2;
  c.cp = 4;
  c.seq_len = 256;
  c.batch = 8;
  c.steps = 200;
  c.adamw.lr = 3e-3;
  c.adamw.warmup_steps = 20;
  c.dropout = 0.1f;
  c.recompute = true;
  return c;
}

// Where the run happens and who talks: the group runner, whether this process prints, and the
// MPI communicator (null in-process) over which per-process numbers are summed.
struct Backend {
  train::GroupRunner group;
  bool lead = true;
  Communicator* world = nullptr;
};

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

int run(const TrainOptions& o, const std::vector<uint8_t>& text, const Backend& backend) {
  const train::TrainConfig& cfg = o.config;
  // With --json stdout carries only the JSON document; the progress goes to stderr.
  std::FILE* out = o.json ? stderr : stdout;
  const double entropy = train::unigram_entropy_nats(text);
  if (backend.lead) {
    std::fprintf(out,
                 "cpattn train: %s (%zu bytes, unigram entropy %.4f nats)\n"
                 "  model: %lld layers, d_model %lld, %lld heads / %lld kv heads, vocab %lld\n"
                 "  cp %d (%s, %s), recompute %s, dropout %g, %lld steps of %lld x %lld tokens\n",
                 o.text.c_str(), text.size(), entropy, static_cast<long long>(cfg.model.layers),
                 static_cast<long long>(cfg.model.d_model), static_cast<long long>(cfg.model.heads),
                 static_cast<long long>(cfg.model.kv_heads),
                 static_cast<long long>(cfg.model.vocab), cfg.cp, layout_name(cfg.layout),
                 o.backend.c_str(), cfg.recompute ? "on" : "off", cfg.dropout,
                 static_cast<long long>(cfg.steps), static_cast<long long>(cfg.batch),
                 static_cast<long long>(cfg.seq_len));
    std::fflush(out);
  }
  // Fail on an unwritable --metrics or --plot path now rather than after training.
  std::optional<ProgressPrinter> progress;
  if (backend.lead) progress.emplace(cfg.steps, out, o.metrics, backend.world == nullptr);
  if (backend.lead && !o.plot.empty()) {
    CPATTN_CHECK(std::ofstream(o.plot, std::ios::out | std::ios::trunc).is_open(), ErrorCode::kIo,
                 "cannot create --plot file '", o.plot, "'");
  }
  std::optional<train::CheckReport> check;
  if (o.check) {
    check = train::run_check(cfg, text, backend.group);
    if (backend.lead) print_check(*check, out);
    if (!check->passed) {
      if (backend.lead && o.json) {
        std::printf("%s\n", nlohmann::json{{"check", check_json(*check)}}.dump(2).c_str());
      }
      return 1;
    }
  }

  const train::TrainResult result = train::train(
      cfg, text, backend.group, [&](const train::StepMetrics& m) { progress->on_step(m); });
  if (progress) progress->finish();

  Summary s;
  s.final_loss = result.final_loss();
  s.final_window = std::min<int64_t>(cfg.steps, train::TrainResult::kFinalWindow);
  s.unigram_entropy = entropy;
  s.tokens_per_s = result.tokens_per_s;
  s.elapsed_s = result.elapsed_s;
  s.steps = cfg.steps;
  s.tokens = result.tokens;
  s.peak_rss_bytes = sum_over_processes(backend.world, peak_rss_bytes());
  const StateMemoryStats stats = memory_stats();
  s.cpattn_peak_bytes = sum_over_processes(backend.world, stats.peak_bytes);
  s.live_forward_results = sum_over_processes(backend.world, stats.live_forward_results);
  s.processes = backend.world != nullptr ? backend.world->size() : 1;
  if (!backend.lead) return s.live_forward_results == 0 ? 0 : 1;

  s.first_loss = result.losses.front();
  s.weight_digest = digest_hex(result.weight_digest);
  if (!o.plot.empty()) plot_losses(result.losses, entropy, o.plot);
  if (o.json) {
    nlohmann::json doc = summary_json(s);
    if (check) doc["check"] = check_json(*check);
    doc["config"] = {{"text", o.text},
                     {"cp", cfg.cp},
                     {"backend", o.backend},
                     {"layout", layout_name(cfg.layout)},
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
                     {"threads", cfg.threads}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    print_summary(s, stdout);
  }
  if (s.live_forward_results != 0) {
    std::fprintf(stderr, "cpattn: error: %lld ForwardResults still alive at exit (leak)\n",
                 static_cast<long long>(s.live_forward_results));
    return 1;
  }
  return 0;
}

int run_train(TrainOptions o) {
  // One BLAS thread per rank: ranks are the parallelism (nested BLAS threads would oversubscribe).
  train::set_blas_threads(1);
  o.config.layout = parse_layout(o.layout);
  const std::vector<uint8_t> text = train::read_text_file(o.text, o.config.seq_len);
  if (o.backend == "threads") {
    train::validate_train_config(o.config, text);
    return run(o, text, {train::thread_group(o.config.cp), true, nullptr});
  }
#ifdef CPATTN_HAVE_MPI
  MpiSession session(nullptr, nullptr);
  MpiCommunicator world;
  // Under mpirun the group is the MPI world: --cp, when given, must agree with -n.
  CPATTN_CHECK(!o.cp_given || o.config.cp == world.size(), ErrorCode::kInvalidArgument, "--cp ",
               o.config.cp, " differs from the ", world.size(),
               " MPI processes (--backend mpi uses one rank per process)");
  o.config.cp = world.size();
  train::validate_train_config(o.config, text);
  const Backend backend{[&world](const std::function<void(Communicator&)>& fn) { fn(world); },
                        world.rank() == 0, &world};
  return mpi_abort_on_error([&] { return run(o, text, backend); });
#else
  throw Error(ErrorCode::kInvalidArgument,
              "--backend mpi: this cpattn was built without MPI (OpenMPI not found at configure)");
#endif
}

}  // namespace

Command train_command() {
  return {
      "train", [](CLI::App& app) -> std::function<int()> {
        auto o = std::make_shared<TrainOptions>();
        o->config = default_config();
        train::TrainConfig& c = o->config;
        CLI::App* cmd = app.add_subcommand(
            "train",
            "Train a byte-level transformer on a text file with context-parallel attention "
            "(recompute + dropout), optionally proving its gradients first (--check)");
        cmd->add_option("--text", o->text, "Training text (any file; bytes are the tokens)")
            ->capture_default_str();
        cmd->add_option("--cp", c.cp, "Context-parallel ranks (sequence shards)")
            ->capture_default_str();
        cmd->add_option("--backend", o->backend, "threads (in-process ranks) | mpi (mpirun)")
            ->check(CLI::IsMember({"threads", "mpi"}))
            ->capture_default_str();
        cmd->add_option("--layout", o->layout, "Token layout: zigzag | striped | contiguous")
            ->check(CLI::IsMember({"zigzag", "striped", "contiguous"}))
            ->capture_default_str();
        cmd->add_option("--layers", c.model.layers, "Transformer layers")->capture_default_str();
        cmd->add_option("--d-model", c.model.d_model, "Model width")->capture_default_str();
        cmd->add_option("--heads", c.model.heads, "Query heads (must divide --d-model)")
            ->capture_default_str();
        cmd->add_option("--kv-heads", c.model.kv_heads, "Key/value heads (GQA; divides --heads)")
            ->capture_default_str();
        cmd->add_option("--seq", c.seq_len, "Tokens per sequence (split over --cp ranks)")
            ->capture_default_str();
        cmd->add_option("--batch", c.batch, "Sequences per step")->capture_default_str();
        cmd->add_option("--steps", c.steps, "Optimizer steps")->capture_default_str();
        cmd->add_option("--lr", c.adamw.lr, "Peak learning rate (AdamW, cosine decay)")
            ->capture_default_str();
        cmd->add_option("--warmup", c.adamw.warmup_steps, "Linear warmup steps")
            ->capture_default_str();
        cmd->add_option("--dropout", c.dropout, "Attention dropout probability")
            ->capture_default_str();
        cmd->add_flag("--recompute,!--no-recompute", c.recompute,
                      "Checkpoint every layer (recompute its forward in backward); default on");
        cmd->add_option("--seed", c.seed, "Seed of init, batches and dropout")
            ->capture_default_str();
        cmd->add_option("--threads", c.threads, "Attention kernel threads per rank")
            ->capture_default_str();
        cmd->add_flag("--check", o->check,
                      "First compare step-0 loss and gradients: cp=P recompute, cp=P "
                      "no-recompute, cp=1 (exit 1 if any differs by more than 1e-5)");
        cmd->add_option("--metrics", o->metrics, "Write one JSON object per step here (JSONL)");
        cmd->add_option("--plot", o->plot, "Draw the loss curve into this PNG (gnuplot)");
        cmd->add_flag("--json", o->json, "Print the summary as JSON (progress goes to stderr)");
        return [o, cmd] {
          o->cp_given = cmd->count("--cp") > 0;
          return run_train(*o);
        };
      }};
}

}  // namespace cpattn::cli
