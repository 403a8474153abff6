// The strategies behind strategy_attention_forward / strategy_attention_backward (strategy.h),
// each on arguments the dispatcher validated (validate_ring_call, check_strategy).
#pragma once

#include <span>

#include "cp/ring_detail.h"
#include "cpattn/strategy.h"

namespace cpattn::detail {

/// The arguments every strategy's forward and backward share, validated once.
struct StrategyCall {
  Communicator& comm;
  ConstView q, k, v;
  const SequenceSharding& q_seq;
  const SequenceSharding& kv_seq;
  const AttentionParams& params;
  RngState rng;
  const AttentionOptions& options;
  RingDims d;
};

/// The state of a backward: dout, and the forward's out and lse of this rank's queries.
struct BackwardState {
  ConstView dout, out;
  std::span<const float> lse;
};

unchecked::RingForwardResult allgather_forward(const StrategyCall& c);
AttentionGradients allgather_backward(const StrategyCall& c, const BackwardState& s);
unchecked::RingForwardResult ulysses_forward(const StrategyCall& c);
AttentionGradients ulysses_backward(const StrategyCall& c, const BackwardState& s);
unchecked::RingForwardResult hybrid_forward(const StrategyCall& c);
AttentionGradients hybrid_backward(const StrategyCall& c, const BackwardState& s);

}  // namespace cpattn::detail
