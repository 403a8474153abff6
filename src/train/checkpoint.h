// Checkpoints of `cpattn train --save DIR`: the whole state of a run after some updates (weights,
// AdamW moments and step count, data position, dropout Generator, loss history, the settings that
// shaped it), in a small checksummed binary format (docs/reliability.md), written atomically.
// `--resume DIR` continues from one bitwise as if the run had never stopped; `cpattn generate`
// samples text from its weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cpattn/rng.h"
#include "train/agreement.h"
#include "train/model_config.h"

namespace cpattn::train {

/// The held-out loss after update `step` (1-based).
struct EvalPoint {
  int64_t step = 0;
  double loss = 0.0;
  bool operator==(const EvalPoint&) const = default;
};

/// A run's state after `step` updates.
struct Checkpoint {
  ModelConfig model;             ///< the model's shape and init seed
  int64_t seq_len = 0;           ///< training sequence length (generate's longest context)
  std::string config_text;       ///< training settings, "flag\tvalue\n" each (training_config_text)
  int64_t step = 0;              ///< updates completed
  int64_t data_position = 0;     ///< index of the next batch to sample (BatchSampler::sample)
  RngState generator;            ///< the dropout Generator's next state
  int64_t skipped_steps = 0;     ///< updates dropped by --on-nonfinite skip
  std::vector<double> losses;    ///< loss of updates 1..step
  std::vector<EvalPoint> evals;  ///< held-out losses so far
  int64_t adam_steps = 0;        ///< AdamW::steps_taken()
  std::vector<float> weights;    ///< ModelParams::flat()
  std::vector<float> adam_m;     ///< AdamW::first_moment()
  std::vector<float> adam_v;     ///< AdamW::second_moment()
};

/// File format version written and read (docs/reliability.md, "Checkpoint format").
inline constexpr uint32_t kCheckpointVersion = 1;
/// The checkpoint's file name inside --save / --resume DIR.
inline constexpr const char* kCheckpointFileName = "checkpoint.bin";
/// The (empty) file in a --save directory whose flock marks the directory in use by a run
/// (CheckpointDirLock).
inline constexpr const char* kCheckpointLockName = "checkpoint.lock";
/// Largest checkpoint file read (64 GiB).
inline constexpr int64_t kMaxCheckpointBytes = int64_t{1} << 36;

/// "flag\tvalue\n" for every field with training = true, in order: what a checkpoint records
/// and a resumed run must match.
std::string training_config_text(const std::vector<ConfigField>& fields);

/// The bytes of the format: magic "CPATTNCK", version, total size, digest of config_text, the
/// fields of Checkpoint in declaration order, then a cpattn::Digest of every byte before it.
std::vector<std::byte> encode_checkpoint(const Checkpoint& checkpoint);

/// Parses and checks encode_checkpoint's bytes; `source` names them in errors. Throws
/// Error(kIo) "<source> is not a cpattn checkpoint ..." (too short, bad magic), "... has format
/// version V; this cpattn reads version 1", "... is truncated: N bytes, its header says M",
/// "... is corrupted: checksum ..." and "... is inconsistent: ..." (sizes that disagree with the
/// model shape or the step count).
Checkpoint decode_checkpoint(std::span<const std::byte> bytes, const std::string& source);

/// Throws GroupError(kInvalidArgument) "<source>: the checkpoint was written by a run with other
/// settings: --lr 0.001 in the checkpoint, 0.003 now; ..." unless every training field of
/// `fields` has the checkpoint's value (and the checkpoint has no other). Every rank holds the
/// same checkpoint and settings, so every rank throws alike.
void check_resumable(const Checkpoint& checkpoint, const std::vector<ConfigField>& fields,
                     const std::string& source);

/// DIR/checkpoint.bin.
std::string checkpoint_path(const std::string& dir);

/// An exclusive advisory lock (flock) on a --save directory's kCheckpointLockName file, held
/// while the object lives and released by the kernel when the process ends, however it ends.
/// On a file system without locks it holds the file open and locks nothing.
class CheckpointDirLock {
 public:
  CheckpointDirLock(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&& other) noexcept;
  ~CheckpointDirLock();

 private:
  friend CheckpointDirLock prepare_checkpoint_dir(const std::string& dir, bool may_replace);
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Creates DIR when missing (parents too), locks it for this run and checks that a checkpoint
/// can be written there, before any training. Throws Error(kIo) naming DIR, and
/// Error(kInvalidArgument) when another process holds DIR's lock (two runs saving into one
/// directory would replace each other's checkpoints) or DIR/checkpoint.bin exists already,
/// unless `may_replace` (--overwrite, or a run that resumes from that very checkpoint): a run
/// never replaces another run's checkpoint by accident. Keep the returned lock for the run.
[[nodiscard]] CheckpointDirLock prepare_checkpoint_dir(const std::string& dir, bool may_replace);

/// Whether the --save DIR and the --resume DIR name one checkpoint file (false when either is
/// empty or DIR/checkpoint.bin does not exist).
bool same_checkpoint(const std::string& save_dir, const std::string& resume_dir);

/// Writes encode_checkpoint(checkpoint) to checkpoint_path(dir) atomically
/// (write_file_atomically: a crash leaves the previous checkpoint intact). Throws Error(kIo).
void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint);

/// The bytes of checkpoint_path(dir) (a regular file of at most kMaxCheckpointBytes).
/// Throws Error(kIo) / Error(kInvalidArgument) as read_regular_file.
std::vector<std::byte> read_checkpoint_bytes(const std::string& dir);

/// decode_checkpoint(read_checkpoint_bytes(dir), checkpoint_path(dir)).
Checkpoint load_checkpoint(const std::string& dir);

}  // namespace cpattn::train
