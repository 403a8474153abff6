// `cpattn generate`: loads a `cpattn train --save` checkpoint and samples bytes from its model
// after a prompt (temperature, top-k, seeded: the same seed gives the same text).
#include "train/generate.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/job.h"
#include "cpattn/error.h"
#include "train/blas.h"
#include "train/checkpoint.h"

namespace cpattn::cli {

namespace {

struct GenerateOptions {
  std::string resume;
  std::string prompt;
  train::SampleOptions sample;
  bool context_given = false;
  double timeout_s = 300;
};

int run_generate(GenerateOptions o) {
  refuse_mpirun_without_mpi("generate", std::nullopt);
  train::set_blas_threads(1);
  o.sample.timeout = deadline(o.timeout_s);
  const train::Checkpoint checkpoint = train::load_checkpoint(o.resume);
  // Longer contexts than the model was trained on are allowed but were never seen in training.
  if (!o.context_given) o.sample.context = checkpoint.seq_len;
  train::validate_sample_options(o.sample);
  const std::vector<uint8_t> prompt(o.prompt.begin(), o.prompt.end());
  const std::vector<uint8_t> text =
      train::generate_bytes(train::checkpoint_params(checkpoint), prompt, o.sample);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  CPATTN_CHECK(std::fflush(stdout) == 0 && std::ferror(stdout) == 0, ErrorCode::kIo,
               "writing the generated text to stdout failed: ", std::strerror(errno));
  return 0;
}

}  // namespace

Command generate_command() {
  return {
      "generate", [](CLI::App& app) -> std::function<int()> {
        auto o = std::make_shared<GenerateOptions>();
        CLI::App* cmd = app.add_subcommand(
            "generate",
            "Sample text from a model saved by `cpattn train --save DIR`: prints the prompt "
            "and the bytes drawn after it");
        cmd->add_option("--resume", o->resume, "Checkpoint directory (cpattn train --save)")
            ->required();
        cmd->add_option("--prompt", o->prompt, "Text to continue (at least one byte)")->required();
        train::SampleOptions& s = o->sample;
        cmd->add_option("--tokens", s.tokens, "Bytes to generate")->capture_default_str();
        cmd->add_option("--temperature", s.temperature,
                        "Sampling temperature (0: always the most likely byte)")
            ->capture_default_str();
        cmd->add_option("--top-k", s.top_k, "Draw among the k most likely bytes (0: all)")
            ->capture_default_str();
        add_seed_option(cmd, s.seed, "Seed of the draws");
        CLI::Option* context =
            cmd->add_option("--context", s.context,
                            "Feed at most this many trailing bytes (default: the training --seq)");
        cmd->add_option("--threads", s.threads, "Attention kernel threads")->capture_default_str();
        add_timeout_option(cmd, o->timeout_s);
        return [o, context] {
          o->context_given = context->count() > 0;
          return run_generate(*o);
        };
      }};
}

}  // namespace cpattn::cli
