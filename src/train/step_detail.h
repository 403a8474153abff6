// Pieces shared by the step-0 check and the training loop (trainer.cpp, train_loop.cpp): the
// per-rank step options, the group-size check, the training part of the text and the replica
// comparison.
#pragma once

#include <cstdint>
#include <span>

#include "cpattn/communicator.h"
#include "train/model.h"
#include "train/train_config.h"

namespace cpattn::train {

/// The StepOptions of rank `rank` under `config`, with or without recompute.
StepOptions step_options(const TrainConfig& config, int rank, bool recompute);

/// Throws Error(kInvalidArgument) unless comm.size() == config.cp.
void check_group_size(const Communicator& comm, const TrainConfig& config);

/// text[0, split_text(config, size).train_bytes): what the sampler draws training windows from.
std::span<const uint8_t> training_part(const TrainConfig& config, std::span<const uint8_t> text);

/// Every rank learns every rank's weight digest (a sum of one-hot vectors: exact in double,
/// since each 32-bit half is an integer below 2^53) and all throw Error(kInternal) "replicas
/// diverged: rank 0 weight digest X but rank 2 Y;" if any differs from rank 0's. Collective.
void check_replicas(Communicator& comm, uint64_t digest);

}  // namespace cpattn::train
