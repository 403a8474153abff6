// `cpattn train`: the options (CLI11) of training the byte-level transformer on a text file with
// context parallelism over in-process ranks (default) or MPI processes; the run itself is
// cli/train_run.cpp.
#include "cli/commands.h"
#include "cli/job.h"
#include "cli/train_options.h"

namespace cpattn::cli {

namespace {

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
        cmd->add_option("--text", o->text,
                        "Training text (a regular file of at most 1 GiB; bytes are the tokens)")
            ->capture_default_str();
        cmd->add_option("--cp", c.cp, "Context-parallel ranks (sequence shards)")
            ->capture_default_str();
        cmd->add_option("--backend", o->backend, "threads (in-process ranks) | mpi (mpirun)")
            ->check(CLI::IsMember({"threads", "mpi"}))
            ->capture_default_str();
        cmd->add_option("--layout", o->layout,
                        "Token layout: zigzag | striped | contiguous | doc_zigzag (one document "
                        "per sequence: doc_zigzag is the zigzag)")
            ->check(CLI::IsMember(layout_choices()))
            ->capture_default_str();
        cmd->add_option("--strategy", o->strategy,
                        "How the CP group splits attention: ring | allgather | ulysses | "
                        "hybrid:UxR (U * R = --cp; docs/strategies.md)")
            ->capture_default_str();
        cmd->add_option("--dtype", o->dtype,
                        "Attention activations: fp32 | bf16 | fp16 (q, k, v, out and their "
                        "gradients; weights, optimizer and other ops stay fp32; ring only)")
            ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
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
        add_seed_option(cmd, c.seed, "Seed of init, batches and dropout");
        cmd->add_option("--threads", c.threads, "Attention kernel threads per rank")
            ->capture_default_str();
        cmd->add_option("--eval-every", c.eval_every,
                        "Held-out loss every N steps and after the last (the text's last 10 % "
                        "is then never trained on); 0: off")
            ->capture_default_str();
        cmd->add_option("--on-nonfinite", o->on_nonfinite,
                        "A step with a non-finite loss or gradient norm: stop (error naming the "
                        "step) | skip (drop its update)")
            ->check(CLI::IsMember({"stop", "skip"}))
            ->capture_default_str();
        cmd->add_flag("--check", o->check,
                      "First compare step-0 loss and gradients: cp=P recompute, cp=P "
                      "no-recompute, cp=1 (exit 1 if any differs by more than 1e-5; bf16 / fp16: "
                      "their unit roundoff)");
        cmd->add_option("--metrics", o->metrics,
                        "Write one JSON object per step here (JSONL, flushed and checked line "
                        "by line)");
        cmd->add_option("--plot", o->plot,
                        "Draw the loss curve into this PNG at the end (gnuplot, checked before "
                        "training)");
        cmd->add_option("--save", o->save,
                        "Checkpoint directory: the state is saved every --save-every steps, "
                        "when stopped and at the end (DIR/checkpoint.bin, atomically)");
        cmd->add_option("--save-every", o->save_every,
                        "Steps between checkpoints with --save (0: only when stopped and at the "
                        "end)")
            ->capture_default_str();
        cmd->add_flag("--overwrite", o->overwrite,
                      "Let --save replace a checkpoint that is in DIR already (without it, only "
                      "a run resumed from that checkpoint may)");
        cmd->add_option("--resume", o->resume,
                        "Continue from the checkpoint in this directory (same settings; the "
                        "result is bitwise that of an uninterrupted run)");
        add_timeout_option(cmd, o->timeout_s);
        cmd->add_flag("--json", o->json, "Print the summary as JSON (progress goes to stderr)");
        return [o, cmd] {
          o->cp_given = cmd->count("--cp") > 0;
          return run_train(*o);
        };
      }};
}

}  // namespace cpattn::cli
