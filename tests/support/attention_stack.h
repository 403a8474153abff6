// A stack of L attention layers with residuals (x_{l+1} = x_l + attn(x_l, x_l, x_l)), run on one
// rank of a CP group with or without per-layer recompute. Tests and the recompute benchmark use it
// as the smallest realistic training-loop shape: forward of every layer, then backward in reverse.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cpattn/attention.h"
#include "cpattn/generator.h"
#include "cpattn/recompute.h"

namespace cpattn::testing {

struct StackConfig {
  int layers = 4;
  AttentionParams params;
  CpOptions cp;  ///< threads, statistics and the CP strategy of every call
  RecomputeOptions recompute_options;
};

/// One microbatch's activations between its forward and its backward. With recompute only the
/// layer inputs and AttentionCheckpoints survive; without it every layer's ForwardResult does.
struct StackActivations {
  std::vector<Tensor> inputs;                        ///< x_l, [B, S_r, H, D], l = 0..L-1
  std::vector<std::optional<ForwardResult>> states;  ///< without recompute
  std::vector<AttentionCheckpoint> checkpoints;      ///< with recompute
  RngState first_rng;                                ///< generator state before layer 0
  Tensor output;                                     ///< x_L
};

/// Forward of every layer on this rank; draws one RngState per layer from `generator`.
StackActivations stack_forward(Communicator& comm, const StackConfig& config, ConstView x,
                               const SequenceSharding& seq, Generator& generator, bool recompute);

/// Backward of every layer in reverse order given dL/dx_L; returns dL/dx_0 [B, S_r, H, D].
/// Layer l's backward is for (and, with recompute, replays) RngState {first_rng.seed,
/// first_rng.offset + l} (as a training loop restoring its generator would) unless
/// `replay_override` gives another one (misuse tests). Frees each layer's state as soon as its
/// backward is done.
Tensor stack_backward(Communicator& comm, const StackConfig& config, StackActivations& acts,
                      ConstView dy, const SequenceSharding& seq,
                      std::optional<RngState> replay_override = std::nullopt);

/// Deterministic pseudo-random values in [-1, 1) from a seed (splitmix64).
void fill_uniform(Tensor& t, uint64_t seed);

}  // namespace cpattn::testing
